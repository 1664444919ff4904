/**
 * In-place KV buffers (src/engine/runtime/kv.ts): decode appends only the new slots into a preallocated buffer and reads
 * it through a bias that masks unused capacity. Checked against independent references:
 * - the bias for a buffer of capacity C equals batch.ts attentionBias (the contiguous-cache bias) on the filled
 *   slots, with the unused capacity masked; appendKv writes in place, grows by min(reserve, KV_CHUNK), copies on
 *   write when a past is continued twice; compactKv;
 * - on random llama / qwen2 (q/k/v bias) / qwen3 (q/k norm, head_dim ≠ d/heads) checkpoints: batched, left-padded,
 *   steered greedy decode equals the Float64 oracle (ids identical; step logits and first-token hidden state
 *   ≤ 1e-5 × max|value|); a long decode across a KV_CHUNK boundary and a step loop forced to regrow every few
 *   tokens equal a full recompute without any KV cache (engine.forward on the generated sequence);
 * - two continuations of one past do not disturb each other.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Checkpoint, Family } from '../src/checkpoint/types.ts';
import { attentionBias, steeringMatrix } from '../src/engine/run/batch.ts';
import { createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { MASKED } from '../src/engine/graph/io.ts';
import { appendKv, canAppendInPlace, capacityBias, compactKv, KV_CHUNK, kvCapacity, packRowsKv, rowSlotsKv, type KvCache } from '../src/engine/runtime/kv.ts';
import { referenceGenerate } from '../src/engine/reference.ts';
import { TINY_MODELS, maxAbsDiff, tempCache } from './helpers/engine.ts';

const REL = 1e-5;

/** max |a − b| / max |b| */
function rel(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < b.length; i++) m = Math.max(m, Math.abs(b[i]!));
  return maxAbsDiff(a, b) / (m || 1);
}

