/**
 * Engine invariants on a random GQA llama checkpoint: KV-cache decode equals full recompute (≤ 1e-5), batched equals
 * unbatched (forward and generate, ≤ 1e-5), stop ids inside a batch, position selectors, a step continuing from a
 * given past KV (the shared-prefix path), the graph cache, and user errors.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Checkpoint } from '../src/checkpoint/types.ts';
import { leftPad, planChunks, steeringMatrix } from '../src/engine/run/batch.ts';
import { createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { maxAbsDiff, tempCache } from './helpers/engine.ts';

const EXACT = 1e-5;

describe('engine invariants (random llama, GQA 6/2)', () => {
  let tmp: string;
  let cache: ReturnType<typeof tempCache>;
  let ck: Checkpoint;
  let engine: OnnxEngine;
  const seqs = [
    [5, 17, 33, 2 + 40, 9, 61, 7, 88],
    [12, 3, 99],
    [44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56],
    [70],
  ];

  before(async () => {
    cache = tempCache();
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-kv-'));
    await writeRandomCheckpoint(join(tmp, 'm'), 'llama', {
      seed: 3, numLayers: 3, hiddenSize: 48, numHeads: 6, numKvHeads: 2, intermediateSize: 96, vocabSize: 131, std: 0.2,
    });
    ck = await loadCheckpoint(join(tmp, 'm'));
    engine = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 2 });
  });
  after(async () => {
    await engine?.dispose();
    cache?.cleanup();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  test('KV-cache decode equals full recompute (step logits and first-token hidden state)', async () => {
    const steer = { layer: 2, vector: Array.from({ length: 48 }, (_, i) => Math.cos(i)), alpha: 3 };
    for (const s of [undefined, steer]) {
      const [g] = await engine.generate([seqs[0]!], { maxNewTokens: 8, stopIds: [], steer: s, returnStepLogits: true, returnFirstTokenHidden: true });
      const ids = g!.generatedIds;
      assert.equal(ids.length, 8);
      const full = [...seqs[0]!, ...ids.slice(0, -1)];
      const [f] = await engine.forward([full], { steer: s });
      const T0 = seqs[0]!.length;
      const V = engine.vocabSize;
      const expected = f!.logits.subarray((T0 - 1) * V, (T0 - 1 + 8) * V);
      const diff = maxAbsDiff(g!.stepLogits!, expected);
      assert.ok(diff <= EXACT, `step logits vs recompute ${diff}`);
      const d = engine.dModel;
      const L1 = engine.numLayers + 1;
      const fh = new Float32Array(L1 * d);
      for (let l = 0; l < L1; l++) fh.set(f!.hidden.subarray((l * full.length + T0) * d, (l * full.length + T0 + 1) * d), l * d);
      // decode reads the KV buffer with standard ops, the recompute's prefill runs the fused kernel: float rounding
      // differs in summation order only, so relative to the largest |h| (as the brief's "≤ 1e-5 rel")
      const maxH = Math.max(...fh.map(Math.abs));
      assert.ok(maxAbsDiff(g!.firstTokenHidden!, fh) <= EXACT * maxH, `first token hidden vs recompute ${maxAbsDiff(g!.firstTokenHidden!, fh)} (max |h| ${maxH})`);
    }
  });

  test('batched forward equals unbatched', async () => {
    const batched = await engine.forward(seqs);
    for (let i = 0; i < seqs.length; i++) {
      const [u] = await engine.forward([seqs[i]!]);
      assert.equal(batched[i]!.length, seqs[i]!.length);
      assert.ok(maxAbsDiff(batched[i]!.hidden, u!.hidden) <= EXACT, `seq ${i} hidden`);
      assert.ok(maxAbsDiff(batched[i]!.logits, u!.logits) <= EXACT, `seq ${i} logits`);
    }
  });

  test('small internal batches (maxBatchTokens) give the same results in the caller\'s order', async () => {
    assert.deepEqual(planChunks([8, 3, 13, 1], 6, 16), [[3, 1], [0], [2]]);
    const small = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 1, maxBatchTokens: 16 });
    try {
      const a = await small.forward(seqs);
      const b = await engine.forward(seqs);
      const ga = await small.generate(seqs, { maxNewTokens: 3, stopIds: [], returnStepLogits: true });
      const gb = await engine.generate(seqs, { maxNewTokens: 3, stopIds: [], returnStepLogits: true });
      for (let i = 0; i < seqs.length; i++) {
        assert.equal(a[i]!.length, seqs[i]!.length);
        assert.ok(maxAbsDiff(a[i]!.hidden, b[i]!.hidden) <= EXACT);
        assert.ok(maxAbsDiff(a[i]!.logits, b[i]!.logits) <= EXACT);
        assert.deepEqual(ga[i]!.generatedIds, gb[i]!.generatedIds);
        assert.ok(maxAbsDiff(ga[i]!.stepLogits!, gb[i]!.stepLogits!) <= EXACT);
      }
    } finally {
      await small.dispose();
    }
  });

  test('batched generate equals unbatched, also when one sequence hits a stop id', async () => {
    const free = await Promise.all(seqs.map(async (s) => (await engine.generate([s], { maxNewTokens: 7, stopIds: [], returnStepLogits: true }))[0]!));
    const stopId = free[0]!.generatedIds[2]!;
    const stopIds = [stopId];
    const single = [];
    for (const s of seqs) single.push((await engine.generate([s], { maxNewTokens: 7, stopIds, returnStepLogits: true, returnFirstTokenHidden: true }))[0]!);
    const batched = await engine.generate(seqs, { maxNewTokens: 7, stopIds, returnStepLogits: true, returnFirstTokenHidden: true });
    const first = free[0]!.generatedIds.indexOf(stopId);
    assert.deepEqual(batched[0]!.generatedIds, free[0]!.generatedIds.slice(0, first + 1), 'seq 0 stops at (and includes) the stop id');
    assert.equal(batched[0]!.finish, 'stop');
    for (let i = 0; i < seqs.length; i++) {
      assert.deepEqual(batched[i]!.generatedIds, single[i]!.generatedIds, `seq ${i} ids`);
      assert.equal(batched[i]!.finish, single[i]!.finish);
      assert.equal(batched[i]!.stepLogits!.length, batched[i]!.generatedIds.length * engine.vocabSize);
      assert.ok(maxAbsDiff(batched[i]!.stepLogits!, single[i]!.stepLogits!) <= EXACT, `seq ${i} step logits`);
      assert.ok(maxAbsDiff(batched[i]!.firstTokenHidden!, single[i]!.firstTokenHidden!) <= EXACT, `seq ${i} first hidden`);
    }
  });

  test('default stop ids come from generation_config.json (eos), [] never stops', async () => {
    const [free] = await engine.generate([seqs[1]!], { maxNewTokens: 6, stopIds: [] });
    const eos = free!.generatedIds[3]!;
    const k = free!.generatedIds.indexOf(eos);
    await writeRandomCheckpoint(join(tmp, 'eos'), 'llama', {
      seed: 3, numLayers: 3, hiddenSize: 48, numHeads: 6, numKvHeads: 2, intermediateSize: 96, vocabSize: 131, std: 0.2, eosTokenId: [9999 % 131, eos],
    });
    const withEos = await createEngineFromCheckpoint(await loadCheckpoint(join(tmp, 'eos')), { cacheDir: cache.dir, threads: 1 });
    try {
      assert.deepEqual(withEos.eosIds, [9999 % 131, eos]);
      const [stopped] = await withEos.generate([seqs[1]!], { maxNewTokens: 6 });
      assert.deepEqual(stopped!.generatedIds, free!.generatedIds.slice(0, k + 1));
      assert.equal(stopped!.finish, 'stop');
      const [never] = await withEos.generate([seqs[1]!], { maxNewTokens: 6, stopIds: [] });
      assert.deepEqual(never!.generatedIds, free!.generatedIds);
      assert.equal(never!.finish, 'length');
    } finally {
      await withEos.dispose();
    }
  });

  test('position selectors return the same rows as "all"', async () => {
    const [all] = await engine.forward([seqs[2]!]);
    const [sel] = await engine.forward([seqs[2]!], { hiddenAt: [0, -1, 4], logitsAt: 'last' });
    const [none] = await engine.forward([seqs[2]!], { hiddenAt: 'none', logitsAt: 'none' });
    const T = seqs[2]!.length;
    const d = engine.dModel;
    const V = engine.vocabSize;
    assert.deepEqual(sel!.hiddenPositions, [0, T - 1, 4]);
    assert.deepEqual(sel!.logitPositions, [T - 1]);
    for (let l = 0; l <= engine.numLayers; l++) {
      [0, T - 1, 4].forEach((p, j) => {
        const a = all!.hidden.subarray((l * T + p) * d, (l * T + p + 1) * d);
        const b = sel!.hidden.subarray((l * 3 + j) * d, (l * 3 + j + 1) * d);
        assert.ok(maxAbsDiff(a, b) <= EXACT, `layer ${l} position ${p}`);
      });
    }
    assert.ok(maxAbsDiff(sel!.logits, all!.logits.subarray((T - 1) * V)) <= EXACT);
    assert.equal(none!.hidden.length, 0);
    assert.equal(none!.logits.length, 0);
    await assert.rejects(engine.forward([seqs[1]!], { hiddenAt: [3] }), /position 3 is outside a sequence of 3 tokens/);
  });

  test('a step continuing from a given past KV (shared prefix) equals the full forward', async () => {
    const prefix = seqs[2]!.slice(0, 9);
    const suffixes = [seqs[2]!.slice(9), [7, 8]];
    const steer = steeringMatrix(engine.numLayers, engine.dModel);
    const pre = await engine.step({ ids: leftPad([prefix, prefix]).ids, batch: 2, width: prefix.length, starts: [0, 0], past: null, steer, hiddenIndex: [], logitsIndex: [] });
    const V = engine.vocabSize;
    for (const suf of suffixes) {
      const one = await engine.step({ ids: leftPad([prefix]).ids, batch: 1, width: prefix.length, starts: [0], past: null, steer, hiddenIndex: [], logitsIndex: [] });
      const out = await engine.step({
        ids: BigInt64Array.from(suf, BigInt), batch: 1, width: suf.length, starts: [0], past: one.present, steer,
        hiddenIndex: [], logitsIndex: suf.map((_, t) => t),
      });
      const [f] = await engine.forward([[...prefix, ...suf]], { logitsAt: suf.map((_, t) => prefix.length + t) });
      assert.ok(maxAbsDiff(out.logits, f!.logits) <= EXACT, `suffix ${suf.length}: ${maxAbsDiff(out.logits, f!.logits)}`);
      assert.equal(out.logits.length, suf.length * V);
    }
    assert.equal(pre.present!.length, prefix.length);
    assert.deepEqual(pre.present!.keys[0]!.dims, [2, 2, prefix.length, 8]);
  });

  test('user errors are SafekeepErrors with a clear message', async () => {
    await assert.rejects(engine.forward([[1, 2, 131]]), (e: unknown) => e instanceof SafekeepError && /token id 131 is not in 0\.\.130/.test(e.message));
    await assert.rejects(engine.forward([[]]), SafekeepError);
    await assert.rejects(engine.forward([[1]], { steer: { layer: 4, vector: new Array(48).fill(1), alpha: 1 } }), /layer 4 is out of range 0\.\.3/);
    await assert.rejects(engine.forward([[1]], { steer: { layer: 1, vector: [1, 2], alpha: 1 } }), /d_model is 48/);
    await assert.rejects(engine.generate([[1]], { maxNewTokens: -1 }), SafekeepError);
  });

  test('graph cache: second start reuses the graph; dtype and file changes get a new one', async () => {
    const graphs = () => readdirSync(join(cache.dir, 'graphs')).filter((f) => f.endsWith('.onnx'));
    assert.equal(engine.graphCached, false);
    const n0 = graphs().length;
    const again = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 1 });
    assert.equal(again.graphCached, true);
    const [a] = await again.forward([seqs[1]!]);
    const [b] = await engine.forward([seqs[1]!]);
    assert.ok(maxAbsDiff(a!.logits, b!.logits) <= EXACT);
    await again.dispose();
    assert.equal(graphs().length, n0);
    const bf = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, dtype: 'bf16', threads: 1 });
    assert.equal(bf.graphCached, false);
    await bf.dispose();
    const file = [...ck.tensors.values()][0]!.file;
    utimesSync(file, new Date(), new Date(Date.now() + 5000));
    const touched = await createEngineFromCheckpoint(await loadCheckpoint(join(tmp, 'm')), { cacheDir: cache.dir, threads: 1 });
    assert.equal(touched.graphCached, false);
    await touched.dispose();
    assert.equal(graphs().length, n0 + 2);
    assert.ok(existsSync(cache.dir));
  });
});
