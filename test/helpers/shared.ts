/**
 * The one way tests reach ../shared (fixtures, templates, data that we must not commit).
 * Default `../shared` relative to the repo root; override with SAFEKEEP_SHARED.
 * When it is absent, tests skip with a visible reason (`t.skip(reason)`), so a fresh clone stays green.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestContext } from 'node:test';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const sharedRoot = resolve(repoRoot, process.env.SAFEKEEP_SHARED ?? '../shared');

/** Absolute path of `../shared/<parts>` if it exists, else null. */
export function sharedPath(...parts: string[]): string | null {
  const p = join(sharedRoot, ...parts);
  return existsSync(p) ? p : null;
}

/**
 * Returns the path, or marks the test skipped with the reason and returns null.
 * Usage: `const dir = needShared(t, 'fixtures', 'hf-reference'); if (!dir) return;`
 */
export function needShared(t: TestContext, ...parts: string[]): string | null {
  const p = sharedPath(...parts);
  if (!p) t.skip(`needs ../shared/${parts.join('/')} (set SAFEKEEP_SHARED); not present here`);
  return p;
}
