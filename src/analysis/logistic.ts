/**
 * L2-regularised logistic regression for activation probes, fit by Newton's method (IRLS) with ml-matrix solves.
 *
 * Features are standardised on the training rows (z = (x − μ)/σ; a feature with σ = 0 is left out), then
 *   J(w, b) = Σ_i [log(1 + e^{f_i}) − y_i f_i] + (λ/2)‖w‖²,   f_i = z_i·w + b,   λ = 1/C
 * (scikit-learn's `LogisticRegression(C)` on standardised inputs; the intercept is not penalised). Hidden states
 * have d ≫ n, so the Newton system is solved in its n-dimensional kernel form: w = Zᵀa, K = ZZᵀ, and each step solves
 *   [WK + λI   W1 ] [δa]     [(p − y) + λa]
 *   [1ᵀWK      1ᵀW1] [δb] = − [  1ᵀ(p − y)  ]
 * (the Newton equations with the common factor K divided out), W = diag(p(1 − p)). Steps are halved until J
 * decreases. The result is returned in raw units: score(x) = w_raw·x + b_raw = f.
 */
import { Matrix, solve } from 'ml-matrix';
import { SafekeepError } from '../util/errors.ts';

interface LogisticOptions {
  /** λ = 1/C on the summed log-loss over standardised features (default 1, scikit-learn's C = 1) */
  l2?: number;
  /** Newton iterations (default 50) */
  maxIter?: number;
  /** stop when the largest |∂J/∂w_j|, |∂J/∂b| is below tol·n (default 1e-8) */
  tol?: number;
}

interface LogisticFit {
  /** raw-unit weights: logit = w·x + b. [d] */
  w: Float64Array;
  b: number;
  l2: number;
  iterations: number;
  converged: boolean;
  /** J at the solution (standardised problem) */
  objective: number;
  /** largest |gradient| component at the solution (standardised problem) */
  gradMax: number;
}

const softplus = (f: number): number => (f > 0 ? f + Math.log1p(Math.exp(-f)) : Math.log1p(Math.exp(f)));
const sigmoid = (f: number): number => (f >= 0 ? 1 / (1 + Math.exp(-f)) : Math.exp(f) / (1 + Math.exp(f)));

/** Column means and standard deviations (population) of rows. [d], [d] */
function standardisation(rows: readonly ArrayLike<number>[], d: number): { mu: Float64Array; sigma: Float64Array } {
  const n = rows.length;
  const mu = new Float64Array(d);
  const sigma = new Float64Array(d);
  for (const x of rows) for (let j = 0; j < d; j++) mu[j]! += x[j]!;
  for (let j = 0; j < d; j++) mu[j]! /= n;
  for (const x of rows) for (let j = 0; j < d; j++) sigma[j]! += (x[j]! - mu[j]!) ** 2;
  for (let j = 0; j < d; j++) sigma[j] = Math.sqrt(sigma[j]! / n);
  return { mu, sigma };
}

/**
 * Fits the probe on `rows` ([n] vectors of length d) with labels y ∈ {0, 1} (1 = harmful).
 * Throws a SafekeepError when a class is missing or λ is not positive.
 */
export function fitLogistic(rows: readonly ArrayLike<number>[], y: ArrayLike<number>, opts: LogisticOptions = {}): LogisticFit {
  const n = rows.length;
  const l2 = opts.l2 ?? 1;
  const maxIter = opts.maxIter ?? 50;
  const tol = opts.tol ?? 1e-8;
  if (n === 0 || y.length !== n) throw new SafekeepError(`fitLogistic: ${n} rows for ${y.length} labels`);
  if (!(l2 > 0)) throw new SafekeepError(`fitLogistic: l2 must be > 0, got ${l2}`);
  const pos = positives(y, n);
  const d = rows[0]!.length;
  const { mu, sigma } = standardisation(rows, d);
  const scale = Float64Array.from(sigma, (s) => (s > 0 ? 1 / s : 0));
  const problem = kernelProblem(standardised(rows, d, mu, scale), y, l2);

  // start at w = 0 with the intercept at the log-odds of the base rate
  let a: Float64Array = new Float64Array(n);
  let b = Math.log(pos / (n - pos));
  let f = problem.logits(a, b);
  let J = problem.objective(a, b, f);
  let iterations = 0;
  let converged = false;
  let gm = problem.gradMax(a, f);
  while (iterations < maxIter) {
    if (gm < tol * n) { converged = true; break; }
    iterations++;
    const next = halvedStep(problem, a, b, f, J, newtonStep(problem, a, f));
    if (next) ({ a, b, f, J } = next);
    gm = problem.gradMax(a, f);
    if (!next) { converged = gm < tol * n * 1e3; break; }
  }
  if (!converged && gm < tol * n) converged = true;
  const { w, b: bRaw } = rawUnits(problem.Z, a, b, mu, scale, d);
  return { w, b: bRaw, l2, iterations, converged, objective: J, gradMax: gm };
}

/** The number of harmful rows; every label must be 0 or 1 and both classes present. */
function positives(y: ArrayLike<number>, n: number): number {
  let pos = 0;
  for (let i = 0; i < n; i++) {
    if (y[i] !== 0 && y[i] !== 1) throw new SafekeepError(`fitLogistic: label ${i} is ${y[i]}, expected 0 or 1`);
    pos += y[i]!;
  }
  if (pos === 0 || pos === n) throw new SafekeepError(`fitLogistic: needs both classes, got ${pos} harmful and ${n - pos} benign rows`);
  return pos;
}

