/**
 * Steering sweep (Table 3) on the planted model, where the outcome of every request is predictable: subtracting
 * α·R̂ at ℓ* moves hidden[L]·r by −α·(R̂·r) exactly (later blocks are identity), and the planted lm_head refuses
 * iff hidden[L]·r > τ. So the refusal count per α is computable from the cached activations alone.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PLANTED, writePlantedModel } from '../src/experiments/planted.ts';
import { parseAlphas } from '../src/experiments/steer/conditions.ts';
import { steerSweep } from '../src/experiments/steer/sweep.ts';
import { readActivationCache } from '../src/cache/store.ts';
import { loadPairSet } from '../src/data/load.ts';
import { SafekeepError } from '../src/util/errors.ts';

test('parseAlphas: absolute and residual-relative forms', () => {
  assert.deepEqual(parseAlphas('0,4,0.5x'), [{ kind: 'absolute', value: 0 }, { kind: 'absolute', value: 4 }, { kind: 'relative', value: 0.5 }]);
  assert.throws(() => parseAlphas('1,abc'), SafekeepError);
});

test('steer on the planted model: refusal counts per α match the construction; report gets Table 3', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'steer-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  process.env.SAFEKEEP_QUIET = '1';
  try {
    const pairs = await loadPairSet('pairs');
    const truth = await writePlantedModel(join(dir, 'planted'), { lexiconPairs: pairs.pairs });
    const alphas = [0, 0.4, 0.8, 1.2];
    const r = await steerSweep({
      model: join(dir, 'planted'), data: 'pairs', results: join(dir, 'results'), limit: 40,
      alphas: alphas.map((value) => ({ kind: 'absolute' as const, value })), layer: 'auto', direction: 'schema-harmful',
      maxNewTokens: 10, requests: ['harmful'], engine: { cacheDir: join(dir, '.graphs'), quiet: true },
    });
    assert.ok(truth.plantedLayers.includes(r.layer));
    let shift = 0; // R̂·r: the Schema Direction points against r
    for (let i = 0; i < truth.r.length; i++) shift += r.direction[i]! * truth.r[i]!;
    assert.ok(shift < -0.99, `R̂·r = ${shift}`);

    const cache = readActivationCache(join(dir, 'results', 'planted', 'cache'), 'prompt.agent.schema');
    const keys = (cache.manifest.rows as { key: string }[]).map((x) => x.key);
    const gens = (alpha: number): { pairId: string; label: string }[] =>
      readFileSync(join(r.outDir, `generations.harmful.alpha${alpha}.jsonl`), 'utf8').trim().split('\n').slice(1).map((l) => JSON.parse(l));
    const L = cache.layers - 1;
    for (const [k, alpha] of alphas.entries()) {
      const row = r.sweeps[0]!.rows[k]!;
      let predicted = 0;
      let ambiguous = 0;
      for (const g of gens(alpha)) {
        const i = keys.indexOf(`${g.pairId}:harmful`);
        let s = 0;
        for (let j = 0; j < cache.d; j++) s += cache.data[(i * cache.layers + L) * cache.d + j]! * truth.r[j]!;
        const after = s - alpha * shift;
        if (Math.abs(after - PLANTED.tau) < 1e-3) ambiguous++;
        else if (after > PLANTED.tau) predicted++;
      }
      assert.equal(ambiguous, 0);
      assert.equal(row.counts.refusal, predicted, `α=${alpha}: ${row.counts.refusal} refusals, construction predicts ${predicted}`);
      assert.equal(row.counts.refusal + row.counts.valid + row.counts.invalid, row.n);
    }
    assert.ok(r.sweeps[0]!.rows[3]!.counts.refusal > r.sweeps[0]!.rows[0]!.counts.refusal, 'steering raises refusal');
    assert.ok(existsSync(join(r.outDir, 'table3.md')) && existsSync(join(dir, 'results', 'planted', 'figures')));
    assert.match(readFileSync(r.report, 'utf8'), /Table 3/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('steer --steer-positions generated on the planted model: the first token is always the unsteered choice; recorded', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'steer-gen-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  process.env.SAFEKEEP_QUIET = '1';
  try {
    const pairs = await loadPairSet('pairs');
    await writePlantedModel(join(dir, 'planted'), { lexiconPairs: pairs.pairs });
    const opts = {
      model: join(dir, 'planted'), data: 'pairs', results: join(dir, 'results'), limit: 40,
      alphas: [0, 1.5].map((value) => ({ kind: 'absolute' as const, value })), layer: 'auto' as const, direction: 'schema-harmful' as const,
      maxNewTokens: 4, requests: ['harmful' as const], engine: { cacheDir: join(dir, '.graphs'), quiet: true },
    };
    const all = await steerSweep({ ...opts, positions: 'all' });
    const gen = await steerSweep({ ...opts, positions: 'generated' });
    assert.equal(all.sweeps[0]!.positions, 'all');
    assert.equal(gen.sweeps[0]!.positions, 'generated');
    const read = (suffix: string, alpha: number): { pairId: string; generatedIds: number[] }[] =>
      readFileSync(join(all.outDir, `generations.harmful.alpha${alpha}${suffix}.jsonl`), 'utf8').trim().split('\n').slice(1).map((l) => JSON.parse(l));
    const first = (g: { generatedIds: number[] }[]) => g.map((x) => x.generatedIds[0]);
    // the planted lm_head picks "sorry" vs "{" from hidden[L]·r at the last prompt token: steering the prompt (all)
    // changes that choice at α = 1.5; steering only generated tokens cannot
    assert.notDeepEqual(first(read('', 1.5)), first(read('', 0)));
    assert.deepEqual(first(read('.generated', 1.5)), first(read('', 0)));
    const t3 = JSON.parse(readFileSync(join(all.outDir, 'table3.json'), 'utf8')) as { positions: string };
    assert.equal(t3.positions, 'generated');
    assert.match(readFileSync(join(all.outDir, 'table3.md'), 'utf8'), /at generated tokens only \(--steer-positions generated\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('steer: every condition in flight together (--gen-concurrency) writes the generations and logs of one condition at a time', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'steer-conc-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  process.env.SAFEKEEP_QUIET = '1';
  try {
    const pairs = await loadPairSet('pairs');
    await writePlantedModel(join(dir, 'planted'), { lexiconPairs: pairs.pairs });
    const alphas = [0, 0.8, 1.5];
    const run = (genConcurrency: number, results: string) => steerSweep({
      model: join(dir, 'planted'), data: 'pairs', results: join(dir, results), limit: 60, genConcurrency,
      alphas: alphas.map((value) => ({ kind: 'absolute' as const, value })), layer: 'auto', direction: 'schema-harmful',
      maxNewTokens: 6, requests: ['harmful'], engine: { cacheDir: join(dir, '.graphs'), quiet: true },
    });
    const one = await run(1, 'one');
    const many = await run(16, 'many');
    assert.deepEqual(many.sweeps, one.sweeps);
    for (const alpha of alphas) {
      const gens = (r: typeof one) => readFileSync(join(r.outDir, `generations.harmful.alpha${alpha}.jsonl`), 'utf8').trim().split('\n').slice(1).map((l) => JSON.parse(l) as { pairId: string; alpha: number; generatedIds: number[] });
      const g = gens(many);
      assert.ok(g.length > GEN_BATCH_IN_TEST, `more than one batch of pairs (${g.length})`);
      assert.deepEqual(g, gens(one));
      assert.ok(g.every((x) => x.alpha === alpha));
      // the condition's log holds its own samples, in pair order, one per generation
      const log = readFileSync(join(many.outDir, `log.harmful.alpha${alpha}.jsonl`), 'utf8').trim().split('\n').slice(1).map((l) => JSON.parse(l) as { solver: string; row: { pairId: string; alpha: number } });
      assert.deepEqual(log.map((x) => x.row.pairId), g.map((x) => x.pairId));
      assert.ok(log.every((x) => x.solver === `α=${alpha}` && x.row.alpha === alpha), JSON.stringify(log.map((x) => x.solver)));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** steer's generation batch (GEN_BATCH in src/experiments/steer/generate.ts) */
const GEN_BATCH_IN_TEST = 8;
