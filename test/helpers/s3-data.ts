/**
 * The miniature InjecAgent and AgentHarm of the S³ tests (test/fixtures/s3/README.md: our own cases in the data sets'
 * formats). They are kept as one file, `miniature.json` (relative path → content), so nothing in the repository is
 * named like a data-set file; the loaders read data-set folders, so the first call writes the two folders into a temp
 * directory (content byte-identical to the files' JSON at 1-space indent), removed when the process exits.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { repoRoot } from './shared.ts';

export interface S3Data {
  /** the folder holding both data sets */
  root: string;
  /** an InjecAgent data folder (test_cases_<attack>_<setting>.json, tools.json, attacker responses) */
  injecagent: string;
  /** an AgentHarm copy (dataset/*_behaviors_test_public.json, tools.json) */
  agentharm: string;
}

let written: S3Data | null = null;

export function s3Data(): S3Data {
  if (written) return written;
  const files = JSON.parse(readFileSync(join(repoRoot, 'test', 'fixtures', 's3', 'miniature.json'), 'utf8')) as Record<string, unknown>;
  const root = mkdtempSync(join(tmpdir(), 'safekeep-s3-data-'));
  process.on('exit', () => rmSync(root, { recursive: true, force: true }));
  for (const [rel, content] of Object.entries(files)) {
    const path = join(root, rel);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, JSON.stringify(content, null, 1));
  }
  written = { root, injecagent: join(root, 'injecagent'), agentharm: join(root, 'agentharm') };
  return written;
}
