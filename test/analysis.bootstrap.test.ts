import assert from 'node:assert/strict';
import { test } from 'node:test';
import { auroc } from '../src/analysis/auroc.ts';
import { bootstrapAuroc, pairUnion } from '../src/analysis/bootstrap.ts';
import { makeRng } from '../src/analysis/rng.ts';
import { quantile, wilsonInterval } from '../src/analysis/stats.ts';

function noisyPairs(pairs: number, shift: number, seed: number) {
  const rng = makeRng(seed);
  const scores: number[] = [];
  const labels: number[] = [];
  const pairIds: string[] = [];
  for (let p = 0; p < pairs; p++) {
    scores.push(rng.normal() + shift, rng.normal());
    labels.push(1, 0);
    pairIds.push(`p${p}`, `p${p}`);
  }
  return { scores, labels, pairIds };
}

test('bootstrap is reproducible under a seed and changes with it', () => {
  const s = noisyPairs(40, 1, 3);
  const a = bootstrapAuroc([s], { reps: 300, seed: 11 });
  const b = bootstrapAuroc([s], { reps: 300, seed: 11 });
  const c = bootstrapAuroc([s], { reps: 300, seed: 12 });
  assert.deepEqual(a, b);
  assert.notDeepEqual(a.estimates[0], c.estimates[0]);
  const e = a.estimates[0]!;
  assert.equal(e.auroc, auroc(s.scores, s.labels));
  assert.equal(e.n, 80);
  assert.ok(e.lo < e.auroc && e.auroc < e.hi, `${e.lo} < ${e.auroc} < ${e.hi}`);
  assert.equal(a.reps, 300);
});

test('default is 1,000 reps and a 95 % interval', () => {
  const r = bootstrapAuroc([noisyPairs(10, 1, 1)]);
  assert.equal(r.reps, 1000);
  assert.equal(r.level, 0.95);
});

test('perfect separation: every resample has AUROC 1 → interval [1, 1]', () => {
  const s = noisyPairs(20, 100, 5);
  const e = bootstrapAuroc([s], { reps: 200 }).estimates[0]!;
  assert.deepEqual([e.auroc, e.lo, e.hi], [1, 1, 1]);
});

test('resampling is over pairs and paired across sets: a monotone rescoring has difference exactly 0', () => {
  const a = noisyPairs(30, 0.7, 9);
  // same ranking (monotone transform), listed in another row order: AUROC equal on every paired resample
  const idx = a.scores.map((_, i) => i).reverse();
  const b = {
    scores: idx.map((i) => Math.exp(a.scores[i]!)),
    labels: idx.map((i) => a.labels[i]!),
    pairIds: idx.map((i) => a.pairIds[i]!),
  };
  const r = bootstrapAuroc([a, b], { reps: 400, seed: 2 });
  assert.deepEqual(r.differences[1], { diff: 0, lo: 0, hi: 0 });
  assert.deepEqual(r.estimates[0], r.estimates[1]);
  // an unrelated set on the same pairs: its difference interval is not degenerate
  const c = noisyPairs(30, 0.7, 10);
  const r2 = bootstrapAuroc([a, c], { reps: 400, seed: 2 });
  assert.ok(r2.differences[1]!.hi - r2.differences[1]!.lo > 0.05);
});

test('interval width shrinks like 1/√n', () => {
  const w = (pairs: number) => {
    const e = bootstrapAuroc([noisyPairs(pairs, 1, 21)], { reps: 1000, seed: 4 }).estimates[0]!;
    return e.hi - e.lo;
  };
  const ratio = w(50) / w(800);
  assert.ok(ratio > 3 && ratio < 5.5, `width ratio ${ratio}, expected ≈ 4`);
});

test('pair union and quantile helpers', () => {
  assert.deepEqual(pairUnion([{ scores: [], labels: [], pairIds: ['b', 'a'] }, { scores: [], labels: [], pairIds: ['c', 'a'] }]), ['a', 'b', 'c']);
  assert.equal(quantile([1, 2, 3, 4], 0.5), 2.5);
  assert.equal(quantile([10, 0], 0.25), 2.5);
  // Wilson interval, k = 0, n = 40, z = 1.96: upper = z²/(n + z²) = 0.08763
  const wi = wilsonInterval(0, 40);
  assert.equal(wi.lo, 0);
  assert.ok(Math.abs(wi.hi - 0.0876) < 1e-4);
});

test('bootstrap equals a naive re-implementation (explicit resamples, sort-based AUROC) draw for draw', () => {
  // scores rounded to halves: many ties within and across pairs
  const a = noisyPairs(25, 0.5, 13);
  a.scores = a.scores.map((s) => Math.round(s * 2) / 2);
  const reps = 300;
  const seed = 17;
  const fast = bootstrapAuroc([a], { reps, seed }).estimates[0]!;
  const union = pairUnion([a]);
  const rng = makeRng(seed);
  const boot: number[] = [];
  for (let k = 0; k < reps; k++) {
    const draw = union.map(() => union[rng.int(union.length)]!);
    const s: number[] = [];
    const y: number[] = [];
    for (const p of draw) a.pairIds.forEach((id, r) => id === p && (s.push(a.scores[r]!), y.push(a.labels[r]!)));
    boot.push(auroc(s, y));
  }
  const lo = quantile(boot, 0.025);
  const hi = quantile(boot, 0.975);
  assert.ok(Math.abs(fast.lo - lo) < 1e-12 && Math.abs(fast.hi - hi) < 1e-12, `fast [${fast.lo}, ${fast.hi}] vs naive [${lo}, ${hi}]`);
});

test('group bootstrap: rows sharing a group id resample together (two groups → only three distinct resamples)', () => {
  // group A: 10 pairs perfectly separated; group B: 10 pairs perfectly reversed. A resample of groups is AA, AB or
  // BB, whose AUROCs are 1, the full-set value, and 0; a resample of single pairs takes many more values.
  const scores: number[] = [];
  const labels: number[] = [];
  const pairs: string[] = [];
  const groups: string[] = [];
  for (let i = 0; i < 20; i++) {
    const a = i < 10;
    scores.push(a ? 10 + i : -10 - i, a ? -10 - i : 10 + i);
    labels.push(1, 0);
    pairs.push(`p${i}`, `p${i}`);
    groups.push(a ? 'A' : 'B', a ? 'A' : 'B');
  }
  const full = auroc(scores, labels);
  const byGroup = bootstrapAuroc([{ scores, labels, pairIds: groups }], { reps: 200, seed: 1 });
  const byPair = bootstrapAuroc([{ scores, labels, pairIds: pairs }], { reps: 200, seed: 1 });
  assert.equal(byGroup.estimates[0]!.auroc, full);
  assert.equal(byGroup.estimates[0]!.lo, 0);
  assert.equal(byGroup.estimates[0]!.hi, 1);
  assert.ok(byPair.estimates[0]!.lo > 0 && byPair.estimates[0]!.hi < 0.9, `pair bootstrap [${byPair.estimates[0]!.lo}, ${byPair.estimates[0]!.hi}]`);
});
