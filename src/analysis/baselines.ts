/**
 * Null bands for a layer-wise cosine with a reference direction (Figure 3):
 * - random directions: cosines of ≥ 1,000 Gaussian unit vectors with the reference; for a d-dimensional
 *   isotropic vector cos ≈ N(0, 1/d), so the 95 % band is ≈ ±1.96/√d;
 * - label permutation: shuffle harmful/benign labels over the rows (class sizes kept), recompute the
 *   mean-difference direction, cosine with the target.
 * Bands are central percentile intervals (2.5 %, 97.5 % at level 0.95).
 */
import { SafekeepError } from '../util/errors.ts';
import { type Activations, type Labels, allRows, checkRowsAndLabels } from './activations.ts';
import { type Directions, directionAt, meanDifference } from './direction.ts';
import { makeRng, shuffleInPlace } from '../util/rng.ts';
import { percentileInterval } from './stats.ts';
import { cosine, dot } from './vector.ts';

export interface Band {
  /** [layers] */
  lo: number[];
  /** [layers] */
  hi: number[];
  reps: number;
  level: number;
}

interface BandOptions {
  reps?: number;
  seed?: number;
  level?: number;
}

/**
 * Per layer band of cos(g, ref(ℓ)) for `reps` Gaussian vectors g ∈ R^d (the same draws for every layer; the
 * cosine distribution does not depend on the reference, only the draws' alignment with it does).
 */
export function randomCosineBand(ref: Directions, opts: BandOptions = {}): Band {
  const reps = opts.reps ?? 1000;
  const level = opts.level ?? 0.95;
  const rng = makeRng(opts.seed ?? 0);
  const { layers, d } = ref;
  const g = new Float64Array(reps * d);
  for (let j = 0; j < g.length; j++) g[j] = rng.normal();
  const gNorm = new Float64Array(reps);
  for (let k = 0; k < reps; k++) gNorm[k] = Math.sqrt(dot(g.subarray(k * d, (k + 1) * d), g.subarray(k * d, (k + 1) * d)));
  const lo: number[] = [];
  const hi: number[] = [];
  const cos = new Float64Array(reps);
  for (let l = 0; l < layers; l++) {
    const r = directionAt(ref, l);
    const rn = Math.sqrt(dot(r, r));
    for (let k = 0; k < reps; k++) {
      cos[k] = rn === 0 ? 0 : dot(g.subarray(k * d, (k + 1) * d), r) / (gNorm[k]! * rn);
    }
    const iv = percentileInterval(cos, level);
    lo.push(iv.lo);
    hi.push(iv.hi);
  }
  return { lo, hi, reps, level };
}

/**
 * Per layer band of cos(meanDifference under permuted labels, target(ℓ)).
 * Uses the Gram matrix of the centred rows when that is cheaper than recomputing the means (n < d): the
 * permuted direction is Σ_i w_i h_i with w_i = 1/n₁ (harmful) or −1/n₀ (benign), so
 * its dot with the target is Σ w_i (h_i·t) and its squared norm is wᵀGw.
 */
export function permutationCosineBand(
  acts: Activations,
  labels: Labels,
  target: Directions,
  rows: readonly number[] = allRows(acts.n),
  opts: BandOptions & { method?: 'auto' | 'gram' | 'direct' } = {},
): Band {
  const reps = opts.reps ?? 1000;
  const level = opts.level ?? 0.95;
  checkRowsAndLabels('permutationCosineBand', acts, labels, rows);
  if (target.layers !== acts.layers || target.d !== acts.d) {
    throw new SafekeepError(`permutationCosineBand: target [${target.layers}, ${target.d}] vs activations [${acts.layers}, ${acts.d}]`);
  }
  const n = rows.length;
  const perm = Int32Array.from(rows.map((r) => labels[r]!));
  const nPos = perm.reduce((a, b) => a + b, 0);
  if (nPos === 0 || nPos === n) throw new SafekeepError('permutationCosineBand: needs both classes');
  const rng = makeRng(opts.seed ?? 0);
  const draws: Int32Array[] = [];
  for (let k = 0; k < reps; k++) {
    shuffleInPlace(perm, rng);
    draws.push(Int32Array.from(perm));
  }
  const method = opts.method ?? 'auto';
  const useGram = method === 'gram' || (method === 'auto' && n < acts.d);
  const cos: Float64Array[] = Array.from({ length: acts.layers }, () => new Float64Array(reps));
  if (!useGram) {
    for (let k = 0; k < reps; k++) {
      const lab = new Int32Array(acts.n);
      rows.forEach((r, i) => (lab[r] = draws[k]![i]!));
      const dir = meanDifference(acts, lab, rows);
      for (let l = 0; l < acts.layers; l++) cos[l]![k] = cosine(directionAt(dir, l), directionAt(target, l));
    }
  } else {
    const { d } = acts;
    const w = new Float64Array(n);
    for (let l = 0; l < acts.layers; l++) {
      const t = directionAt(target, l);
      const tn = Math.sqrt(dot(t, t));
      // centre the rows (Σ w_i = 0, so this changes nothing but the cancellation error of wᵀGw)
      const h = rows.map((r) => Float64Array.from(acts.data.subarray((r * acts.layers + l) * d, (r * acts.layers + l + 1) * d)));
      const mu = new Float64Array(d);
      for (const v of h) for (let j = 0; j < d; j++) mu[j]! += v[j]! / n;
      for (const v of h) for (let j = 0; j < d; j++) v[j]! -= mu[j]!;
      const proj = h.map((v) => dot(v, t));
      const gram = new Float64Array(n * n);
      for (let i = 0; i < n; i++) {
        for (let j = i; j < n; j++) {
          const v = dot(h[i]!, h[j]!);
          gram[i * n + j] = v;
          gram[j * n + i] = v;
        }
      }
      for (let k = 0; k < reps; k++) {
        const lab = draws[k]!;
        for (let i = 0; i < n; i++) w[i] = lab[i] === 1 ? 1 / nPos : -1 / (n - nPos);
        let num = 0;
        let sq = 0;
        for (let i = 0; i < n; i++) {
          num += w[i]! * proj[i]!;
          let gi = 0;
          for (let j = 0; j < n; j++) gi += gram[i * n + j]! * w[j]!;
          sq += w[i]! * gi;
        }
        const den = Math.sqrt(Math.max(sq, 0)) * tn;
        cos[l]![k] = den === 0 ? 0 : num / den;
      }
    }
  }
  const lo: number[] = [];
  const hi: number[] = [];
  for (let l = 0; l < acts.layers; l++) {
    const iv = percentileInterval(cos[l]!, level);
    lo.push(iv.lo);
    hi.push(iv.hi);
  }
  return { lo, hi, reps, level };
}
