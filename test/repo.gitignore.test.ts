/** No tracked file is matched by .gitignore (an ignored tracked file, e.g. figures/README.md, silently stops being updated by `git add -A`). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../src/data/locate.ts';

test('.gitignore matches no tracked file', (t) => {
  if (!existsSync(join(repoRoot, '.git'))) { t.skip('not a git checkout (no .git): nothing to compare'); return; }
  const r = spawnSync('git', ['ls-files', '--cached', '--ignored', '--exclude-standard'], { cwd: repoRoot, encoding: 'utf8' });
  if (r.error) { t.skip(`git is not available: ${r.error.message}`); return; }
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(r.stdout.split('\n').filter(Boolean), []);
});
