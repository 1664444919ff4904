/**
 * The oracle's own consistency on random checkpoints of all four families: KV-cache decode = full recompute,
 * steering forms agree and reach every later position, family paths reduce to each other where the math says so.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import { readSafetensorsHeader, writeSafetensors, type TensorToWrite } from '../src/checkpoint/safetensors.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import type { Family } from '../src/checkpoint/types.ts';

const root = mkdtempSync(join(tmpdir(), 'safekeep-ref-'));
after(() => rmSync(root, { recursive: true, force: true }));

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

const ids = [5, 17, 300, 42, 42, 9, 511, 100, 3, 77, 12];

for (const fam of ['llama', 'mistral', 'qwen2', 'qwen3'] as Family[]) {
  test(`${fam}: KV-cache decode (prefill 4, then 1 token at a time, then 3) equals the full recompute`, async () => {
    const ck = await loadCheckpoint(await writeRandomCheckpoint(join(root, fam), fam, { seed: 11 }));
    const { numLayers: L, hiddenSize: d, vocabSize: V } = ck.config;
    const T = ids.length;
    const steer = { layer: 2, vector: Array.from({ length: d }, (_, i) => Math.cos(i)), alpha: 3 };
    for (const opts of [{}, { steer }]) {
      const full = referenceForward(ck, ids, opts);
      let r = referenceForward(ck, ids.slice(0, 4), opts);
      const parts = [r];
      for (let t = 4; t < 8; t++) { r = referenceForward(ck, [ids[t]!], { ...opts, past: r.kv }); parts.push(r); }
      r = referenceForward(ck, ids.slice(8), { ...opts, past: r.kv });
      parts.push(r);
      assert.equal(r.kv.length, T);
      // reassemble [L+1, T, d] and [T, V]
      const hidden = new Float64Array((L + 1) * T * d);
      const logits = new Float64Array(T * V);
      let t0 = 0;
      for (const p of parts) {
        const n = p.logits.length / V;
        logits.set(p.logits, t0 * V);
        for (let l = 0; l <= L; l++) hidden.set(p.hidden.subarray(l * n * d, (l + 1) * n * d), (l * T + t0) * d);
        t0 += n;
      }
      assert.ok(maxDiff(hidden, full.hidden) <= 1e-12, `hidden ${maxDiff(hidden, full.hidden)}`);
      assert.ok(maxDiff(logits, full.logits) <= 1e-12, `logits ${maxDiff(logits, full.logits)}`);
    }
  });
}

test('steering: {layer, vector, alpha} = a steering matrix row of -alpha·v/|v|; layers below are untouched; causal', async () => {
  const ck = await loadCheckpoint(await writeRandomCheckpoint(join(root, 'q3'), 'qwen3', { seed: 5 }));
  const { numLayers: L, hiddenSize: d } = ck.config;
  const T = ids.length;
  const v = Array.from({ length: d }, (_, i) => (i % 3) - 1);
  const norm = Math.sqrt(v.reduce((a, b) => a + b * b, 0));
  const m = new Float64Array((L + 1) * d);
  for (let i = 0; i < d; i++) m[2 * d + i] = (-2.5 * v[i]!) / norm;
  const a = referenceForward(ck, ids, { steer: { layer: 2, vector: v, alpha: 2.5 } });
  const b = referenceForward(ck, ids, { steerMatrix: m });
  const plain = referenceForward(ck, ids);
  assert.ok(maxDiff(a.hidden, b.hidden) <= 1e-12);
  assert.ok(maxDiff(a.logits, b.logits) <= 1e-12);
  // hidden[0..1] unchanged; hidden[2] shifted by exactly the steering row at every position
  assert.ok(maxDiff(a.hidden.subarray(0, 2 * T * d), plain.hidden.subarray(0, 2 * T * d)) === 0);
  for (let t = 0; t < T; t++) for (let i = 0; i < d; i++) {
    const k = (2 * T + t) * d + i;
    assert.ok(Math.abs(a.hidden[k]! - plain.hidden[k]! - m[2 * d + i]!) <= 1e-12);
  }
  // steering layer L moves logits; layer 0 = the embedding output
  const e = referenceForward(ck, ids, { steer: { layer: 0, vector: v, alpha: 1 } });
  assert.ok(Math.abs(e.hidden[0]! - plain.hidden[0]! + v[0]! / norm) <= 1e-12);
  assert.ok(maxDiff(referenceForward(ck, ids, { steer: { layer: L, vector: v, alpha: 1 } }).logits, plain.logits) > 1e-3);
  assert.throws(() => referenceForward(ck, ids, { steer: { layer: L + 1, vector: v, alpha: 1 } }), /out of range/);
});

test('family paths: qwen2 with zero q/k/v biases = the same weights as llama without rope scaling; mistral = llama', async () => {
  const base = await loadCheckpoint(await writeRandomCheckpoint(join(root, 'l'), 'llama', { seed: 9, ropeScaling: null, ropeTheta: 10000, rmsNormEps: 1e-6 }));
  const mis = await loadCheckpoint(await writeRandomCheckpoint(join(root, 'm'), 'mistral', { seed: 9, ropeTheta: 10000, rmsNormEps: 1e-6 }));
  assert.ok(maxDiff(referenceForward(base, ids).logits, referenceForward(mis, ids).logits) === 0);
  // qwen2 checkpoint = llama tensors + zero biases, tie false
  const q2dir = join(root, 'q2z');
  await writeRandomCheckpoint(q2dir, 'qwen2', { seed: 9, tieWordEmbeddings: false });
  const cfg = JSON.parse(readFileSync(join(q2dir, 'config.json'), 'utf8'));
  const tensors: Record<string, TensorToWrite> = {};
  for (const e of readSafetensorsHeader(join(base.dir, 'model.safetensors')).entries) tensors[e.name] = { dtype: 'F32', shape: e.shape, data: readTensorF32({ ...e, dtype: 'F32' }) };
  for (const e of readSafetensorsHeader(join(q2dir, 'model.safetensors')).entries) {
    if (e.name.endsWith('.bias')) tensors[e.name] = { dtype: 'F32', shape: e.shape, data: new Float32Array(e.shape[0]!) };
  }
  writeSafetensors(join(q2dir, 'model.safetensors'), tensors);
  writeFileSync(join(q2dir, 'config.json'), JSON.stringify({ ...cfg, rope_theta: 10000, rms_norm_eps: 1e-6 }));
  const q2 = await loadCheckpoint(q2dir);
  assert.ok(maxDiff(referenceForward(base, ids).logits, referenceForward(q2, ids).logits) === 0);
  // and the real random qwen2 biases do matter
  const q2b = await loadCheckpoint(await writeRandomCheckpoint(join(root, 'q2b'), 'qwen2', { seed: 9, tieWordEmbeddings: false }));
  assert.ok(maxDiff(referenceForward(base, ids).logits, referenceForward(q2b, ids).logits) > 1e-3);
});

test('referenceGenerate: stops on a stop id (included), length otherwise; KV decode = greedy by full recompute', async () => {
  const ck = await loadCheckpoint(await writeRandomCheckpoint(join(root, 'g'), 'llama', { seed: 2 }));
  const V = ck.config.vocabSize;
  const prompt = ids.slice(0, 5);
  const g = referenceGenerate(ck, prompt, { maxNewTokens: 6, stopIds: [] });
  assert.equal(g.generatedIds.length, 6);
  assert.equal(g.finish, 'length');
  // greedy by full recompute, no cache
  const seq = [...prompt];
  for (let k = 0; k < 6; k++) {
    const r = referenceForward(ck, seq);
    const last = r.logits.subarray((seq.length - 1) * V);
    assert.ok(maxDiff(last, g.stepLogits.subarray(k * V, (k + 1) * V)) <= 1e-12);
    let best = 0;
    for (let i = 1; i < V; i++) if (last[i]! > last[best]!) best = i;
    assert.equal(best, g.generatedIds[k]);
    seq.push(best);
  }
  const s = referenceGenerate(ck, prompt, { maxNewTokens: 6, stopIds: [g.generatedIds[2]!] });
  assert.equal(s.finish, 'stop');
  assert.deepEqual(s.generatedIds, g.generatedIds.slice(0, g.generatedIds.indexOf(g.generatedIds[2]!) + 1));
  const one = referenceGenerate(ck, prompt, { maxNewTokens: 1, stopIds: [] });
  assert.equal(one.generatedIds.length, 1);
  assert.ok(one.firstTokenHidden !== null);
  assert.ok(maxDiff(one.firstTokenHidden!, g.firstTokenHidden!) === 0);
});

test('weights: bf16 on an F32 checkpoint = the same draws stored as BF16; differs from f32', async () => {
  const f = await loadCheckpoint(await writeRandomCheckpoint(join(root, 'wf'), 'mistral', { seed: 21 }));
  const b = await loadCheckpoint(await writeRandomCheckpoint(join(root, 'wb'), 'mistral', { seed: 21, dtype: 'BF16' }));
  const fb = referenceForward(f, ids, { weights: 'bf16' });
  assert.ok(maxDiff(fb.logits, referenceForward(b, ids).logits) === 0);
  assert.ok(maxDiff(fb.hidden, referenceForward(b, ids, { weights: 'bf16' }).hidden) === 0);
  const d = maxDiff(fb.logits, referenceForward(f, ids).logits);
  assert.ok(d > 1e-4 && d < 0.1, `bf16 vs f32 logits differ by ${d}`);
  const g = referenceGenerate(f, ids.slice(0, 4), { maxNewTokens: 3, stopIds: [], weights: 'bf16' });
  assert.deepEqual(g.generatedIds, referenceGenerate(b, ids.slice(0, 4), { maxNewTokens: 3, stopIds: [] }).generatedIds);
});
