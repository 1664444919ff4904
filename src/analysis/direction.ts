/**
 * Per-layer directions: difference of class means (harmful − benign), the refusal direction of Arditi et al. as
 * used by Pan et al. 2026. All sums in Float64.
 */
import { SafekeepError } from '../util/errors.ts';
import { type Activations, type Labels, allRows, checkRowsAndLabels } from './activations.ts';
import { cosine, norm } from './vector.ts';

/** One vector per layer. data: [layers, d] */
export interface Directions {
  layers: number;
  d: number;
  data: Float64Array;
}

/** Row `layer` of a direction set (a view). [d] */
export function directionAt(dir: Directions, layer: number): Float64Array {
  return dir.data.subarray(layer * dir.d, (layer + 1) * dir.d);
}

/** Per layer mean of hidden[layer] over `rows`. [layers, d] */
export function meanActivation(acts: Activations, rows: readonly number[]): Directions {
  if (rows.length === 0) throw new SafekeepError('meanActivation: no rows');
  const { layers, d } = acts;
  const out = new Float64Array(layers * d);
  const stride = layers * d;
  for (const r of rows) {
    const base = r * stride;
    for (let j = 0; j < stride; j++) out[j]! += acts.data[base + j]!;
  }
  for (let j = 0; j < out.length; j++) out[j]! /= rows.length;
  return { layers, d, data: out };
}

/** a − b, layer by layer. [layers, d] */
export function subtractDirections(a: Directions, b: Directions): Directions {
  if (a.layers !== b.layers || a.d !== b.d) {
    throw new SafekeepError(`direction shapes differ: [${a.layers}, ${a.d}] vs [${b.layers}, ${b.d}]`);
  }
  const out = new Float64Array(a.data.length);
  for (let j = 0; j < out.length; j++) out[j] = a.data[j]! - b.data[j]!;
  return { layers: a.layers, d: a.d, data: out };
}

/**
 * mean(h | harmful) − mean(h | benign) over `rows` (default: all rows), per layer. [layers, d]
 * Throws when either class is empty.
 */
export function meanDifference(acts: Activations, labels: Labels, rows: readonly number[] = allRows(acts.n)): Directions {
  checkRowsAndLabels('meanDifference', acts, labels, rows);
  const harmful = rows.filter((r) => labels[r] === 1);
  const benign = rows.filter((r) => labels[r] === 0);
  if (harmful.length === 0 || benign.length === 0) {
    throw new SafekeepError(`meanDifference: needs both classes, got ${harmful.length} harmful and ${benign.length} benign rows`);
  }
  return subtractDirections(meanActivation(acts, harmful), meanActivation(acts, benign));
}

/** The refusal direction r(ℓ) = mean(harmful) − mean(benign) on the extraction rows. [layers, d] */
export const refusalDirection = meanDifference;

/** ‖v(ℓ)‖ per layer. [layers] */
export function directionNorms(dir: Directions): Float64Array {
  const out = new Float64Array(dir.layers);
  for (let l = 0; l < dir.layers; l++) out[l] = norm(directionAt(dir, l));
  return out;
}

/** cos(a(ℓ), b(ℓ)) per layer. [layers] */
export function layerCosines(a: Directions, b: Directions): Float64Array {
  if (a.layers !== b.layers || a.d !== b.d) {
    throw new SafekeepError(`direction shapes differ: [${a.layers}, ${a.d}] vs [${b.layers}, ${b.d}]`);
  }
  const out = new Float64Array(a.layers);
  for (let l = 0; l < a.layers; l++) out[l] = cosine(directionAt(a, l), directionAt(b, l));
  return out;
}

/** Mean ‖hidden[ℓ]‖ over `rows`, per layer: the residual scale against which steering strengths are read. [layers] */
export function meanHiddenNorm(acts: Activations, rows: readonly number[] = allRows(acts.n)): Float64Array {
  const out = new Float64Array(acts.layers);
  for (const r of rows) {
    for (let l = 0; l < acts.layers; l++) {
      const off = (r * acts.layers + l) * acts.d;
      let s = 0;
      for (let j = 0; j < acts.d; j++) s += acts.data[off + j]! ** 2;
      out[l]! += Math.sqrt(s);
    }
  }
  for (let l = 0; l < acts.layers; l++) out[l]! /= rows.length;
  return out;
}
