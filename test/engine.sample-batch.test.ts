/**
 * Sampling through the scheduler (run/choose-token.ts at the step runner's per-row seam): a row's sampled ids
 * depend on its prompt, settings and seed only — the same alone, decoding beside 7 or 31 rows with other seeds and
 * settings, with the prefix cache off, with chunked prefill — because each row draws philox(seed, step). Several
 * seeds at temperature 2 give different answers; no sampling (or temperature 0) is the greedy path exactly; the
 * logprobs are those of the sampled tokens; the K samples of one prompt compute its prefill about once.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { generate } from '../src/engine/run/generate.ts';
import { Scheduler } from '../src/engine/run/scheduler.ts';
import type { GenerateOptions, SamplingSettings } from '../src/engine/types.ts';
import { SMALL_GQA, tempCache } from './helpers/engine.ts';
import { prompt } from './helpers/scheduler.ts';

let engine: OnnxEngine;
let V = 0;
const cache = tempCache();
const dir = mkdtempSync(join(tmpdir(), 'safekeep-sample-batch-'));

before(async () => {
  const { family, opts } = SMALL_GQA[0]!;
  await writeRandomCheckpoint(dir, family, { ...opts, seed: 11 });
  engine = await createEngineFromCheckpoint(await loadCheckpoint(dir), { cacheDir: cache.dir, threads: 1, quiet: true });
  V = engine.vocabSize;
});
after(async () => {
  await engine?.dispose();
  rmSync(dir, { recursive: true, force: true });
  cache.cleanup();
});

const NEW = 16;
const target = { ids: [] as number[], sampling: { temperature: 1.3, topK: 40, topP: 0.95, repetitionPenalty: 1.1, seed: 4242 } as SamplingSettings };
const opts = (sampling?: SamplingSettings, extra: Partial<GenerateOptions> = {}): GenerateOptions => ({ maxNewTokens: NEW, stopIds: [], ...(sampling ? { sampling } : {}), ...extra });

/** the other rows: their own prompts (one the target's own, another seed), seeds and settings, greedy among them */
function others(n: number): { ids: number[]; sampling?: SamplingSettings }[] {
  const kinds: (SamplingSettings | undefined)[] = [{ temperature: 2 }, { temperature: 0.5, minP: 0.1 }, undefined, { temperature: 1, repetitionPenalty: 1.5, frequencyPenalty: 0.5 }, { temperature: 0 }];
  return Array.from({ length: n }, (_, i) => ({
    ids: i === 0 ? target.ids : prompt(100 + i, 5 + ((i * 7) % 40), V),
    sampling: kinds[i % kinds.length] && { ...kinds[i % kinds.length]!, ...(kinds[i % kinds.length]!.temperature ? { seed: 1000 + i } : {}) },
  }));
}

/** the target row decoded among `rest` on `sched`, every row its own call, all in flight together */
async function among(sched: Scheduler, rest: { ids: number[]; sampling?: SamplingSettings }[]): Promise<number[]> {
  const [mine] = await Promise.all([
    generate(engine, sched, [target.ids], opts(target.sampling)),
    ...rest.map((r) => generate(engine, sched, [r.ids], opts(r.sampling))),
  ]);
  return mine![0]!.generatedIds;
}

test('same seed ⇒ same sampled ids: alone, beside 7 or 31 other rows, prefix cache off, chunked prefill', async () => {
  target.ids = prompt(7, 37, V);
  const alone = (await generate(engine, new Scheduler(engine, {}), [target.ids], opts(target.sampling)))[0]!;
  assert.equal(alone.generatedIds.length, NEW);
  assert.equal(alone.seed, 4242);
  const shapes: [string, Scheduler, number][] = [
    ['7 others', new Scheduler(engine, {}), 7],
    ['31 others', new Scheduler(engine, {}), 31],
    ['31 others, prefix cache off', new Scheduler(engine, { prefixCacheBytes: 0 }), 31],
    ['7 others, chunked prefill (8 tokens a step), no packing', new Scheduler(engine, { stepTokens: 8, packTokens: 0 }), 7],
  ];
  for (const [name, sched, n] of shapes) {
    assert.deepEqual(await among(sched, others(n)), alone.generatedIds, name);
    if (n === 31) assert.ok(sched.stats.peakBatch >= 24, `${name}: the rows decoded together (peak batch ${sched.stats.peakBatch})`);
  }
});

