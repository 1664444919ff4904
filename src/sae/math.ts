/**
 * Encode, decode and the spliced reconstruction, as SAELens computes them (jbloomAus/SAELens @
 * 91ca16ccd0684e4dd6323cd4f23ded734339ec54), in f32:
 * - `process_sae_in` (sae_lens/saes/sae.py): x → norm_in(x) − b_dec·apply_b_dec_to_input, where norm_in is
 *   constant_norm_rescale x·√d_in/|x| or layer_norm (x − μ)/(σ + 1e−5) with σ torch's unbiased std;
 * - pre = sae_in @ W_enc + b_enc, then standard: relu(pre) (standard_sae.py); jumprelu: relu(pre)·(pre > threshold),
 *   a STRICT inequality, so a pre-activation equal to its threshold is 0 (jumprelu_sae.py); topk: pre·|W_dec_j| if
 *   rescale_acts_by_decoder_norm, then the k largest kept and relu'd, the rest 0 (topk_sae.py `TopK`; equal values:
 *   the lower index wins here, torch.topk leaves the order of ties unspecified);
 * - decode: acts (/|W_dec_j| for rescaled topk) @ W_dec + b_dec, then norm_out (×|x|/√d_in, or ×σ + μ);
 * - the splice with the error term (sae.py `forward` with use_error_term): decode(edited acts) + (x − decode(acts)).
 */
import { SafekeepError } from '../util/errors.ts';
import { rowInto } from './matrix.ts';
import type { Sae } from './types.ts';

/** Per-token state of the input normalization, which decode needs to undo it. */
export interface NormState {
  /** constant_norm_rescale: the coefficient √d_in/|x|; layer_norm: σ (unbiased std) [N] */
  scale: Float32Array;
  /** layer_norm: μ [N] */
  shift: Float32Array;
}

export interface Encoded {
  /** [N, d_sae] */
  acts: Float32Array;
  /** null when normalize_activations is none */
  norm: NormState | null;
}

/** Columns of W_enc converted per block (bounded scratch: d_in · COL_BLOCK floats). */
const COL_BLOCK = 1024;

/** sae_in = norm_in(x) − b_dec·apply_b_dec_to_input, and the norm state. [N, d_in] */
export function saeInput(sae: Sae, x: Float32Array, n: number): { sae_in: Float32Array; norm: NormState | null } {
  const { dIn, normalizeActivations, applyBDecToInput } = sae.config;
  if (x.length !== n * dIn) throw new SafekeepError(`SAE input has ${x.length} values, not ${n} × d_in ${dIn}`);
  const out = new Float32Array(x);
  let norm: NormState | null = null;
  if (normalizeActivations !== 'none') {
    norm = { scale: new Float32Array(n), shift: new Float32Array(n) };
    for (let t = 0; t < n; t++) {
      const row = out.subarray(t * dIn, (t + 1) * dIn);
      if (normalizeActivations === 'constant_norm_rescale') {
        let ss = 0;
        for (let i = 0; i < dIn; i++) ss += row[i]! * row[i]!;
        const c = Math.fround(Math.sqrt(dIn) / Math.fround(Math.sqrt(ss)));
        norm.scale[t] = c;
        for (let i = 0; i < dIn; i++) row[i] = row[i]! * c;
      } else {
        let mu = 0;
        for (let i = 0; i < dIn; i++) mu += row[i]!;
        mu = Math.fround(mu / dIn);
        let ss = 0;
        for (let i = 0; i < dIn; i++) { row[i] = row[i]! - mu; ss += row[i]! * row[i]!; }
        const sd = Math.fround(Math.sqrt(ss / (dIn - 1)));
        norm.scale[t] = sd;
        norm.shift[t] = mu;
        const den = Math.fround(sd + 1e-5);
        for (let i = 0; i < dIn; i++) row[i] = row[i]! / den;
      }
    }
  }
  if (applyBDecToInput) for (let t = 0; t < n; t++) for (let i = 0; i < dIn; i++) out[t * dIn + i] = out[t * dIn + i]! - sae.b_dec[i]!;
  return { sae_in: out, norm };
}

/**
 * hidden_pre = sae_in @ W_enc + b_enc. [N, d_sae] W_enc is read in column blocks (widened to f32 once per block), and
 * four tokens share each weight read (f32 accumulators, as torch's f32 matmul; the summation order differs).
 */