describe('kv.ts helpers', () => {
  test('capacityBias = attentionBias on the filled slots, unused capacity masked, new slots after the capacity', () => {
    for (const [B, T, P, C, starts] of [[2, 3, 4, 4, [0, 2]], [3, 1, 5, 9, [0, 3, 5]], [2, 4, 0, 0, [1, 0]], [1, 2, 6, 6, [6]], [2, 2, 3, 8, [4, 0]]] as const) {
      const a = attentionBias(B, T, P, starts);
      const c = capacityBias(B, T, P, C, starts);
      assert.equal(c.length, B * T * (C + T));
      for (let b = 0; b < B; b++) {
        for (let t = 0; t < T; t++) {
          const ra = a.subarray((b * T + t) * (P + T), (b * T + t + 1) * (P + T));
          const rc = c.subarray((b * T + t) * (C + T), (b * T + t + 1) * (C + T));
          assert.deepEqual([...rc.subarray(0, P)], [...ra.subarray(0, P)], `B${B} T${T} P${P} C${C} row ${b},${t}: buffer slots`);
          assert.ok(rc.subarray(P, C).every((x) => x === MASKED), 'unused capacity masked');
          assert.deepEqual([...rc.subarray(C)], [...ra.subarray(P)], 'new slots');
        }
      }
    }
  });

  const L = 2;
  const kvH = 2;
  const hd = 3;
  /** new slots [B, kvH, T, hd] whose values encode (layer, row, head, slot, i) */
  const slots = (B: number, T: number, from: number, l: number, sign: number) =>
    Float32Array.from({ length: B * kvH * T * hd }, (_, j) => {
      const i = j % hd;
      const t = Math.floor(j / hd) % T;
      const bh = Math.floor(j / (hd * T));
      return sign * (1000 * l + 100 * bh + 10 * (from + t) + i + 1);
    });
  const kv = (past: KvCache | null, B: number, T: number, reserve: number, sign = 1) => {
    const P = past?.length ?? 0;
    return appendKv(past, Array.from({ length: L }, (_, l) => slots(B, T, P, l, sign)), Array.from({ length: L }, (_, l) => slots(B, T, P, l, -sign)),
      { batch: B, width: T, kvHeads: kvH, headDim: hd, starts: new Array<number>(B).fill(0), reserve });
  };
  /** the filled slots of layer l's keys, [B, kvH, length, hd] */
  const filled = (c: KvCache, l: number) => [...compactKv(c).keys[l]!];
  const expected = (B: number, length: number, l: number, sign = 1) => [...slots(B, length, 0, l, sign)];

  test('appendKv: exact buffer for a prefill, room for decode, in place while it lasts, regrowth copies', () => {
    const B = 2;
    const a = kv(null, B, 3, 0);
    assert.equal(kvCapacity(a), 3);
    const b = kv(a, B, 1, 4); // no room: new buffer 3 + 1 + 4
    assert.equal(kvCapacity(b), 8);
    assert.notEqual(b.keys[0]!.data, a.keys[0]!.data);
    const c = kv(b, B, 2, 0); // room: in place
    assert.equal(c.keys[0]!.data, b.keys[0]!.data);
    assert.equal(c.length, 6);
    const d = kv(c, B, 1, 1000); // in place (room for 2 more)
    assert.equal(d.keys[1]!.data, b.keys[1]!.data);
    const e = kv(d, B, 2, 1000); // 7 + 2 > 8: regrow, room min(1000, KV_CHUNK)
    assert.equal(kvCapacity(e), 9 + KV_CHUNK);
    for (const x of [a, b, c, d, e]) for (let l = 0; l < L; l++) assert.deepEqual(filled(x, l), expected(B, x.length, l), `length ${x.length} layer ${l}`);
    assert.deepEqual([...compactKv(e).values[1]!], expected(B, e.length, 1, -1), 'values');
    assert.equal(compactKv(a).keys[0], a.keys[0]!.data, 'no copy when capacity = length');
  });

  test('appendKv copies on write when a past is continued twice', () => {
    const p = kv(kv(null, 1, 2, 0), 1, 1, 5); // capacity 8, length 3
    assert.ok(canAppendInPlace(p, 1));
    const first = kv(p, 1, 1, 5, 1);
    assert.equal(first.keys[0]!.data, p.keys[0]!.data, 'first continuation in place');
    assert.ok(!canAppendInPlace(p, 1), 'p\'s next slot is taken');
    const second = kv(p, 1, 1, 5, -1);
    assert.notEqual(second.keys[0]!.data, p.keys[0]!.data, 'second continuation copied');
    assert.deepEqual(filled(first, 0), expected(1, 4, 0), 'the first continuation is intact');
    const past3 = expected(1, 3, 0);
    const own = [...slots(1, 1, 3, 0, -1)];
    // [kvH, 4, hd]: per head the shared 3 slots, then its own new one
    const want = Array.from({ length: kvH }, (_, h) => [...past3.slice(h * 3 * hd, (h + 1) * 3 * hd), ...own.slice(h * hd, (h + 1) * hd)]).flat();
    assert.deepEqual(filled(second, 0), want, 'the second keeps the shared past and has its own new slot');
    assert.deepEqual(filled(p, 0), expected(1, 3, 0), 'p itself unchanged');
  });

  test('a caller-made cache without room (exact tensors) is never written', () => {
    const keys = [new ort.Tensor('float32', new Float32Array(kvH * 2 * hd).fill(7), [1, kvH, 2, hd])];
    const c: KvCache = { keys, values: [new ort.Tensor('float32', new Float32Array(kvH * 2 * hd), [1, kvH, 2, hd])], batch: 1, length: 2, starts: [0] };
    const next = appendKv(c, [new Float32Array(kvH * hd).fill(1)], [new Float32Array(kvH * hd)], { batch: 1, width: 1, kvHeads: kvH, headDim: hd, starts: [0], reserve: 0 });
    assert.ok((keys[0]!.data as Float32Array).every((x) => x === 7));
    assert.equal(kvCapacity(next), 3);
  });

  test('packRowsKv right-aligns each row\'s first slots with room after them; rowSlotsKv reads a row\'s slots back', () => {
    /** a batch-1 cache of `cap` slots, slot t of head h holding seed·100 + h·10 + t (keys) and its negation (values) */
    const one = (seed: number, n: number, cap: number): KvCache => {
      const k = new Float32Array(kvH * cap * hd);
      for (let h = 0; h < kvH; h++) for (let t = 0; t < n; t++) k.fill(seed * 100 + h * 10 + t, (h * cap + t) * hd, (h * cap + t + 1) * hd);
      const dims = [1, kvH, cap, hd];
      return { keys: [new ort.Tensor('float32', k, dims)], values: [new ort.Tensor('float32', k.map((x) => -x), dims)], batch: 1, length: n, starts: [0] };
    };
    const srcs = [one(1, 5, 8), null, one(3, 3, 3)];
    // row 0 feeds its first 4 of 5 slots, row 1 none (a fresh prompt), row 2 all 3; room for 2 new slots
    const kv = packRowsKv(srcs, [4, 0, 3], 2, [0, 5, 1], kvH, hd, 1);
    assert.equal(kv.length, 4);
    assert.equal(kvCapacity(kv), 6);
    assert.deepEqual(kv.starts, [0, 5, 1]);
    assert.ok(canAppendInPlace(kv, 2), 'the step appends its new slots in place');
    const at = (b: number, h: number, t: number) => (kv.keys[0]!.data as Float32Array)[((b * kvH + h) * 6 + t) * hd]!;
    for (let h = 0; h < kvH; h++) {
      assert.deepEqual([0, 1, 2, 3].map((t) => at(0, h, t)), [0, 1, 2, 3].map((t) => 100 + h * 10 + t));
      assert.deepEqual([0, 1, 2, 3].map((t) => at(1, h, t)), [0, 0, 0, 0]);
      assert.deepEqual([1, 2, 3].map((t) => at(2, h, t)), [0, 1, 2].map((t) => 300 + h * 10 + t));
    }
    const back = rowSlotsKv(kv, 2, 2, 2); // row 2's slots 2..3 = its own slots 1..2
    for (let h = 0; h < kvH; h++) {
      assert.deepEqual([0, 1].map((t) => back.keys[0]![(h * 2 + t) * hd]), [301 + h * 10, 302 + h * 10]);
      assert.deepEqual([0, 1].map((t) => back.values[0]![(h * 2 + t) * hd]), [-(301 + h * 10), -(302 + h * 10)]);
    }
  });
});

