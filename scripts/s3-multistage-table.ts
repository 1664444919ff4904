/**
 * docs/s3.md's multistage table: `s3 eval --bench multistage` (data/multistage, our suite after S³'s six risk types)
 * against the scripted endpoint of the tests (test/helpers/multistage-mock.ts: a gullible agent and a guard with fixed
 * rules, on 127.0.0.1) — every configuration, each single skill and the LlamaFirewall-style baseline. No model: the
 * figures show which stage's defense stops which risk and what recovery keeps, not how well a model judges.
 *
 *   node --import tsx scripts/s3-multistage-table.ts [--limit 10] [--out results/s3-multistage-scripted]
 */
import { join, resolve } from 'node:path';
import { run as s3Eval } from '../src/cli/commands/s3-eval.ts';
import { repoRoot } from '../src/data/locate.ts';
import { startMockUpstream } from '../test/helpers/guard-mock.ts';
import { multistageScript } from '../test/helpers/multistage-mock.ts';

const arg = (name: string, dflt: string) => { const i = process.argv.indexOf(`--${name}`); return i > 0 ? process.argv[i + 1]! : dflt; };
const out = resolve(arg('out', join(repoRoot, 'results', 's3-multistage-scripted')));
const configs = ['none', ...['safekeep-judge', 'memory-guard', 'plan-rules', 'tool-rules', 'incident-response', 'parse-data', 'output-leak'].map((s) => `single:${s}`),
  'no-recovery', 'full', 'full-no-filter', 'full-no-guidance', 'llamafirewall'].join(',');
const up = await startMockUpstream(multistageScript);
try {
  await s3Eval(['--endpoint', up.url, '--endpoint-model', 'scripted', '--bench', 'multistage', '--limit', arg('limit', '10'), '--max-steps', '8',
    '--configs', configs, '--out', out, '--no-cache']);
} finally {
  await up.close();
}