export function preActivations(sae: Sae, sae_in: Float32Array, n: number): Float32Array {
  const { dIn, dSae } = sae.config;
  const pre = new Float32Array(n * dSae);
  const w = Math.min(COL_BLOCK, dSae);
  const block = new Float32Array(dIn * w);
  const acc = [new Float32Array(w), new Float32Array(w), new Float32Array(w), new Float32Array(w)] as const;
  for (let c0 = 0; c0 < dSae; c0 += w) {
    const c1 = Math.min(dSae, c0 + w);
    const cw = c1 - c0;
    for (let i = 0; i < dIn; i++) rowInto(sae.W_enc, i, block.subarray(i * cw, (i + 1) * cw), c0, c1);
    for (let t0 = 0; t0 < n; t0 += 4) {
      const rows = Math.min(4, n - t0);
      const [a0, a1, a2, a3] = acc;
      for (const a of acc) a.fill(0, 0, cw);
      for (let i = 0; i < dIn; i++) {
        const x0 = sae_in[t0 * dIn + i]!;
        const x1 = rows > 1 ? sae_in[(t0 + 1) * dIn + i]! : 0;
        const x2 = rows > 2 ? sae_in[(t0 + 2) * dIn + i]! : 0;
        const x3 = rows > 3 ? sae_in[(t0 + 3) * dIn + i]! : 0;
        const base = i * cw;
        for (let j = 0; j < cw; j++) {
          const v = block[base + j]!;
          a0[j] += x0 * v;
          a1[j] += x1 * v;
          a2[j] += x2 * v;
          a3[j] += x3 * v;
        }
      }
      for (let r = 0; r < rows; r++) {
        const o = (t0 + r) * dSae + c0;
        const a = acc[r]!;
        for (let j = 0; j < cw; j++) pre[o + j] = a[j]! + sae.b_enc[c0 + j]!;
      }
    }
  }
  return pre;
}

/** |W_dec_j| for every feature. [d_sae] */
export function decoderNorms(sae: Sae): Float32Array {
  const { dIn, dSae } = sae.config;
  const row = new Float32Array(dIn);
  const out = new Float32Array(dSae);
  for (let j = 0; j < dSae; j++) {
    rowInto(sae.W_dec, j, row);
    let s = 0;
    for (let i = 0; i < dIn; i++) s += row[i]! * row[i]!;
    out[j] = Math.sqrt(s);
  }
  return out;
}

/** The activation function in place on hidden_pre [N, d_sae]. */
export function activate(sae: Sae, pre: Float32Array, n: number, norms?: Float32Array): Float32Array {
  const { architecture, dSae, k, rescaleActsByDecoderNorm } = sae.config;
  if (architecture === 'standard') {
    for (let i = 0; i < pre.length; i++) if (!(pre[i]! > 0)) pre[i] = 0;
  } else if (architecture === 'jumprelu') {
    const thr = sae.threshold!;
    for (let t = 0; t < n; t++) {
      const o = t * dSae;
      // relu(pre)·(pre > threshold): strict, as SAELens's JumpReLU; a negative threshold still leaves relu's 0
      for (let j = 0; j < dSae; j++) { const v = pre[o + j]!; pre[o + j] = v > thr[j]! && v > 0 ? v : 0; }
    }
  } else {
    if (rescaleActsByDecoderNorm) { const dn = norms ?? decoderNorms(sae); for (let t = 0; t < n; t++) for (let j = 0; j < dSae; j++) pre[t * dSae + j] = pre[t * dSae + j]! * dn[j]!; }
    for (let t = 0; t < n; t++) {
      const row = pre.subarray(t * dSae, (t + 1) * dSae);
      const keep = topKIndices(row, k!);
      const kept = new Float32Array(keep.length);
      keep.forEach((j, q) => { kept[q] = row[j]! > 0 ? row[j]! : 0; });
      row.fill(0);
      keep.forEach((j, q) => { row[j] = kept[q]!; });
    }
  }
  return pre;
}

/** Indices of the k largest values of `row` (ties: the lower index first). */
function topKIndices(row: Float32Array, k: number): number[] {
  const n = row.length;
  if (k >= n) return Array.from({ length: n }, (_, i) => i);
  // partial selection: keep a sorted list of the best k (k is small next to d_sae)
  const best: number[] = [];
  let floor = -Infinity;
  for (let j = 0; j < n; j++) {
    const v = row[j]!;
    if (best.length === k && !(v > floor)) continue;
    let lo = 0;
    let hi = best.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (row[best[mid]!]! >= v) lo = mid + 1; else hi = mid; }
    best.splice(lo, 0, j);
    if (best.length > k) best.pop();
    floor = row[best[best.length - 1]!]!;
  }
  return best;
}

/** encode(x): feature activations of N tokens. x [N, d_in] → acts [N, d_sae] */
export function encode(sae: Sae, x: Float32Array, n: number): Encoded {
  const { sae_in, norm } = saeInput(sae, x, n);
  return { acts: activate(sae, preActivations(sae, sae_in, n), n), norm };
}

