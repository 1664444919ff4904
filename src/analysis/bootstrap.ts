/**
 * Paired bootstrap of AUROC over pairs (or groups of pairs: pass a group id as the `pairIds` of each row, and every
 * row of a group is resampled together — the analyses pass scenario / behavior-stem groups). A resample draws P pair ids with replacement from the sorted union of the
 * pair ids of all the sets; every set takes the rows of the drawn pairs. The draw depends only on (seed, pair-id
 * union), so the SAME resampled pairs are used for every configuration and every layer scored with the same seed:
 * differences between configurations are paired. 95 % percentile intervals; 1,000 reps by default.
 */
import { SafekeepError } from '../util/errors.ts';
import { auroc } from './auroc.ts';
import { makeRng } from '../util/rng.ts';
import { percentileInterval } from './stats.ts';

export interface ScoredSet {
  /** [n] refusal scores */
  scores: ArrayLike<number>;
  /** [n] 1 = harmful, 0 = benign */
  labels: ArrayLike<number>;
  /** [n] pair id of each row (rows of one pair are resampled together) */
  pairIds: ArrayLike<string>;
}

interface BootstrapOptions {
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

/**
 * A set prepared for fast resampled AUROCs: rows sorted by score and cut into tie groups once, so that each
 * resample is an O(n) weighted sweep instead of a sort. With row multiplicities c_i from the resample,
 *   AUROC = Σ_groups [pos_g · neg_below + ½ pos_g · neg_g] / (P · N),
 * which is Mann–Whitney with average ranks on the resample (duplicated rows tie with each other).
 */
interface Prepared {
  /** rows in score order */
  order: Int32Array;
  /** start offset in `order` of each tie group, plus a final n */
  groupStart: Int32Array;
  labels: Uint8Array;
}

function prepare(set: ScoredSet): Prepared {
  const n = set.scores.length;
  const order = Int32Array.from({ length: n }, (_, i) => i).sort((a, b) => set.scores[a]! - set.scores[b]!);
  const starts: number[] = [];
  for (let k = 0; k < n; k++) if (k === 0 || set.scores[order[k]!] !== set.scores[order[k - 1]!]) starts.push(k);
  starts.push(n);
  const labels = Uint8Array.from({ length: n }, (_, i) => set.labels[i]!);
  return { order, groupStart: Int32Array.from(starts), labels };
}

/** AUROC of the resample given row multiplicities; null when a class is missing. */
function weightedAuroc(p: Prepared, count: Int32Array): number | null {
  let num = 0;
  let negBelow = 0;
  let posTotal = 0;
  for (let g = 0; g + 1 < p.groupStart.length; g++) {
    let pos = 0;
    let neg = 0;
    for (let k = p.groupStart[g]!; k < p.groupStart[g + 1]!; k++) {
      const r = p.order[k]!;
      const c = count[r]!;
      if (p.labels[r] === 1) pos += c;
      else neg += c;
    }
    num += pos * negBelow + 0.5 * pos * neg;
    negBelow += neg;
    posTotal += pos;
  }
  if (posTotal === 0 || negBelow === 0) return null;
  return num / (posTotal * negBelow);
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
  const prepared = sets.map(prepare);
  const counts = sets.map((s) => new Int32Array(s.scores.length));
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
      const c = counts[i]!;
      c.fill(0);
      for (let k = 0; k < draw.length; k++) for (const r of groups[i]![draw[k]!]!) c[r]!++;
      const a = weightedAuroc(prepared[i]!, c);
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
