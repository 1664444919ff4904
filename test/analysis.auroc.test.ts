import assert from 'node:assert/strict';
import { test } from 'node:test';
import { auroc, averageRanks } from '../src/analysis/auroc.ts';
import { makeRng } from '../src/util/rng.ts';
import { SafekeepError } from '../src/util/errors.ts';

/** Independent definition: P(pos > neg) + ½ P(pos = neg) over all pos/neg pairs. */
function pairwiseAuroc(s: number[], y: number[]): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < s.length; i++) {
    if (y[i] !== 1) continue;
    for (let j = 0; j < s.length; j++) {
      if (y[j] !== 0) continue;
      den++;
      num += s[i]! > s[j]! ? 1 : s[i] === s[j] ? 0.5 : 0;
    }
  }
  return num / den;
}

test('average ranks: ties share the mean of their ranks', () => {
  assert.deepEqual([...averageRanks([3, 1, 3, 2])], [3.5, 1, 3.5, 2]);
  assert.deepEqual([...averageRanks([5, 5, 5])], [2, 2, 2]);
});

test('AUROC hand-computed values', () => {
  // pos {0.35, 0.8} vs neg {0.1, 0.4}: 0.35>0.1, 0.35<0.4, 0.8>both → 3/4
  assert.equal(auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]), 0.75);
  // ties: pos {0.5, 0.9} vs neg {0.5, 0.2}: ½ + 1 + 1 + 1 = 3.5 / 4
  assert.equal(auroc([0.5, 0.5, 0.2, 0.9], [1, 0, 0, 1]), 0.875);
  // pos {1, 2} vs neg {1, 2}: ½ + 0 + 1 + ½ = 2 / 4
  assert.equal(auroc([1, 1, 2, 2], [0, 1, 0, 1]), 0.5);
});

test('AUROC: all equal → 0.5, perfect → 1, inverted → 0 (never auto-flipped)', () => {
  assert.equal(auroc([7, 7, 7, 7, 7], [1, 0, 1, 0, 0]), 0.5);
  assert.equal(auroc([0.9, 0.8, 0.1, 0.2], [1, 1, 0, 0]), 1);
  assert.equal(auroc([0.1, 0.2, 0.9, 0.8], [1, 1, 0, 0]), 0);
});

test('AUROC equals the pairwise definition on random data with many ties', () => {
  const rng = makeRng(7);
  for (let rep = 0; rep < 20; rep++) {
    const n = 5 + rng.int(40);
    const s = Array.from({ length: n }, () => rng.int(6));
    const y = Array.from({ length: n }, (_, i) => (i < 2 ? i : rng.int(2)));
    assert.ok(Math.abs(auroc(s, y) - pairwiseAuroc(s, y)) < 1e-12);
  }
});

test('AUROC rejects a single class, bad labels and NaN scores with SafekeepError', () => {
  assert.throws(() => auroc([1, 2], [1, 1]), (e) => e instanceof SafekeepError && /both classes/.test(e.message));
  assert.throws(() => auroc([1, 2], [1, 2]), SafekeepError);
  assert.throws(() => auroc([NaN, 2], [1, 0]), SafekeepError);
  assert.throws(() => auroc([1, 2, 3], [1, 0]), SafekeepError);
});
