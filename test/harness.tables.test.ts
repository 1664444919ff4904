/**
 * The evaluations on the harness (src/harness/) write the same tables as before it: every scenario of
 * test/helpers/harness-scenarios.ts (guard eval on the scripted endpoint and on the planted model, s3 eval on the
 * scripted endpoint, steer and the behavioural refusal of reproduce on the planted model) is run on this checkout and
 * compared byte for byte with test/fixtures/harness/<scenario>.txt — the outputs of the code before the harness
 * (how they were generated: the comment at the top of harness-scenarios.ts). Latencies, temp paths and ports are masked.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fixtureText, runScenario, SCENARIOS } from './helpers/harness-scenarios.ts';
import { repoRoot } from './helpers/shared.ts';

for (const s of SCENARIOS) {
  test(`harness: ${s.name} writes the tables the pre-harness code wrote`, async () => {
    const got = fixtureText(await runScenario(repoRoot, s));
    const want = readFileSync(join(repoRoot, 'test', 'fixtures', 'harness', `${s.name}.txt`), 'utf8');
    assert.equal(got, want);
  });
}
