/** CI runs every notebook top to bottom on its default (the planted synthetic model) and checks what it prints. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './helpers/shared.ts';

const expect: Record<string, RegExp[]> = {
  '01-locating-the-source.ts': [/ℓ\* = [234]/, /Table 1/, /agent\.flattened/],
  '02-mechanism.ts': [/cos\(r, planted r\)\s+\S+\s+\S+\s+1\.000/, /cos\(R_harmful, r\)\s+\S+\s+\S+\s+-(0\.99\d|1\.000)/],
  '03-steering.ts': [/α=1\.5 .*refusal\s+100\.0%/],
};

const notebooks = readdirSync(join(repoRoot, 'notebooks')).filter((f) => /^\d\d-.*\.ts$/.test(f)).sort();

test('every notebook has expectations here', () => {
  assert.deepEqual(notebooks, Object.keys(expect).sort());
});

for (const nb of notebooks) {
  test(`notebook ${nb} runs top to bottom on the planted model`, () => {
    const cache = mkdtempSync(join(tmpdir(), 'nb-'));
    try {
      const r = spawnSync(process.execPath, ['--import', 'tsx', join(repoRoot, 'notebooks', nb)], {
        cwd: repoRoot, encoding: 'utf8', env: { ...process.env, SAFEKEEP_CACHE: cache, SAFEKEEP_QUIET: '1' }, timeout: 300_000,
      });
      assert.equal(r.status, 0, r.stderr);
      for (const re of expect[nb] ?? []) assert.match(r.stdout, re);
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  });
}
