/**
 * `safekeep data check`: statistics computed independently here match the command's JSON; a bad row exits 2 with
 * one line naming file and row, never a stack.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from './helpers/shared.ts';
import { splitPairs } from '../src/data/split.ts';
import { loadPairSet } from '../src/data/load.ts';

const execFileP = promisify(execFile);

async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await execFileP(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args]);
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, stdout: x.stdout, stderr: x.stderr };
  }
}

test('data check --json: counts agree with the loaded set', async () => {
  const set = await loadPairSet('pairs');
  const r = await cli('data', 'check', 'pairs', '--json', '--seed', '3');
  assert.equal(r.code, 0, r.stderr);
  const st = JSON.parse(r.stdout) as {
    pairs: number; hash: string; categories: Record<string, number>; tools: number;
    groups: { count: number };
    split: { seed: number; extraction: number; evaluation: number; groups: { extraction: number; evaluation: number } };
  };
  assert.equal(st.pairs, set.pairs.length);
  assert.equal(st.hash, set.hash);
  const cats: Record<string, number> = {};
  for (const p of set.pairs) cats[p.category] = (cats[p.category] ?? 0) + 1;
  assert.deepEqual(st.categories, cats);
  assert.equal(st.tools, new Set(set.pairs.flatMap((p) => p.tools.map((t) => t.function.name))).size);
  // group-disjoint split: 70 % of the groups (scenarios), whatever their sizes
  const groups = new Set(set.pairs.map((p) => p.group ?? p.id));
  assert.equal(st.groups.count, groups.size);
  const sp = splitPairs(set, 3);
  assert.deepEqual(st.split, {
    seed: 3, extraction: sp.extraction.length, evaluation: sp.evaluation.length,
    groups: { extraction: Math.round(0.7 * groups.size), evaluation: groups.size - Math.round(0.7 * groups.size) },
  });
});

test('data check: a bad row exits 2 with one line naming file and row', async () => {
  const d = mkdtempSync(join(tmpdir(), 'sk-check-'));
  try {
    const f = join(d, 'bad.jsonl');
    const good = { id: 'a', category: 'fraud', tools: [{ type: 'function', function: { name: 't', description: '', parameters: { type: 'object', properties: {} } } }], harmful: { prompt: 'h', targetFunctions: ['t'] }, benign: { prompt: 'b', targetFunctions: ['t'] } };
    writeFileSync(f, [good, { ...good, id: 'b', benign: { prompt: 'b', targetFunctions: ['u'] } }].map((x) => JSON.stringify(x)).join('\n'));
    const r = await cli('data', 'check', f);
    assert.equal(r.code, 2);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.ok(r.stderr.includes(`${f}:2`) && r.stderr.includes("target function 'u'"), r.stderr);
  } finally { rmSync(d, { recursive: true, force: true }); }
});
