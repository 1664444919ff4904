/**
 * The probe's math: the L2 logistic fit is checked against its optimality conditions computed here in plain Float64
 * loops (the objective is strictly convex, so a zero gradient identifies the unique solution) and against a 1-D case
 * solved by bisection; the threshold against hand-counted cases.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fitLogistic } from '../src/analysis/logistic.ts';
import { thresholdForBenignRate } from '../src/analysis/threshold.ts';
import { makeRng } from '../src/util/rng.ts';
import { auroc } from '../src/analysis/auroc.ts';
import { SafekeepError } from '../src/util/errors.ts';

const sigmoid = (f: number): number => 1 / (1 + Math.exp(-f));

/** ∂J/∂w and ∂J/∂b of the standardised problem at a raw-unit solution, computed independently. */
function gradient(rows: number[][], y: number[], w: Float64Array, b: number, l2: number): number[] {
  const n = rows.length;
  const d = rows[0]!.length;
  const mu = Array.from({ length: d }, (_, j) => rows.reduce((s, r) => s + r[j]!, 0) / n);
  const sd = Array.from({ length: d }, (_, j) => Math.sqrt(rows.reduce((s, r) => s + (r[j]! - mu[j]!) ** 2, 0) / n));
  const wz = Array.from({ length: d }, (_, j) => w[j]! * sd[j]!);
  const g = wz.map((x) => l2 * x);
  let gb = 0;
  for (let i = 0; i < n; i++) {
    let f = b;
    for (let j = 0; j < d; j++) f += w[j]! * rows[i]![j]!;
    const r = sigmoid(f) - y[i]!;
    gb += r;
    for (let j = 0; j < d; j++) g[j]! += r * (rows[i]![j]! - mu[j]!) / sd[j]!;
  }
  return [...g, gb];
}

function data(n: number, d: number, seed: number, sep: number): { rows: number[][]; y: number[] } {
  const dirRng = makeRng(7); // the class direction is the same for every sample of a given d
  const u = Array.from({ length: d }, () => dirRng.normal());
  const rng = makeRng(seed);
  const rows: number[][] = [];
  const y: number[] = [];
  for (let i = 0; i < n; i++) {
    const label = i % 2;
    rows.push(Array.from({ length: d }, (_, j) => 3 * rng.normal() + 10 + (label ? sep * u[j]! : 0) + j));
    y.push(label);
  }
  return { rows, y };
}

test('logistic fit: zero gradient of the L2 objective, n > d and d ≫ n (kernel form)', () => {
  for (const [n, d, l2] of [[60, 5, 1], [40, 300, 1], [40, 300, 0.05], [30, 8, 10]] as const) {
    const { rows, y } = data(n, d, n + d, 0.8);
    const fit = fitLogistic(rows, y, { l2 });
    assert.ok(fit.converged, `n=${n} d=${d} λ=${l2}: not converged after ${fit.iterations}`);
    const g = gradient(rows, y, fit.w, fit.b, l2);
    const gmax = Math.max(...g.map(Math.abs));
    assert.ok(gmax < 1e-5, `n=${n} d=${d} λ=${l2}: |∇J| = ${gmax}`);
  }
});

test('logistic fit: 1-D symmetric case matches the bisection root of σ(w) − 1 + λw/2 = 0', () => {
  // x = +1 (harmful), −1 (benign): μ = 0, σ = 1, b = 0 by symmetry; ∂J/∂w = (σ(w) − 1) − σ(−w) + λw = 2(σ(w) − 1) + λw
  const l2 = 0.5;
  const fit = fitLogistic([[1], [-1]], [1, 0], { l2 });
  let lo = 0;
  let hi = 100;
  for (let k = 0; k < 200; k++) {
    const m = (lo + hi) / 2;
    if (2 * (sigmoid(m) - 1) + l2 * m < 0) lo = m; else hi = m;
  }
  assert.ok(Math.abs(fit.w[0]! - lo) < 1e-7, `w = ${fit.w[0]} vs ${lo}`);
  assert.ok(Math.abs(fit.b) < 1e-9, `b = ${fit.b}`);
});

test('logistic fit: larger λ shrinks the weights; ranking follows the planted direction; bad input is one error', () => {
  const { rows, y } = data(80, 20, 3, 1.5);
  const small = fitLogistic(rows, y, { l2: 0.1 });
  const big = fitLogistic(rows, y, { l2: 100 });
  const nrm = (w: Float64Array) => Math.sqrt(w.reduce((s, x) => s + x * x, 0));
  assert.ok(nrm(big.w) < nrm(small.w));
  // a fresh sample from the same two classes is ranked by the fitted logit
  const held = data(400, 20, 99, 1.5);
  const trained = fitLogistic(data(400, 20, 3, 1.5).rows, data(400, 20, 3, 1.5).y, { l2: 1 });
  const logits = held.rows.map((r) => r.reduce((s, x, j) => s + x * trained.w[j]!, trained.b));
  const dirRng = makeRng(7);
  const u = Array.from({ length: 20 }, () => dirRng.normal());
  const oracle = auroc(held.rows.map((r) => r.reduce((s, x, j) => s + x * u[j]!, 0)), held.y); // the Bayes direction
  assert.ok(auroc(logits, held.y) > oracle - 0.02, `held-out AUROC ${auroc(logits, held.y)} vs the true direction's ${oracle}`);
  assert.throws(() => fitLogistic(rows, y.map(() => 1)), SafekeepError);
  assert.throws(() => fitLogistic(rows, y, { l2: 0 }), SafekeepError);
  assert.throws(() => fitLogistic(rows, [...y.slice(0, -1), 2]), SafekeepError);
});

test('threshold: at most ⌊target·n⌋ benign scores above it, ties not flagged', () => {
  const benign = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
  const harmful = [0.95, 0.85, 0.55, 0.05];
  const scores = [...benign, ...harmful];
  const labels = [...benign.map(() => 0), ...harmful.map(() => 1)];
  const t10 = thresholdForBenignRate(scores, labels, 0.1);
  assert.equal(t10.threshold, 0.9); // only 1.0 above
  assert.equal(t10.benignFlagged, 0.1);
  assert.equal(t10.harmfulFlagged, 0.25); // 0.95
  const t5 = thresholdForBenignRate(scores, labels, 0.05);
  assert.equal(t5.threshold, 1.0);
  assert.equal(t5.benignFlagged, 0);
  const t30 = thresholdForBenignRate(scores, labels, 0.3);
  assert.equal(t30.threshold, 0.7);
  assert.equal(t30.harmfulFlagged, 0.5);
  // ties: three benign at the top value, target 1/5 → threshold = that value, nothing flagged
  const tie = thresholdForBenignRate([1, 1, 1, 0, 0, 2], [0, 0, 0, 0, 0, 1], 0.2);
  assert.equal(tie.threshold, 1);
  assert.equal(tie.benignFlagged, 0);
  assert.equal(tie.harmfulFlagged, 1);
  assert.throws(() => thresholdForBenignRate([1, 2], [0, 0], 0.05), SafekeepError);
  assert.throws(() => thresholdForBenignRate([1, 2], [0, 1], 1), SafekeepError);
});