/** decode(acts): the reconstruction. acts [N, d_sae] → [N, d_in]; `norm` from the encode of the same tokens. */
export function decode(sae: Sae, acts: Float32Array, n: number, norm: NormState | null, norms?: Float32Array): Float32Array {
  const { dIn, dSae, normalizeActivations, architecture, rescaleActsByDecoderNorm } = sae.config;
  if (acts.length !== n * dSae) throw new SafekeepError(`SAE activations have ${acts.length} values, not ${n} × d_sae ${dSae}`);
  if (normalizeActivations !== 'none' && !norm) throw new SafekeepError(`decode: normalize_activations ${normalizeActivations} needs the encode's norm state`);
  const rescale = architecture === 'topk' && rescaleActsByDecoderNorm ? (norms ?? decoderNorms(sae)) : null;
  const out = new Float32Array(n * dIn);
  const row = new Float32Array(dIn);
  const acc = new Float64Array(dIn);
  for (let t = 0; t < n; t++) {
    acc.fill(0);
    for (let j = 0; j < dSae; j++) {
      let a = acts[t * dSae + j]!;
      if (a === 0) continue;
      if (rescale) a = Math.fround(a / rescale[j]!);
      rowInto(sae.W_dec, j, row);
      for (let i = 0; i < dIn; i++) acc[i] = acc[i]! + a * row[i]!;
    }
    for (let i = 0; i < dIn; i++) {
      let v = Math.fround(acc[i]! + sae.b_dec[i]!);
      if (normalizeActivations === 'constant_norm_rescale') v = v / norm!.scale[t]!;
      else if (normalizeActivations === 'layer_norm') v = v * norm!.scale[t]! + norm!.shift[t]!;
      out[t * dIn + i] = v;
    }
  }
  return out;
}

/** A change to the feature activations before decoding. */
export type FeatureEdit =
  | { kind: 'ablate'; feature: number }
  | { kind: 'clamp'; feature: number; value: number }
  /** α · W_dec[j] added to what goes back into the stream (the feature's decoder row as a steering vector) */
  | { kind: 'add'; feature: number; alpha: number };

export const FEATURE_EDIT_KINDS = ['ablate', 'clamp', 'add'] as const;

/** A SafekeepError for an edit that names no feature of this SAE or carries a non-finite number. */
export function checkEdit(sae: Sae, e: FeatureEdit): void {
  const { dSae } = sae.config;
  if (!e || !(FEATURE_EDIT_KINDS as readonly string[]).includes(e.kind)) throw new SafekeepError(`feature edit: kind must be one of ${FEATURE_EDIT_KINDS.join(', ')}`);
  if (!Number.isInteger(e.feature) || e.feature < 0 || e.feature >= dSae) throw new SafekeepError(`feature edit (${e.kind}): feature ${e.feature} is not in 0..${dSae - 1}`);
  const v = e.kind === 'clamp' ? e.value : e.kind === 'add' ? e.alpha : 0;
  if (!Number.isFinite(v)) throw new SafekeepError(`feature edit (${e.kind} ${e.feature}): ${e.kind === 'clamp' ? 'value' : 'alpha'} must be a finite number`);
}

/** acts with the ablations (0) and clamps (value) applied at every token; adds act on the output (`splice`). [N, d_sae] */
export function applyFeatureEdits(sae: Sae, acts: Float32Array, n: number, edits: readonly FeatureEdit[]): Float32Array {
  const { dSae } = sae.config;
  const out = new Float32Array(acts);
  for (const e of edits) {
    checkEdit(sae, e);
    if (e.kind === 'add') continue;
    for (let t = 0; t < n; t++) out[t * dSae + e.feature] = e.kind === 'ablate' ? 0 : e.value;
  }
  return out;
}

export interface Spliced {
  /** [N, d_sae] the activations before any edit */
  acts: Float32Array;
  /** [N, d_in] decode(acts) */
  recon: Float32Array;
  /** [N, d_in] what goes back into the stream: decode(edited) (+ x − recon with the error term) */
  out: Float32Array;
}

/** The SAE spliced at a hook point: edits applied, with or without the error term (SAELens `use_error_term`). */
export function splice(sae: Sae, x: Float32Array, n: number, opts: { edits?: readonly FeatureEdit[]; errorTerm: boolean }): Spliced {
  const { acts, norm } = encode(sae, x, n);
  const recon = decode(sae, acts, n, norm);
  const edits = opts.edits ?? [];
  const edited = edits.some((e) => e.kind !== 'add') ? decode(sae, applyFeatureEdits(sae, acts, n, edits), n, norm) : recon;
  const out = opts.errorTerm ? Float32Array.from(edited, (v, i) => v + (x[i]! - recon[i]!)) : Float32Array.from(edited);
  const { dIn } = sae.config;
  const row = new Float32Array(dIn);
  for (const e of edits) {
    if (e.kind !== 'add') continue;
    checkEdit(sae, e);
    rowInto(sae.W_dec, e.feature, row);
    for (let t = 0; t < n; t++) for (let i = 0; i < dIn; i++) out[t * dIn + i] = out[t * dIn + i]! + e.alpha * row[i]!;
  }
  return { acts, recon, out };
}
