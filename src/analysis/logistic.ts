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
  let pos = 0;
  for (let i = 0; i < n; i++) {
    if (y[i] !== 0 && y[i] !== 1) throw new SafekeepError(`fitLogistic: label ${i} is ${y[i]}, expected 0 or 1`);
    pos += y[i]!;
  }
  if (pos === 0 || pos === n) throw new SafekeepError(`fitLogistic: needs both classes, got ${pos} harmful and ${n - pos} benign rows`);
  const d = rows[0]!.length;
  const { mu, sigma } = standardisation(rows, d);
  const scale = Float64Array.from(sigma, (s) => (s > 0 ? 1 / s : 0));
  const Z = new Matrix(n, d);
  rows.forEach((x, i) => {
    if (x.length !== d) throw new SafekeepError(`fitLogistic: row ${i} has ${x.length} values, expected ${d}`);
    const row = new Float64Array(d);
    for (let j = 0; j < d; j++) row[j] = (x[j]! - mu[j]!) * scale[j]!;
    Z.setRow(i, row);
  });
  const K = Z.mmulByTranspose(); // [n, n]
  const Kd = Array.from({ length: n }, (_, i) => K.getRow(i));

  let a = new Float64Array(n);
  let b = Math.log(pos / (n - pos));
  const fOf = (av: Float64Array, bv: number): Float64Array => {
    const f = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const Ki = Kd[i]!;
      let s = bv;
      for (let k = 0; k < n; k++) s += Ki[k]! * av[k]!;
      f[i] = s;
    }
    return f;
  };
  const objective = (av: Float64Array, f: Float64Array): number => {
    let J = 0;
    for (let i = 0; i < n; i++) J += softplus(f[i]!) - y[i]! * f[i]!;
    // ‖w‖² = aᵀKa = Σ a_i (f_i − b)
    let wn = 0;
    for (let i = 0; i < n; i++) wn += av[i]! * (f[i]! - b);
    return J + (l2 / 2) * wn;
  };
  /** ∂J/∂w = Zᵀ(p − y) + λw, ∂J/∂b = Σ(p − y); returns the largest |component| */
  const gradMax = (av: Float64Array, f: Float64Array): number => {
    const r = new Float64Array(n);
    let gb = 0;
    for (let i = 0; i < n; i++) {
      r[i] = sigmoid(f[i]!) - y[i]! + l2 * av[i]!;
      gb += sigmoid(f[i]!) - y[i]!;
    }
    // Zᵀ(p − y) + λZᵀa = Zᵀ r
    const g = Z.transposeMultiply(Matrix.columnVector(r)).to1DArray();
    return Math.max(Math.abs(gb), ...g.map(Math.abs));
  };

  let f = fOf(a, b);
  let J = objective(a, f);
  let iterations = 0;
  let converged = false;
  let gm = gradMax(a, f);
  while (iterations < maxIter) {
    if (gm < tol * n) { converged = true; break; }
    iterations++;
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
    let step = solve(A, rhs).to1DArray();
    if (step.some((v) => !Number.isFinite(v))) step = solve(A, rhs, true).to1DArray();
    let t = 1;
    let accepted = false;
    for (let h = 0; h < 30; h++) {
      const a2 = Float64Array.from(a, (v, i) => v + t * step[i]!);
      const b2 = b + t * step[n]!;
      const f2 = fOf(a2, b2);
      const bOld = b;
      b = b2;
      const J2 = objective(a2, f2);
      b = bOld;
      if (J2 <= J + 1e-12 * Math.abs(J)) {
        a = a2;
        b = b2;
        f = f2;
        J = J2;
        accepted = true;
        break;
      }
      t /= 2;
    }
    gm = gradMax(a, f);
    if (!accepted) { converged = gm < tol * n * 1e3; break; }
  }
  if (!converged && gm < tol * n) converged = true;

  // w = Zᵀa in standardised units → raw units
  const wz = Z.transposeMultiply(Matrix.columnVector(a)).to1DArray();
  const w = new Float64Array(d);
  let bRaw = b;
  for (let j = 0; j < d; j++) {
    w[j] = wz[j]! * scale[j]!;
    bRaw -= w[j]! * mu[j]!;
  }
  return { w, b: bRaw, l2, iterations, converged, objective: J, gradMax: gm };
}
