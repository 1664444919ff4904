/**
 * Top-p's cut (sample/warpers.ts) finds its kept set from a histogram of the weights and a sort of the bins the cut can
 * reach. Checked here against the definition written out the slow way — every token sorted by weight (ties: the lower
 * id first), summed from the largest down, a token kept while 1 − (mass above it) / total > 1 − p — bit for bit,
 * on generated rows: flat and peaked, with ties at the cut, zeros left by top-k, and p at its edges.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { warpedWeights } from '../src/engine/sample/warpers.ts';

/** the reference: HF's top-p on weights w = exp((z − max) / T), by a full sort */
function referenceTopP(z: Float64Array, temperature: number, p: number, floor = -Infinity): Float64Array {
  let max = -Infinity;
  for (const x of z) if (x > max) max = x;
  const w = Float64Array.from(z, (x) => (x >= floor ? Math.exp((x - max) * (1 / temperature)) : 0));
  const ids = [...w.keys()].filter((i) => w[i]! > 0).sort((a, b) => w[b]! - w[a]! || a - b);
  let total = 0;
  for (const x of w) if (x > 0) total += x;
  const keep = new Set<number>();
  let above = 0;
  for (let k = 0; k < ids.length; k++) {
    if (k > 0 && !(1 - above / total > 1 - p)) break;
    keep.add(ids[k]!);
    above += w[ids[k]!]!;
  }
  return Float64Array.from(w, (x, i) => (keep.has(i) ? x : 0));
}

/** a row of logits: Gaussian with spread `sd`, a few spikes, and values repeated so that ties fall at the cut */
const rows = fc.record({
  V: fc.integer({ min: 1, max: 3000 }),
  sd: fc.double({ min: 0.01, max: 8, noNaN: true }),
  spikes: fc.array(fc.double({ min: 0, max: 30, noNaN: true }), { maxLength: 4 }),
  tieEvery: fc.integer({ min: 0, max: 7 }),
  seed: fc.integer({ min: 1, max: 2 ** 30 }),
}).map(({ V, sd, spikes, tieEvery, seed }) => {
  let s = seed;
  const u = () => { s = (s * 1103515245 + 12345) % 2147483648; return (s + 0.5) / 2147483648; };
  const z = Float64Array.from({ length: V }, () => sd * Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * u()));
  spikes.forEach((x, k) => { z[(k * 7919) % V] = x; });
  // coarse values: many tokens share a logit, so the cut often lands inside a run of equal weights
  if (tieEvery > 0) for (let i = 0; i < V; i++) if (i % tieEvery === 0) z[i] = Math.round(z[i]! * 2) / 2;
  return z;
});

test('top-p: the histogram cut keeps exactly the tokens of a full sort, bit for bit', () => {
  fc.assert(fc.property(rows, fc.constantFrom(0, 1e-12, 0.05, 0.3, 0.8, 0.9, 0.95, 0.999, 1 - 1e-12), fc.constantFrom(0.3, 0.7, 1, 2.5), (z, p, t) => {
    const got = warpedWeights(z, { temperature: t, topP: p });
    assert.deepEqual(Array.from(got), Array.from(referenceTopP(z, t, p)));
  }), { numRuns: 400, seed: 20261204 });
});

test('top-p after top-k: the tokens top-k dropped stay out of both the mass and the cut', () => {
  fc.assert(fc.property(rows, fc.integer({ min: 1, max: 50 }), fc.constantFrom(0.5, 0.9), (z, k, p) => {
    if (k >= z.length) return;
    const floor = [...z].sort((a, b) => b - a)[k - 1]!;
    const got = warpedWeights(z, { temperature: 0.7, topK: k, topP: p });
    assert.deepEqual(Array.from(got), Array.from(referenceTopP(z, 0.7, p, floor)));
  }), { numRuns: 200, seed: 7 });
});

test('top-p on a flat 49,152-token row: the nucleus of thousands of tokens equals the full sort', () => {
  let s = 3;
  const u = () => { s = (s * 1103515245 + 12345) % 2147483648; return (s + 0.5) / 2147483648; };
  const z = Float64Array.from({ length: 49_152 }, () => 2.4 * Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * u()));
  const got = warpedWeights(z, { temperature: 0.7, topP: 0.95 });
  const want = referenceTopP(z, 0.7, 0.95);
  const kept = got.reduce((a, x) => a + (x > 0 ? 1 : 0), 0);
  assert.ok(kept > 1000 && kept < 49_152, `a nucleus of ${kept} tokens`);
  assert.deepEqual(Array.from(got), Array.from(want));
});
