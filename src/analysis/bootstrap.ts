/**
 * Paired bootstrap of AUROC over pairs. A resample draws P pair ids with replacement from the sorted union of the
 * pair ids of all the sets; every set takes the rows of the drawn pairs. The draw depends only on (seed, pair-id
 * union), so the SAME resampled pairs are used for every configuration and every layer scored with the same seed:
 * differences between configurations are paired. 95 % percentile intervals; 1,000 reps by default.
 */
import { SafekeepError } from '../util/errors.ts';
import { auroc } from './auroc.ts';
import { makeRng } from './rng.ts';
import { percentileInterval } from './stats.ts';

export interface ScoredSet {
  /** [n] refusal scores */
  scores: ArrayLike<number>;
  /** [n] 1 = harmful, 0 = benign */
  labels: ArrayLike<number>;
  /** [n] pair id of each row (rows of one pair are resampled together) */
  pairIds: ArrayLike<string>;
}

export interface BootstrapOptions {
  /** resamples (default 1000) */
  reps?: number;
  /** RNG seed (default 0) */
  seed?: number;
  /** interval level (default 0.95) */
  level?: number;
  /** index of the set differences are taken against (default 0) */
  reference?: number;
}

export interface AurocEstimate {
  /** AUROC on the full (not resampled) set */
  auroc: number;
  lo: number;
  hi: number;
  /** rows */
  n: number;
}

export interface DifferenceEstimate {
  /** auroc(set) − auroc(reference) on the full sets */
  diff: number;
  lo: number;
  hi: number;
}

export interface BootstrapResult {
  estimates: AurocEstimate[];
  /** set i − reference, paired */
  differences: DifferenceEstimate[];
  reps: number;
  seed: number;
  level: number;
}

/** Sorted unique pair ids across the sets. */
export function pairUnion(sets: readonly ScoredSet[]): string[] {
  const s = new Set<string>();
  for (const set of sets) for (let i = 0; i < set.pairIds.length; i++) s.add(set.pairIds[i]!);
  return [...s].sort();
}

/** Rows of `set` grouped by index into `union`. */
function rowsByPair(set: ScoredSet, union: readonly string[]): number[][] {
  const index = new Map(union.map((p, i) => [p, i]));
  const out: number[][] = union.map(() => []);
  for (let r = 0; r < set.pairIds.length; r++) out[index.get(set.pairIds[r]!)!]!.push(r);
  return out;
}

function resampledAuroc(set: ScoredSet, groups: number[][], draw: Int32Array): number | null {
  const scores: number[] = [];
  const labels: number[] = [];
  let pos = 0;
  for (let k = 0; k < draw.length; k++) {
    for (const r of groups[draw[k]!]!) {
      scores.push(set.scores[r]!);
      const y = set.labels[r]!;
      labels.push(y);
      pos += y;
    }
  }
  if (pos === 0 || pos === labels.length) return null;
  return auroc(scores, labels);
}

/**
 * AUROC of every set with paired-bootstrap percentile intervals, and paired intervals of the difference to the
 * reference set. A resample in which some set has a single class is redrawn (rare: only with unpaired rows).
 */
export function bootstrapAuroc(sets: readonly ScoredSet[], opts: BootstrapOptions = {}): BootstrapResult {
  const reps = opts.reps ?? 1000;
  const seed = opts.seed ?? 0;
  const level = opts.level ?? 0.95;
  const ref = opts.reference ?? 0;
  if (sets.length === 0) throw new SafekeepError('bootstrapAuroc: no sets');
  for (const [i, s] of sets.entries()) {
    if (s.scores.length !== s.labels.length || s.labels.length !== s.pairIds.length) {
      throw new SafekeepError(`bootstrapAuroc: set ${i} has ${s.scores.length} scores, ${s.labels.length} labels, ${s.pairIds.length} pair ids`);
    }
  }
  const union = pairUnion(sets);
  const groups = sets.map((s) => rowsByPair(s, union));
  const full = sets.map((s) => auroc(s.scores, s.labels));
  const rng = makeRng(seed);
  const boot: Float64Array[] = sets.map(() => new Float64Array(reps));
  const draw = new Int32Array(union.length);
  let done = 0;
  let attempts = 0;
  while (done < reps) {
    if (++attempts > reps * 20) {
      throw new SafekeepError('bootstrapAuroc: resamples keep missing a class; are harmful and benign rows paired?');
    }
    for (let k = 0; k < draw.length; k++) draw[k] = rng.int(union.length);
    const vals: number[] = [];
    let ok = true;
    for (let i = 0; i < sets.length && ok; i++) {
      const a = resampledAuroc(sets[i]!, groups[i]!, draw);
      if (a === null) ok = false;
      else vals.push(a);
    }
    if (!ok) continue;
    for (let i = 0; i < sets.length; i++) boot[i]![done] = vals[i]!;
    done++;
  }
  const estimates = sets.map((s, i) => ({ auroc: full[i]!, ...percentileInterval(boot[i]!, level), n: s.scores.length }));
  const differences = sets.map((_, i) => {
    const d = new Float64Array(reps);
    for (let k = 0; k < reps; k++) d[k] = boot[i]![k]! - boot[ref]![k]!;
    return { diff: full[i]! - full[ref]!, ...percentileInterval(d, level) };
  });
  return { estimates, differences, reps, seed, level };
}