// one file, two qwen3 layers: keeps the 28 cases fast
const CASES = [
  { family: 'llama' as const, opts: { ...TINY_MODELS.llama, shards: 1 } },
  { family: 'qwen2' as const, opts: TINY_MODELS.qwen2 },
  { family: 'qwen3' as const, opts: { ...TINY_MODELS.qwen3, numLayers: 2 } },
];

for (const { family, opts } of CASES) {
  for (const attention of ['onnx', 'mha', 'matmul'] as const) {
    describe(`in-place KV decode: ${family}, attention ${attention}`, () => {
      let tmp: string;
      let cache: ReturnType<typeof tempCache>;
      let ck: Checkpoint;
      let engine: OnnxEngine;
      let seqs: number[][];
      let steer: { layer: number; vector: number[]; alpha: number };

      before(async () => {
        cache = tempCache();
        tmp = mkdtempSync(join(tmpdir(), `safekeep-kv-inplace-${family}-`));
        await writeRandomCheckpoint(join(tmp, 'm'), family, { ...opts, seed: 11, std: 0.2 });
        ck = await loadCheckpoint(join(tmp, 'm'));
        engine = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 1, attention });
        const V = ck.config.vocabSize;
        let s = 777;
        const next = () => { s = (s * 1103515245 + 12345) % 2147483648; return 3 + (s % (V - 3)); };
        seqs = [9, 3, 6].map((n) => Array.from({ length: n }, next));
        steer = { layer: 1, vector: Array.from({ length: ck.config.hiddenSize }, (_, i) => Math.cos(i + 2)), alpha: 2 };
      });
      after(async () => {
        await engine?.dispose();
        cache?.cleanup();
        if (tmp) rmSync(tmp, { recursive: true, force: true });
      });

      test('batched left-padded greedy decode = Float64 oracle (with and without steering)', async () => {
        for (const s of [undefined, steer]) {
          const gen = await engine.generate(seqs, { maxNewTokens: 7, stopIds: [], steer: s, returnStepLogits: true, returnFirstTokenHidden: true });
          for (let i = 0; i < seqs.length; i++) {
            const ref = referenceGenerate(ck, seqs[i]!, { maxNewTokens: 7, stopIds: [], steer: s });
            assert.deepEqual(gen[i]!.generatedIds, ref.generatedIds, `seq ${i} ids (steer ${!!s})`);
            assert.ok(rel(gen[i]!.stepLogits!, ref.stepLogits) <= REL, `seq ${i} step logits rel ${rel(gen[i]!.stepLogits!, ref.stepLogits)}`);
            assert.ok(rel(gen[i]!.firstTokenHidden!, ref.firstTokenHidden!) <= REL, `seq ${i} first-token hidden rel ${rel(gen[i]!.firstTokenHidden!, ref.firstTokenHidden!)}`);
          }
        }
      });

      test(`decode across a KV_CHUNK (${KV_CHUNK}) boundary = full recompute without a KV cache`, async () => {
        const n = KV_CHUNK + 12;
        const prompt = seqs[0]!;
        const [g] = await engine.generate([prompt], { maxNewTokens: n, stopIds: [], steer, returnStepLogits: true });
        assert.equal(g!.generatedIds.length, n);
        const full = [...prompt, ...g!.generatedIds.slice(0, -1)];
        const [f] = await engine.forward([full], { steer, hiddenAt: 'none', logitsAt: Array.from({ length: n }, (_, k) => prompt.length - 1 + k) });
        assert.ok(rel(g!.stepLogits!, f!.logits) <= REL, `step logits vs recompute rel ${rel(g!.stepLogits!, f!.logits)}`);
      });

      test('a step loop that regrows every few tokens, in place in between, = full recompute (left-padded batch)', async () => {
        const B = 2;
        const rows = [seqs[1]!, seqs[0]!];
        const W = Math.max(...rows.map((r) => r.length));
        const starts = rows.map((r) => W - r.length);
        const ids = new BigInt64Array(B * W);
        rows.forEach((r, b) => r.forEach((t, i) => { ids[b * W + starts[b]! + i] = BigInt(t); }));
        const m = steeringMatrix(engine.numLayers, engine.dModel, steer);
        let out = await engine.step({ ids, batch: B, width: W, starts, past: null, steer: m, hiddenIndex: [], logitsIndex: [] });
        assert.equal(kvCapacity(out.present!), W, 'prefill: exact buffer');
        const fed: number[][] = rows.map(() => []);
        const logits: Float32Array[] = [];
        const hidden: Float32Array[] = [];
        let inPlace = 0;
        let grown = 0;
        for (let k = 0; k < 9; k++) {
          const tok = rows.map((_, b) => 5 + ((7 * k + 3 * b) % 50));
          tok.forEach((t, b) => fed[b]!.push(t));
          const before = out.present!;
          out = await engine.step({ ids: BigInt64Array.from(tok, BigInt), batch: B, width: 1, starts, past: before, steer: m, hiddenIndex: [0, 1], logitsIndex: [0, 1], reserve: 2 });
          if (out.present!.keys[0]!.data === before.keys[0]!.data) inPlace++;
          else { grown++; assert.equal(kvCapacity(out.present!), before.length + 1 + 2); }
          logits.push(out.logits.slice());
          hidden.push(out.hidden.slice());
        }
        assert.equal(grown, 3, 'regrown every third step');
        assert.equal(inPlace, 6);
        const L1 = engine.numLayers + 1;
        const d = engine.dModel;
        const V = engine.vocabSize;
        for (let b = 0; b < B; b++) {
          const seq = [...rows[b]!, ...fed[b]!];
          const [f] = await engine.forward([seq], { steer, hiddenAt: 'all', logitsAt: 'all' });
          for (let k = 0; k < 9; k++) {
            const t = rows[b]!.length + k;
            assert.ok(rel(logits[k]!.subarray(b * V, (b + 1) * V), f!.logits.subarray(t * V, (t + 1) * V)) <= REL, `row ${b} step ${k} logits`);
            for (let l = 0; l < L1; l++) {
              const got = hidden[k]!.subarray((l * B + b) * d, (l * B + b + 1) * d);
              const want = f!.hidden.subarray((l * seq.length + t) * d, (l * seq.length + t + 1) * d);
              assert.ok(rel(got, want) <= REL, `row ${b} step ${k} hidden[${l}] rel ${rel(got, want)}`);
            }
          }
        }
      });

      test('two continuations of one past: each equals its recompute, the first is not overwritten', async () => {
        const prompt = seqs[2]!;
        const m = steeringMatrix(engine.numLayers, engine.dModel);
        const pre = await engine.step({ ids: BigInt64Array.from(prompt, BigInt), batch: 1, width: prompt.length, starts: [0], past: null, steer: m, hiddenIndex: [], logitsIndex: [], reserve: 8 });
        const step = (past: KvCache, tok: number) => engine.step({ ids: BigInt64Array.from([BigInt(tok)]), batch: 1, width: 1, starts: [0], past, steer: m, hiddenIndex: [], logitsIndex: [0] });
        const a = await step(pre.present!, 10);
        const b = await step(pre.present!, 20);
        const a2 = await step(a.present!, 30);
        const V = engine.vocabSize;
        const check = async (seq: number[], got: Float32Array, what: string) => {
          const [f] = await engine.forward([seq], { hiddenAt: 'none', logitsAt: 'last' });
          assert.ok(rel(got, f!.logits) <= REL, `${what} rel ${rel(got, f!.logits)}`);
        };
        await check([...prompt, 10], a.logits, 'first continuation');
        await check([...prompt, 20], b.logits, 'second continuation');
        await check([...prompt, 10, 30], a2.logits.subarray(0, V), 'the first continued after the second ran');
      });
    });
  }
}
