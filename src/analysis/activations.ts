/**
 * Cached residual streams of one (model, configuration, representation): the final-prefill-token (or first
 * generated token) hidden state of every request at every layer, hidden[0] = embedding output, hidden[l] = after
 * decoder block l-1 (before the final norm).
 */
import { SafekeepError } from '../util/errors.ts';

export interface Activations {
  /** number of requests (rows) */
  n: number;
  /** L + 1 (embedding output + one per decoder block) */
  layers: number;
  /** d_model */
  d: number;
  /** [n, layers, d] row-major */
  data: Float32Array;
}

/** Positive class = harmful (1), benign = 0. One entry per row. */
export type Labels = ArrayLike<number>;

export function makeActivations(n: number, layers: number, d: number, data?: Float32Array): Activations {
  const size = n * layers * d;
  if (data && data.length !== size) {
    throw new SafekeepError(`activations: expected ${n}×${layers}×${d} = ${size} floats, got ${data.length}`);
  }
  return { n, layers, d, data: data ?? new Float32Array(size) };
}

/** hidden[layer] of `row`, a view (no copy). [d] */
export function hiddenAt(acts: Activations, row: number, layer: number): Float32Array {
  const off = (row * acts.layers + layer) * acts.d;
  return acts.data.subarray(off, off + acts.d);
}

/** 0..n-1 */
export function allRows(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

/** Checks labels are 0/1, one per row, and every row index is in range. */
export function checkRowsAndLabels(what: string, acts: Activations, labels: Labels, rows: readonly number[]): void {
  if (labels.length !== acts.n) {
    throw new SafekeepError(`${what}: ${labels.length} labels for ${acts.n} activation rows`);
  }
  for (const r of rows) {
    if (!Number.isInteger(r) || r < 0 || r >= acts.n) {
      throw new SafekeepError(`${what}: row index ${r} out of range [0, ${acts.n})`);
    }
    const y = labels[r];
    if (y !== 0 && y !== 1) throw new SafekeepError(`${what}: label of row ${r} is ${y}, expected 0 (benign) or 1 (harmful)`);
  }
}

/**
 * Row indices whose pair id is in `pairs` (e.g. a Split's extraction or evaluation ids), in row order.
 * Throws when a wanted pair has no row (a cache that does not match the split).
 */
export function rowsOfPairs(pairIds: readonly string[], pairs: readonly string[], what = 'split'): number[] {
  const wanted = new Set(pairs);
  const rows: number[] = [];
  const seen = new Set<string>();
  pairIds.forEach((p, i) => {
    if (wanted.has(p)) {
      rows.push(i);
      seen.add(p);
    }
  });
  const missing = pairs.filter((p) => !seen.has(p));
  if (missing.length) {
    throw new SafekeepError(`${what}: ${missing.length} pair id(s) have no activation row, e.g. '${missing[0]}'`);
  }
  return rows;
}
