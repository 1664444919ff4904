import assert from 'node:assert/strict';
import { test } from 'node:test';
import { allRows } from '../src/analysis/activations.ts';
import { permutationCosineBand, randomCosineBand } from '../src/analysis/baselines.ts';
import { layerCosines, refusalDirection } from '../src/analysis/direction.ts';
import { makeRng } from '../src/util/rng.ts';
import { mean, sd } from '../src/analysis/stats.ts';
import { planted, randomUnit } from './helpers/analysis-synthetic.ts';

test('seeded RNG: reproducible uniforms and standard normals', () => {
  const a = makeRng(42);
  const b = makeRng(42);
  for (let i = 0; i < 10; i++) assert.equal(a.uniform(), b.uniform());
  const z = Array.from({ length: 20000 }, () => a.normal());
  assert.ok(Math.abs(mean(z)) < 0.03, `mean ${mean(z)}`);
  assert.ok(Math.abs(sd(z) - 1) < 0.03, `sd ${sd(z)}`);
  const u = Array.from({ length: 20000 }, () => a.uniform());
  assert.ok(Math.min(...u) >= 0 && Math.max(...u) < 1);
  assert.ok(Math.abs(mean(u) - 0.5) < 0.01);
});

test('random-direction band: 95 % half-width ≈ 1.96/√d (cos of an isotropic vector has variance 1/d)', () => {
  for (const d of [64, 256]) {
    const ref = { layers: 2, d, data: new Float64Array(2 * d) };
    ref.data.set(randomUnit(d, 1), 0);
    ref.data.set(randomUnit(d, 2), d);
    const band = randomCosineBand(ref, { reps: 4000, seed: 5 });
    const expected = 1.96 / Math.sqrt(d);
    for (let l = 0; l < 2; l++) {
      const half = (band.hi[l]! - band.lo[l]!) / 2;
      assert.ok(Math.abs(half / expected - 1) < 0.08, `d=${d} layer ${l}: half-width ${half} vs ${expected}`);
      assert.ok(Math.abs(band.hi[l]! + band.lo[l]!) < 0.02, 'centred on 0');
    }
  }
  // defaults: ≥ 1,000 draws
  assert.equal(randomCosineBand({ layers: 1, d: 8, data: Float64Array.from([1, 0, 0, 0, 0, 0, 0, 0]) }).reps, 1000);
});

test('label-permutation band: Gram and direct computations agree; the planted direction lies far outside', () => {
  const p = planted({ pairs: 40, layers: 3, d: 32, strength: [0, 3, 3], seed: 8 });
  const target = refusalDirection(p.acts, p.labels);
  const rows = allRows(p.acts.n);
  const g = permutationCosineBand(p.acts, p.labels, target, rows, { reps: 200, seed: 3, method: 'gram' });
  const dr = permutationCosineBand(p.acts, p.labels, target, rows, { reps: 200, seed: 3, method: 'direct' });
  for (let l = 0; l < 3; l++) {
    assert.ok(Math.abs(g.lo[l]! - dr.lo[l]!) < 1e-9 && Math.abs(g.hi[l]! - dr.hi[l]!) < 1e-9, `layer ${l}`);
  }
  // the unpermuted direction has cosine 1 with itself; permuted labels destroy the planted contrast
  const self = layerCosines(target, target);
  for (const l of [1, 2]) {
    assert.ok(self[l]! > g.hi[l]! + 0.3, `layer ${l}: band [${g.lo[l]}, ${g.hi[l]}]`);
    // and the band is close to the random band scale for the residual noise, well below the planted cosine
    assert.ok(g.hi[l]! < 0.7);
  }
});
