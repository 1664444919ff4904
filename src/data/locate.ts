/**
 * Where datasets live. The one place that knows the lookup order for a named dataset:
 *   1. <dirs.data>/<name>            (the CLI passes $SAFEKEEP_DATA)
 *   2. data/<name>                   (what `safekeep data pull <name>` writes, git-ignored)
 *   3. <dirs.shared>/data/<name>     (default ../shared, the read-only copy next to the repo; the CLI passes $SAFEKEEP_SHARED)
 * A folder counts only when it holds something besides hidden files: an empty or half-made one (e.g. only the
 * `.gitignore` an interrupted pull of an older version left) must not shadow a good copy further down the list.
 */
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SafekeepError } from '../util/errors.ts';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The bundled pair set (written by the safekeep authors, committed). */
export const bundledPairsDir = join(repoRoot, 'data', 'pairs');

/** Folders that override the default data locations (read from the environment by the CLI, cli/env.ts). */
export interface DataDirs {
  /** looked in first, and where `data pull` writes */
  data?: string;
  /** the read-only shared folder (default ../shared) */
  shared?: string;
}

/** Where `safekeep data pull <name>` writes: <dirs.data>/<name> when given, else data/<name>. */
export function pullDestination(name: string, dirs: DataDirs = {}): string {
  return dirs.data ? resolve(dirs.data, name) : join(repoRoot, 'data', name);
}

export function datasetCandidates(name: string, dirs: DataDirs = {}): string[] {
  const out: string[] = [];
  if (dirs.data) out.push(resolve(dirs.data, name));
  out.push(join(repoRoot, 'data', name));
  out.push(resolve(repoRoot, dirs.shared ?? '../shared', 'data', name));
  return out;
}

/** A file, or a folder holding at least one entry that is not hidden. */
function holdsData(path: string): boolean {
  if (!existsSync(path)) return false;
  try {
    return readdirSync(path).some((e) => !e.startsWith('.'));
  } catch {
    return true; // a file (or unreadable): let the reader give the precise error
  }
}

/** First candidate folder that holds data, or a SafekeepError listing where we looked. */
export function locateDataset(name: string, dirs: DataDirs = {}): string {
  const candidates = datasetCandidates(name, dirs);
  const found = candidates.find(holdsData);
  if (found) return found;
  const empty = candidates.filter((c) => existsSync(c));
  throw new SafekeepError(
    `dataset '${name}' not found (looked in ${candidates.join(', ')}${empty.length ? `; ${empty.join(', ')} ${empty.length === 1 ? 'is' : 'are'} empty or half-made` : ''}); run \`safekeep data pull ${name}\` or set SAFEKEEP_DATA`,
  );
}