/** Z = (x − μ)·(1/σ), σ = 0 features zeroed. [n, d] */
function standardised(rows: readonly ArrayLike<number>[], d: number, mu: Float64Array, scale: Float64Array): Matrix {
  const Z = new Matrix(rows.length, d);
  rows.forEach((x, i) => {
    if (x.length !== d) throw new SafekeepError(`fitLogistic: row ${i} has ${x.length} values, expected ${d}`);
    const row = new Float64Array(d);
    for (let j = 0; j < d; j++) row[j] = (x[j]! - mu[j]!) * scale[j]!;
    Z.setRow(i, row);
  });
  return Z;
}

/** The standardised problem in kernel form (w = Zᵀa), with f, J and the gradient's size as functions of (a, b). */
interface KernelProblem {
  n: number;
  /** [n, d] */
  Z: Matrix;
  /** K = ZZᵀ by rows. [n][n] */
  Kd: number[][];
  y: ArrayLike<number>;
  l2: number;
  /** f = Ka + b. [n] */
  logits(a: Float64Array, b: number): Float64Array;
  /** J(a, b) given f = Ka + b */
  objective(a: Float64Array, b: number, f: Float64Array): number;
  /** ∂J/∂w = Zᵀ(p − y) + λw, ∂J/∂b = Σ(p − y); the largest |component| */
  gradMax(a: Float64Array, f: Float64Array): number;
}

function kernelProblem(Z: Matrix, y: ArrayLike<number>, l2: number): KernelProblem {
  const n = Z.rows;
  const K = Z.mmulByTranspose(); // [n, n]
  const Kd = Array.from({ length: n }, (_, i) => K.getRow(i));
  return {
    n, Z, Kd, y, l2,
    logits: (a, b) => {
      const f = new Float64Array(n);
      for (let i = 0; i < n; i++) {
        const Ki = Kd[i]!;
        let s = b;
        for (let k = 0; k < n; k++) s += Ki[k]! * a[k]!;
        f[i] = s;
      }
      return f;
    },
    objective: (a, b, f) => {
      let J = 0;
      for (let i = 0; i < n; i++) J += softplus(f[i]!) - y[i]! * f[i]!;
      // ‖w‖² = aᵀKa = Σ a_i (f_i − b)
      let wn = 0;
      for (let i = 0; i < n; i++) wn += a[i]! * (f[i]! - b);
      return J + (l2 / 2) * wn;
    },
    gradMax: (a, f) => {
      const r = new Float64Array(n);
      let gb = 0;
      for (let i = 0; i < n; i++) {
        r[i] = sigmoid(f[i]!) - y[i]! + l2 * a[i]!;
        gb += sigmoid(f[i]!) - y[i]!;
      }
      // Zᵀ(p − y) + λZᵀa = Zᵀ r
      const g = Z.transposeMultiply(Matrix.columnVector(r)).to1DArray();
      return Math.max(Math.abs(gb), ...g.map(Math.abs));
    },
  };
}

/** The Newton step [δa; δb] from the (n+1)-dimensional kernel system in the header (W floored at 1e-12). */
function newtonStep(pr: KernelProblem, a: Float64Array, f: Float64Array): number[] {
  const { n, Kd, y, l2 } = pr;
  const p = Float64Array.from(f, sigmoid);
  const W = Float64Array.from(p, (q) => Math.max(q * (1 - q), 1e-12));
  const A = new Matrix(n + 1, n + 1);
  const rhs = new Matrix(n + 1, 1);
  let sw = 0;
  for (let i = 0; i < n; i++) {
    const Ki = Kd[i]!;
    for (let k = 0; k < n; k++) A.set(i, k, W[i]! * Ki[k]! + (i === k ? l2 : 0));
    A.set(i, n, W[i]!);
    rhs.set(i, 0, -(p[i]! - y[i]! + l2 * a[i]!));
    sw += W[i]!;
  }
  let sb = 0;
  for (let k = 0; k < n; k++) {
    let s = 0;
    for (let i = 0; i < n; i++) s += W[i]! * Kd[i]![k]!;
    A.set(n, k, s);
  }
  A.set(n, n, sw);
  for (let i = 0; i < n; i++) sb += p[i]! - y[i]!;
  rhs.set(n, 0, -sb);
  const step = solve(A, rhs).to1DArray();
  // a (near-)singular system gives non-finite values from the LU solve; solve it by SVD (least squares) instead
  return step.some((v) => !Number.isFinite(v)) ? solve(A, rhs, true).to1DArray() : step;
}

/** The step, halved (at most 30 times) until J does not increase; null when no length is accepted. */
function halvedStep(
  pr: KernelProblem, a: Float64Array, b: number, f: Float64Array, J: number, step: number[],
): { a: Float64Array; b: number; f: Float64Array; J: number } | null {
  let t = 1;
  for (let h = 0; h < 30; h++) {
    const a2 = Float64Array.from(a, (v, i) => v + t * step[i]!);
    const b2 = b + t * step[pr.n]!;
    const f2 = pr.logits(a2, b2);
    const J2 = pr.objective(a2, b2, f2);
    if (J2 <= J + 1e-12 * Math.abs(J)) return { a: a2, b: b2, f: f2, J: J2 };
    t /= 2;
  }
  return null;
}

/** w = Zᵀa in standardised units → raw units: w_raw = w/σ, b_raw = b − w_raw·μ. */
function rawUnits(Z: Matrix, a: Float64Array, b: number, mu: Float64Array, scale: Float64Array, d: number): { w: Float64Array; b: number } {
  const wz = Z.transposeMultiply(Matrix.columnVector(a)).to1DArray();
  const w = new Float64Array(d);
  let bRaw = b;
  for (let j = 0; j < d; j++) {
    w[j] = wz[j]! * scale[j]!;
    bRaw -= w[j]! * mu[j]!;
  }
  return { w, b: bRaw };
}
