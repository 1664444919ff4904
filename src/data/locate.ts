/**
 * Where datasets live. The one place that knows the lookup order for a named dataset:
 *   1. $SAFEKEEP_DATA/<name>
 *   2. data/<name>            (what `safekeep data pull <name>` writes, git-ignored)
 *   3. ../shared/data/<name>  ($SAFEKEEP_SHARED/data/<name>; the read-only copy next to the repo, when present)
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SafekeepError } from '../util/errors.ts';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The bundled pair set (written by the safekeep authors, committed). */
export const bundledPairsDir = join(repoRoot, 'data', 'pairs');

/** Where `safekeep data pull <name>` writes: $SAFEKEEP_DATA/<name> when set, else data/<name>. */
export function pullDestination(name: string, env: NodeJS.ProcessEnv = process.env): string {
  return env.SAFEKEEP_DATA ? resolve(env.SAFEKEEP_DATA, name) : join(repoRoot, 'data', name);
}

export function datasetCandidates(name: string, env: NodeJS.ProcessEnv = process.env): string[] {
  const out: string[] = [];
  if (env.SAFEKEEP_DATA) out.push(resolve(env.SAFEKEEP_DATA, name));
  out.push(join(repoRoot, 'data', name));
  out.push(resolve(repoRoot, env.SAFEKEEP_SHARED ?? '../shared', 'data', name));
  return out;
}

/** First existing candidate folder, or a SafekeepError listing where we looked. */
export function locateDataset(name: string, env: NodeJS.ProcessEnv = process.env): string {
  const candidates = datasetCandidates(name, env);
  const found = candidates.find((c) => existsSync(c));
  if (found) return found;
  throw new SafekeepError(
    `dataset '${name}' not found (looked in ${candidates.join(', ')}); run \`safekeep data pull ${name}\` or set SAFEKEEP_DATA`,
  );
}
