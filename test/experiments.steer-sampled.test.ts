/**
 * A sampled steering sweep on the planted model (`steer --samples K --temperature T`): K answers per request with
 * seeds S, S+1, …; Table 3 reports refusal over requests × answers with its Wilson interval and a per-prompt
 * bootstrap interval (its own column in table3.md, four more columns in table3.csv), computed from the generations
 * files independently here; a greedy sweep's table has none of them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sampledRate } from '../src/analysis/sampled-rate.ts';
import { wilsonInterval } from '../src/analysis/stats.ts';
import { loadPairSet } from '../src/data/load.ts';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { steerSweep } from '../src/experiments/steer/sweep.ts';

test('steer --samples 3 --temperature 1 on the planted model: Wilson and per-prompt bootstrap columns in Table 3', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'steer-sampled-'));
  process.env.SAFEKEEP_QUIET = '1';
  try {
    const pairs = await loadPairSet('pairs');
    await writePlantedModel(join(dir, 'planted'), { lexiconPairs: pairs.pairs });
    const alphas = [0, 1, 1.5];
    const r = await steerSweep({
      model: join(dir, 'planted'), data: 'pairs', results: join(dir, 'results'), limit: 24,
      alphas: alphas.map((value) => ({ kind: 'absolute' as const, value })), layer: 'auto', direction: 'schema-harmful',
      maxNewTokens: 10, requests: ['harmful'], engine: { cacheDir: join(dir, '.graphs'), quiet: true },
      sampling: { temperature: 1, seed: 7 }, samples: 3,
    });
    const md = readFileSync(join(r.outDir, 'table3.md'), 'utf8');
    assert.match(md, /\| Refusal \[95% CI\] \| Refusal, per-prompt bootstrap \[95% CI\] \|/);
    assert.match(md, /Sampled \(temperature 1, seed 7 \(sample j: seed \+ j\)\), 3 answers per request/);
    const csv = readFileSync(join(r.outDir, 'table3.csv'), 'utf8').trim().split('\n');
    assert.match(csv[0]!, /,condition,prompts,samples,boot_lo_percent,boot_hi_percent$/);
    for (const [k, alpha] of alphas.entries()) {
      const lines = readFileSync(join(r.outDir, `generations.harmful.alpha${alpha}.jsonl`), 'utf8').trim().split('\n').slice(1).map((l) => JSON.parse(l) as { pairId: string; label: string; sample: number; seed: number });
      const prompts = new Set(lines.map((g) => g.pairId));
      assert.equal(lines.length, prompts.size * 3);
      for (const g of lines) assert.equal(g.seed, 7 + g.sample);
      // the row, recomputed from the generations: pooled counts, Wilson over all answers, the bootstrap over prompts
      const row = r.sweeps[0]!.rows[k]!;
      const refusals = lines.filter((g) => g.label === 'refusal').length;
      assert.deepEqual([row.n, row.counts.refusal, row.sampled!.prompts, row.sampled!.samples], [lines.length, refusals, prompts.size, 3]);
      assert.deepEqual(row.sampled!.refusal.wilson, wilsonInterval(refusals, lines.length));
      const per = [...prompts].sort().map((p) => ({ k: lines.filter((g) => g.pairId === p && g.label === 'refusal').length, n: 3 }));
      const again = sampledRate(per);
      const byPair = new Map<string, { k: number; n: number }>();
      for (const g of lines) { const c = byPair.get(g.pairId) ?? { k: 0, n: 0 }; c.n++; if (g.label === 'refusal') c.k++; byPair.set(g.pairId, c); }
      assert.deepEqual(row.sampled!.refusal.bootstrap, sampledRate([...byPair.values()]).bootstrap);
      assert.equal(again.rate, refusals / lines.length);
      assert.ok(row.sampled!.refusal.bootstrap.lo <= again.rate && again.rate <= row.sampled!.refusal.bootstrap.hi);
      // (the direction's name is quoted and holds commas: the columns are counted from the end)
      const cells = csv.filter((l) => { const c = l.split(','); return c.at(-10) === 'refusal' && c.at(-13) === String(alpha); });
      assert.equal(cells.length, 1);
      const c = cells[0]!.split(',');
      assert.deepEqual(c.slice(-4).map(Number), [prompts.size, 3, +(100 * row.sampled!.refusal.bootstrap.lo).toFixed(4), +(100 * row.sampled!.refusal.bootstrap.hi).toFixed(4)]);
    }
    // steering still moves refusal under sampling; where the answers to one request agree, the per-prompt interval is the wider one
    const mid = r.sweeps[0]!.rows[1]!.sampled!.refusal;
    assert.ok(mid.bootstrap.hi - mid.bootstrap.lo > mid.wilson.hi - mid.wilson.lo, JSON.stringify(mid));
    assert.ok(r.sweeps[0]!.rows[2]!.counts.refusal > r.sweeps[0]!.rows[0]!.counts.refusal);
  } finally {
    delete process.env.SAFEKEEP_QUIET;
    rmSync(dir, { recursive: true, force: true });
  }
});
