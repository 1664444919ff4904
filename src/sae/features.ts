/**
 * Which features of a dictionary make up a direction r (the refusal direction, a Schema Direction) at the SAE's hook:
 * - by geometry: the cosine of each decoder row W_dec[j] with r, best first;
 * - by attribution over labelled activations: (mean activation on harmful rows − on benign rows) × W_dec[j]·r̂, so
 *   the attributions of all features sum to the mean difference of the two classes' reconstructions projected on r̂
 *   (b_dec cancels in the difference).
 */
import { SafekeepError } from '../util/errors.ts';
import { rowInto } from './matrix.ts';
import { encode } from './math.ts';
import type { Sae } from './types.ts';

export interface FeatureCosine {
  index: number;
  cosine: number;
}

/** Every feature's decoder-row cosine with `r`, sorted best first (largest cosine; ties by index). [d_sae] */
export function decoderCosines(sae: Sae, r: ArrayLike<number>): FeatureCosine[] {
  const { dIn, dSae } = sae.config;
  if (r.length !== dIn) throw new SafekeepError(`direction has ${r.length} values, the SAE's d_in is ${dIn}`);
  let rn = 0;
  for (let i = 0; i < dIn; i++) rn += Number(r[i]) ** 2;
  if (!(rn > 0)) throw new SafekeepError('direction is all zeros');
  rn = Math.sqrt(rn);
  const row = new Float32Array(dIn);
  const out: FeatureCosine[] = [];
  for (let j = 0; j < dSae; j++) {
    rowInto(sae.W_dec, j, row);
    let dot = 0;
    let n = 0;
    for (let i = 0; i < dIn; i++) { dot += row[i]! * Number(r[i]); n += row[i]! * row[i]!; }
    out.push({ index: j, cosine: n > 0 ? dot / (Math.sqrt(n) * rn) : 0 });
  }
  return out.sort((a, b) => b.cosine - a.cosine || a.index - b.index);
}

export interface FeatureAttribution {
  index: number;
  /** mean activation on harmful rows − on benign rows */
  meanDiff: number;
  /** W_dec[j]·r̂ */
  projection: number;
  attribution: number;
}

/** Encodes m rows [m, d_in] → [m, d_sae] (default: `encode` of math.ts; the CLI passes onnxruntime's SaeEncoder). */
export type EncodeRows = (x: Float32Array, m: number) => Float32Array | Promise<Float32Array>;

/** Mean activation of every feature on harmful (label 1) and on benign (label 0) rows. */
export interface ClassMeans {
  /** [d_sae] */
  harmful: Float64Array;
  /** [d_sae] */
  benign: Float64Array;
}

/**
 * Per-class mean activations over rows x [n, d_in] labelled 1 (harmful) / 0 (benign); other labels are skipped. Rows
 * are encoded in blocks (no [n, d_sae] matrix is held).
 */
export async function classMeanActivations(sae: Sae, x: Float32Array, labels: ArrayLike<number>, encodeRows?: EncodeRows): Promise<ClassMeans> {
  const { dIn, dSae } = sae.config;
  const n = labels.length;
  if (x.length !== n * dIn) throw new SafekeepError(`attribution: ${x.length} values for ${n} rows of d_in ${dIn}`);
  const count = [0, 0];
  const sums = [new Float64Array(dSae), new Float64Array(dSae)];
  const B = 64;
  for (let s = 0; s < n; s += B) {
    const m = Math.min(B, n - s);
    const block = x.subarray(s * dIn, (s + m) * dIn);
    const acts = encodeRows ? await encodeRows(block, m) : encode(sae, block, m).acts;
    for (let t = 0; t < m; t++) {
      const y = labels[s + t];
      if (y !== 0 && y !== 1) continue;
      count[y]!++;
      const sum = sums[y]!;
      for (let j = 0; j < dSae; j++) sum[j] = sum[j]! + acts[t * dSae + j]!;
    }
  }
  if (count[0] === 0 || count[1] === 0) throw new SafekeepError(`attribution needs harmful and benign rows (${count[1]} harmful, ${count[0]} benign)`);
  return { harmful: sums[1]!.map((v) => v / count[1]!), benign: sums[0]!.map((v) => v / count[0]!) };
}

/** Every decoder row's projection on the unit direction, W_dec[j]·r̂. [d_sae] */
export function decoderProjections(sae: Sae, r: ArrayLike<number>): Float64Array {
  const { dIn, dSae } = sae.config;
  if (r.length !== dIn) throw new SafekeepError(`direction has ${r.length} values, the SAE's d_in is ${dIn}`);
  let rn = 0;
  for (let i = 0; i < dIn; i++) rn += Number(r[i]) ** 2;
  if (!(rn > 0)) throw new SafekeepError('direction is all zeros');
  rn = Math.sqrt(rn);
  const row = new Float32Array(dIn);
  const out = new Float64Array(dSae);
  for (let j = 0; j < dSae; j++) {
    rowInto(sae.W_dec, j, row);
    let dot = 0;
    for (let i = 0; i < dIn; i++) dot += row[i]! * Number(r[i]);
    out[j] = dot / rn;
  }
  return out;
}

/**
 * Attribution of every feature to r̂ from its class means and decoder projections ([d_sae] each, `decoderProjections`):
 * (harmful − benign mean) × W_dec[j]·r̂, sorted by |attribution| (largest first; ties by index).
 */
export function attributionFromMeans(projections: Float64Array, means: ClassMeans): FeatureAttribution[] {
  const out: FeatureAttribution[] = [];
  for (let j = 0; j < projections.length; j++) {
    const meanDiff = means.harmful[j]! - means.benign[j]!;
    out.push({ index: j, meanDiff, projection: projections[j]!, attribution: meanDiff * projections[j]! });
  }
  return out.sort((a, b) => Math.abs(b.attribution) - Math.abs(a.attribution) || a.index - b.index);
}

/**
 * Attribution of every feature to r over rows x [n, d_in] labelled 1 (harmful) / 0 (benign), sorted by |attribution|
 * (largest first).
 */
export async function featureAttribution(sae: Sae, r: ArrayLike<number>, x: Float32Array, labels: ArrayLike<number>, encodeRows?: EncodeRows): Promise<FeatureAttribution[]> {
  return attributionFromMeans(decoderProjections(sae, r), await classMeanActivations(sae, x, labels, encodeRows));
}

export interface TopActivation {
  row: number;
  activation: number;
}

/** The k rows (of x [n, d_in]) on which each of `features` is most active (activation > 0 only), most active first. */
export async function topActivatingRows(sae: Sae, x: Float32Array, n: number, features: readonly number[], k: number, encodeRows?: EncodeRows): Promise<Map<number, TopActivation[]>> {
  const { dIn, dSae } = sae.config;
  const best = new Map(features.map((f) => [f, [] as TopActivation[]]));
  const B = 64;
  for (let s = 0; s < n; s += B) {
    const m = Math.min(B, n - s);
    const block = x.subarray(s * dIn, (s + m) * dIn);
    const acts = encodeRows ? await encodeRows(block, m) : encode(sae, block, m).acts;
    for (const [f, list] of best) {
      for (let t = 0; t < m; t++) {
        const a = acts[t * dSae + f]!;
        if (!(a > 0) || (list.length === k && a <= list[k - 1]!.activation)) continue;
        list.push({ row: s + t, activation: a });
        list.sort((p, q) => q.activation - p.activation || p.row - q.row);
        if (list.length > k) list.pop();
      }
    }
  }
  return best;
}
