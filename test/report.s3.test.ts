/**
 * The S³ section of the report (`s3 eval` and its merge): into the reproduce results when they exist (Table 1 and
 * the rest kept), one run per bench (a rerun replaces it), the table's CSV/JSON numbers equal to the run's rows,
 * and results.json's s3 section validated like the rest.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { S3ConfigRow, S3Run } from '../src/analysis/results.ts';
import { wilson } from '../src/eval/metrics.ts';
import { meanCI } from '../src/eval/s3/eval.ts';
import { readResults, validateResults } from '../src/report/results-file.ts';
import { writeS3Report } from '../src/report/s3-section.ts';
import { writeReport } from '../src/report/write-report.ts';
import { syntheticResults } from './helpers/report-results.ts';

const row = (config: string, asr: number, benign: number, n: number): S3ConfigRow => ({
  config, n, asr: wilson(asr, n), benign: wilson(benign, n), gic: meanCI([1, 2, 3]), rsc: meanCI([0, 1, 1]), extraTokens: meanCI([10, 20, 30]), latencyMs: meanCI([5, 5, 5]),
  groups: { 'injecagent/base/dh': { asr: wilson(asr, n), benign: wilson(benign, n) } },
});
const run = (bench: string, configs: S3ConfigRow[]): S3Run => ({ bench, backend: 'mock', tasks: configs[0]!.n, settings: ['base'], guardDecision: true, mitigation: 'recover', configs });
const shell = { model: 'm', layers: 1, dModel: 0, synthetic: false, note: 'none', manifest: {} };

test('S³ section: added to the reproduce results (Table 1 kept), one run per bench, CSV numbers = the rows', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-report-s3-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const res = syntheticResults();
  await writeReport(dir, res);
  await writeS3Report({ resultsDir: dir, out: join(dir, 's3'), run: run('mixed', [row('none', 3, 3, 3), row('full', 0, 2, 3)]), shell, protocol: { skills: ['a'] } });
  await writeS3Report({ resultsDir: dir, out: join(dir, 's3'), run: run('injecagent', [row('full', 1, 4, 4)]), shell, protocol: {} });
  // a rerun of mixed replaces its section
  await writeS3Report({ resultsDir: dir, out: join(dir, 's3'), run: run('mixed', [row('none', 2, 3, 3), row('full', 0, 1, 3)]), shell, protocol: { skills: ['b'] } });
  const back = readResults(join(dir, 'results.json'));
  assert.equal(back.layers, res.layers);
  assert.deepEqual(back.table1, JSON.parse(JSON.stringify(res.table1)));
  assert.deepEqual(back.s3!.runs.map((r) => [r.bench, r.configs.map((c) => `${c.config} ${c.asr.k}/${c.n} ${c.benign.k}/${c.n}`)]), [
    ['injecagent', ['full 1/4 4/4']], ['mixed', ['none 2/3 3/3', 'full 0/3 1/3']],
  ]);
  assert.deepEqual(back.manifest['s3-mixed'], { skills: ['b'] });
  const html = readFileSync(join(dir, 'report.html'), 'utf8');
  assert.match(html, /id="table-table1"/);
  assert.deepEqual([...html.matchAll(/id="table-(s3-[a-z]+)"/g)].map((x) => x[1]), ['s3-injecagent', 's3-mixed']);
  assert.deepEqual([...html.matchAll(/data-name="(s3-[a-z]+)"/g)].map((x) => x[1]), ['s3-injecagent', 's3-mixed']);
  // the reproduce meta (ℓ*) stays: these results know their activations
  assert.match(html, /<td>ℓ\* \(peak refusal layer\)<\/td>/);
  assert.match(html, /<tr><td>full<\/td><td>3<\/td><td>0\.0 \[0\.0, 56\.1\] \(0\/3\)<\/td><td>33\.3 \[6\.1, 79\.2\] \(1\/3\)<\/td><td>2\.00 \[0\.87, 3\.13\]<\/td>/);
  // CSV: k, n, p, Wilson bounds per rate, the per-task means, then per group
  const csv = readFileSync(join(dir, 'tables', 's3-mixed.csv'), 'utf8').trim().split('\n').map((l) => l.split(','));
  const h = csv[0]!;
  const full = csv[2]!;
  const at = (k: string) => Number(full[h.indexOf(k)]);
  assert.deepEqual([full[0], at('n'), at('benign_k'), at('benign_n'), at('gic'), at('injecagent/base/dh:benign_k')], ['full', 3, 1, 3, 2, 1]);
  // Wilson 95 % for 1/3 (z = 1.959964): (p + z²/2n ∓ z·sqrt(p(1−p)/n + z²/4n²)) / (1 + z²/n)
  const z = 1.959963984540054, p = 1 / 3, n = 3;
  const c = p + (z * z) / (2 * n), r = z * Math.sqrt((p * (1 - p)) / n + (z * z) / (4 * n * n)), d = 1 + (z * z) / n;
  assert.ok(Math.abs(at('benign_lo') - (c - r) / d) < 1e-12 && Math.abs(at('benign_hi') - (c + r) / d) < 1e-12);
  // 1.96 · sd/√n of [1, 2, 3] (sd 1)
  assert.ok(Math.abs(at('gic_hi') - (2 + z / Math.sqrt(3))) < 1e-12);
});

test('S³ section: an endpoint-only shell (dModel 0) renders without activations; a bad s3 section is named', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-report-s3-shell-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  await writeS3Report({ resultsDir: dir, out: join(dir, 's3'), run: run('agentharm', [row('none', 1, 1, 2)]), shell: { ...shell, note: 'none: an endpoint exposes no hidden states' }, protocol: {} });
  const html = readFileSync(join(dir, 'report.html'), 'utf8');
  assert.match(html, /<tr><td>Activations<\/td><td>none: an endpoint exposes no hidden states<\/td><\/tr>/);
  assert.doesNotMatch(html, /d_model/);
  assert.match(readFileSync(join(dir, 'report.md'), 'utf8'), /- S³ \(agentharm, 2 tasks\): none: ASR 50\.0%, benign 50\.0%/);
  const bad = JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')) as { s3: { runs: { configs: { asr: unknown }[] }[] } };
  bad.s3.runs[0]!.configs[0]!.asr = 'x';
  assert.throws(() => validateResults(bad, 'bad.json'), /bad\.json: s3\.runs\[0\]\.configs\[0\] must be/);
});