test('several seeds at temperature 2 give different answers; a seed replays its answer', async () => {
  const sched = new Scheduler(engine, {});
  const p = prompt(3, 20, V);
  const runs = await Promise.all([1, 2, 3, 4, 1].map((seed) => generate(engine, sched, [p], opts({ temperature: 2, seed }))));
  const texts = runs.map((r) => r[0]!.generatedIds.join(' '));
  assert.equal(new Set(texts.slice(0, 4)).size, 4, 'four seeds, four answers');
  assert.equal(texts[4], texts[0], 'seed 1 again: the same answer');
});

test('no sampling, temperature 0 and top_k 1 are the greedy path; a call without a seed draws one and reports it', async () => {
  const sched = new Scheduler(engine, {});
  const p = prompt(5, 25, V);
  const [greedy] = await generate(engine, sched, [p], opts());
  const [t0] = await generate(engine, sched, [p], opts({ temperature: 0, topP: 0.5 }));
  const [k1] = await generate(engine, sched, [p], opts({ temperature: 1.5, topK: 1, seed: 9 }));
  assert.deepEqual(t0!.generatedIds, greedy!.generatedIds);
  assert.deepEqual(k1!.generatedIds, greedy!.generatedIds);
  assert.equal(greedy!.seed, undefined);
  const [drawn] = await generate(engine, sched, [p], opts({ temperature: 1 }));
  assert.ok(Number.isSafeInteger(drawn!.seed), 'a drawn seed is reported');
  const [replay] = await generate(engine, sched, [p], opts({ temperature: 1, seed: drawn!.seed }));
  assert.deepEqual(replay!.generatedIds, drawn!.generatedIds, 'and replays the answer');
  await assert.rejects(generate(engine, sched, [p], opts({ temperature: -1 })), /temperature must be a number ≥ 0/);
  await assert.rejects(generate(engine, sched, [p], opts({ logitBias: { [V]: 1 } })), /logitBias must be keyed by token ids below the vocabulary size/);
});

test('logprobs are those of the sampled tokens (log-softmax of the raw logits at the chosen id)', async () => {
  const sched = new Scheduler(engine, {});
  const [r] = await generate(engine, sched, [prompt(8, 12, V)], opts({ temperature: 1.5, seed: 77 }, { topLogprobs: 2, returnStepLogits: true }));
  const ids = r!.generatedIds, lp = r!.logprobs!, logits = r!.stepLogits!;
  assert.equal(lp.length, ids.length);
  let notTop = 0;
  ids.forEach((tok, k) => {
    assert.equal(lp[k]!.token, tok);
    const row = logits.subarray(k * V, (k + 1) * V);
    let max = -Infinity, sum = 0;
    for (const x of row) max = Math.max(max, x);
    for (const x of row) sum += Math.exp(x - max);
    assert.ok(Math.abs(lp[k]!.logprob - (row[tok]! - max - Math.log(sum))) < 1e-9);
    if (lp[k]!.top[0]!.token !== tok) notTop++;
  });
  assert.ok(notTop > 0, 'at temperature 1.5 some sampled tokens are not the most likely');
});

test('K samples of one prompt share its prefill through the prefix cache', async () => {
  const sched = new Scheduler(engine, { blockTokens: 16 });
  const p = prompt(9, 64, V);
  const K = 6;
  const before = sched.stats.prefillTokens;
  const runs = await Promise.all(Array.from({ length: K }, (_, j) => generate(engine, sched, [p], opts({ temperature: 1, seed: 50 + j }))));
  const computed = sched.stats.prefillTokens - before;
  assert.equal(new Set(runs.map((r) => r[0]!.generatedIds.join(' '))).size, K);
  // the first computes the 64 prompt tokens; each other one at most its last block (the last token always runs)
  assert.ok(computed <= 64 + (K - 1) * 16, `${computed} prompt tokens computed for ${K} samples of 64`);
});
