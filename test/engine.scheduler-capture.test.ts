/**
 * The scheduler's per-sequence capture and log probabilities (GenerateOptions.capture / topLogprobs), on a random
 * checkpoint with a small step budget so prompts prefill in several chunks: captured prompt positions (any order,
 * across chunk boundaries), each fed-back generated token's hidden states, and points inside the blocks equal the
 * engine's own `forward` / `runWithCache` of the same tokens (≤ 1e-5 relative), while other sequences with other
 * steering decode beside them; only the layers asked for are kept; bad positions are refused.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { Scheduler } from '../src/engine/run/scheduler.ts';
import { SMALL_GQA, tempCache } from './helpers/engine.ts';
import { prompt, rel } from './helpers/scheduler.ts';

let tmp = '';
let cache: ReturnType<typeof tempCache>;
let engine: OnnxEngine;
const V = SMALL_GQA[0]!.opts.vocabSize!;

before(async () => {
  cache = tempCache();
  tmp = mkdtempSync(join(tmpdir(), 'safekeep-sched-capture-'));
  await writeRandomCheckpoint(join(tmp, 'm'), 'llama', { seed: 9, ...SMALL_GQA[0]!.opts });
  engine = await createEngine(join(tmp, 'm'), { cacheDir: cache.dir, threads: 1 });
});
after(async () => {
  await engine?.dispose();
  cache?.cleanup();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('capture across prefill chunks and decode steps equals forward / runWithCache; only the layers asked for are kept', async () => {
  const sched = new Scheduler(engine, { stepTokens: 8, prefixCacheBytes: 0 });
  const d = engine.dModel;
  const L1 = engine.numLayers + 1;
  const v = Array.from({ length: d }, (_, i) => Math.sin(i + 1));
  const steer = { layer: 1, vector: v, alpha: 3 };
  const ids = prompt(3, 21, V);
  const positions = [20, 0, 7, 8, 15];
  const names = ['blocks.1.attn_out', 'blocks.2.z'];
  const [r, other] = await Promise.all([
    sched.submit(ids, { maxNewTokens: 5, stopIds: [], steer, capture: { promptPositions: positions, generated: true, hooks: names, layers: [0, 2] }, topLogprobs: 3 }),
    sched.submit(prompt(4, 13, V), { maxNewTokens: 5, stopIds: [], steer: { ...steer, alpha: -3 } }),
  ]);
  assert.equal(other!.generatedIds.length, 5);
  assert.ok(sched.stats.prefillChunks >= 4, `prefilled in chunks (${sched.stats.prefillChunks})`);
  const seq = [...ids, ...r!.generatedIds.slice(0, -1)];
  const T = seq.length;
  const [f] = await engine.forward([seq], { steer, hiddenAt: 'all', logitsAt: 'all' });
  // hidden rows [K = 2, n, d] at the prompt positions in the order given; [K, d] per fed-back token
  assert.equal(r!.capturedPrompt!.length, 2 * positions.length * d);
  assert.equal(r!.capturedGenerated!.length, 4);
  [0, 2].forEach((layer, k) => {
    positions.forEach((p, i) => {
      const got = r!.capturedPrompt!.subarray((k * positions.length + i) * d, (k * positions.length + i + 1) * d);
      assert.ok(rel(got, f!.hidden.subarray((layer * T + p) * d, (layer * T + p + 1) * d)) <= 1e-5, `prompt ${p} layer ${layer}`);
    });
    r!.capturedGenerated!.forEach((h, j) => {
      const p = ids.length + j;
      assert.ok(rel(h.subarray(k * d, (k + 1) * d), f!.hidden.subarray((layer * T + p) * d, (layer * T + p + 1) * d)) <= 1e-5, `generated ${j} layer ${layer}`);
    });
  });
  assert.ok(L1 > 2);
  const ref = await engine.runWithCache(seq, { names, steer, logitsAt: 'none' });
  for (const name of names) {
    const want = ref.cache.get(name).data;
    const w = want.length / T;
    const rows = [...positions, ...r!.capturedGenerated!.map((_, j) => ids.length + j)];
    const got = r!.capturedHooks![name]!;
    assert.equal(got.length, rows.length * w, name);
    rows.forEach((p, i) => assert.ok(rel(got.subarray(i * w, (i + 1) * w), want.subarray(p * w, (p + 1) * w)) <= 1e-5, `${name} at ${p}`));
  }
  // log probabilities: log-softmax of the logits that chose each token (the forward's logits at the same positions)
  const Vv = engine.vocabSize;
  r!.logprobs!.forEach((lp, j) => {
    const row = Array.from(f!.logits.subarray((ids.length - 1 + j) * Vv, (ids.length + j) * Vv));
    if (j === r!.logprobs!.length - 1) return; // the last token's logits come from the fed-back token the forward lacks
    const m = Math.max(...row);
    const lse = m + Math.log(row.reduce((a, x) => a + Math.exp(x - m), 0));
    assert.equal(lp.token, r!.generatedIds[j]);
    assert.ok(Math.abs(lp.logprob - (row[lp.token]! - lse)) <= 1e-4, `token ${j}`);
    assert.equal(lp.top[0]!.token, lp.token);
  });
});

test('capture: a position outside the prompt or given twice, a layer out of range, are refused', async () => {
  const sched = new Scheduler(engine, {});
  const ids = prompt(5, 6, V);
  await assert.rejects(async () => sched.submit(ids, { maxNewTokens: 1, capture: { promptPositions: [6], generated: false } }), /prompt position 6 is outside a prompt of 6 tokens/);
  await assert.rejects(async () => sched.submit(ids, { maxNewTokens: 1, capture: { promptPositions: [1, 1], generated: false } }), /given twice/);
  await assert.rejects(async () => sched.submit(ids, { maxNewTokens: 1, capture: { promptPositions: [1], generated: false, layers: [9] } }), /layer 9 is not in 0\.\.3/);
  await assert.rejects(async () => sched.submit(ids, { maxNewTokens: 1, topLogprobs: 21 }), /topLogprobs must be an integer 0\.\.20/);
});
