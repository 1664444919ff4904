/**
 * Feature rankings (src/sae/features.ts) on a dictionary small enough to check by hand: features ±e_i of R³
 * (W_enc = W_decᵀ, ReLU), so activations are the positive and negative parts of the coordinates. Cosines are the
 * signed coordinates of the unit direction; attributions are (harmful − benign mean activation) × projection, and
 * they sum to the projection of the classes' mean reconstruction difference on r̂.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decoderCosines, featureAttribution } from '../src/sae/features.ts';
import { decode, encode } from '../src/sae/math.ts';
import type { Sae } from '../src/sae/types.ts';

function signedBasis(d: number): Sae {
  const m = 2 * d;
  const W_dec = new Float32Array(m * d);
  const W_enc = new Float32Array(d * m);
  for (let i = 0; i < d; i++) {
    for (const [j, s] of [[2 * i, 1], [2 * i + 1, -1]] as const) { W_dec[j * d + i] = s; W_enc[i * m + j] = s; }
  }
  return {
    config: { architecture: 'standard', dIn: d, dSae: m, k: null, rescaleActsByDecoderNorm: false, applyBDecToInput: false, normalizeActivations: 'none', hookName: 'blocks.0.hook_resid_post', dtype: 'F32', layout: 'saelens', source: 'test' },
    W_enc: { dtype: 'F32', rows: d, cols: m, data: W_enc }, W_dec: { dtype: 'F32', rows: m, cols: d, data: W_dec },
    b_enc: new Float32Array(m), b_dec: new Float32Array(d), threshold: null, bytes: 0,
  };
}

test('decoder cosines: the signed coordinates of the unit direction, best first, ties by index', () => {
  const sae = signedBasis(3);
  const f = decoderCosines(sae, [0, -3, 4]);
  assert.deepEqual(f.slice(0, 2).map((x) => x.index), [4, 3]);
  assert.ok(Math.abs(f[0]!.cosine - 0.8) < 1e-7 && Math.abs(f[1]!.cosine - 0.6) < 1e-7);
  // the zero coordinate: features 0 and 1 both 0 → index order, after the positive ones
  assert.deepEqual(f.slice(2, 4).map((x) => [x.index, x.cosine]), [[0, 0], [1, 0]]);
  assert.throws(() => decoderCosines(sae, [0, 0, 0]), /all zeros/);
  assert.throws(() => decoderCosines(sae, [1, 2]), /d_in is 3/);
});

test('attribution: Δ mean activation × projection; the sum is the mean reconstruction difference along r̂', async () => {
  const sae = signedBasis(3);
  // harmful rows move +2 along e0 and −1 along e2 on average; benign rows sit elsewhere
  const harmful = [[2, 1, -1], [2, -1, -1]];
  const benign = [[0, 1, 0], [0, 0, 0]];
  const x = Float32Array.from([...harmful, ...benign].flat());
  const labels = [1, 1, 0, 0];
  const r = [1, 0, -1];
  const a = await featureAttribution(sae, r, x, labels);
  const byIndex = new Map(a.map((f) => [f.index, f]));
  // feature 0 (+e0): Δact 2, projection 1/√2; feature 5 (−e2): Δact 1, projection 1/√2
  assert.ok(Math.abs(byIndex.get(0)!.attribution - 2 / Math.SQRT2) < 1e-6);
  assert.ok(Math.abs(byIndex.get(5)!.attribution - 1 / Math.SQRT2) < 1e-6);
  assert.deepEqual(a.slice(0, 2).map((f) => f.index), [0, 5]);
  const sum = a.reduce((s, f) => s + f.attribution, 0);
  const recon = decode(sae, encode(sae, x, 4).acts, 4, null);
  let proj = 0;
  for (let i = 0; i < 3; i++) proj += ((recon[i]! + recon[3 + i]!) / 2 - (recon[6 + i]! + recon[9 + i]!) / 2) * r[i]! / Math.SQRT2;
  assert.ok(Math.abs(sum - proj) < 1e-6, `sum ${sum}, projection ${proj}`);
  await assert.rejects(featureAttribution(sae, r, x, [1, 1, 1, 1]), /harmful and benign rows/);
  // onnxruntime's encoder gives the same attributions
  const { SaeEncoder } = await import('../src/engine/runtime/sae-encoder.ts');
  const enc = await SaeEncoder.open(sae, { threads: 1 });
  try {
    const b = await featureAttribution(sae, r, x, labels, (rows, m) => enc.encode(rows, m));
    assert.deepEqual(b.map((f) => f.index), a.map((f) => f.index));
    b.forEach((f, i) => assert.ok(Math.abs(f.attribution - a[i]!.attribution) < 1e-6));
  } finally {
    await enc.release();
  }
});
