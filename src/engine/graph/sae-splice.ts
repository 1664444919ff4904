/**
 * A sparse autoencoder at a hook point, in the graph (the SAELens forward, sae_lens/saes/*.py, jbloomAus/SAELens @
 * 91ca16ccd0684e4dd6323cd4f23ded734339ec54; the same formulas as src/sae/math.ts, which tests hold to torch):
 *   sae_in = x − b_dec·apply_b_dec_to_input,   pre = sae_in @ W_enc + b_enc
 *   acts   = relu(pre) | relu(pre)·(pre > threshold) | topk(pre·|W_dec_j|?, k) relu'd
 *   edited = acts ⊙ keep + set                         (ablate: keep 0; clamp: keep 0, set v; [R, d_sae])
 *   x'     = x                                          splice 'capture'  (only the activations are read)
 *          = x + decode(edited) − decode(acts) + add    splice 'error'    (SAELens use_error_term: exact when unedited)
 *          = decode(edited) + add                        splice 'reconstruction'
 * with decode(a) = (a / |W_dec_j|?) @ W_dec + b_dec and `add` [R, d_in] the sum of α·W_dec[j] of the decoder-row
 * adds. R = 1 (one set of edits for every token) or BT (one per token row: a decode batch whose sequences edit
 * differently, run/sae-rows.ts). The weights are graph inputs (fed by the run layer, f32), so one graph serves every dictionary of a shape;
 * the activations leave as the output `hook.<point>.sae_acts` [BT, d_sae] (before the edits). Input normalization
 * (constant_norm_rescale, layer_norm) is not built here; the run layer refuses it by name.
 */
import type { GraphBuilder } from './onnx/builder.ts';
import { DataType } from './onnx/proto.ts';

export interface SaeGraphSpec {
  /** the engine's hook point (`blocks.1.resid_post`) */
  hook: string;
  architecture: 'standard' | 'jumprelu' | 'topk';
  dIn: number;
  dSae: number;
  /** topk's k */
  k: number | null;
  applyBDecToInput: boolean;
  rescaleActsByDecoderNorm: boolean;
  splice: 'capture' | 'error' | 'reconstruction';
  /** whether the activations are an output */
  captureActs: boolean;
}

/** Graph I/O names of the SAE at point `p`. */
export const SAE_IO = {
  /** f32 [d_in, d_sae] */
  W_enc: (p: string) => `sae_W_enc.${p}`,
  /** f32 [d_sae] */
  b_enc: (p: string) => `sae_b_enc.${p}`,
  /** f32 [d_sae, d_in] */
  W_dec: (p: string) => `sae_W_dec.${p}`,
  /** f32 [d_in] */
  b_dec: (p: string) => `sae_b_dec.${p}`,
  /** f32 [d_sae], jumprelu */
  threshold: (p: string) => `sae_threshold.${p}`,
  /** f32 [d_sae], topk with rescale_acts_by_decoder_norm: |W_dec_j| */
  decNorm: (p: string) => `sae_dec_norm.${p}`,
  /** f32 [R, d_sae], R = 1 or BT */
  keep: (p: string) => `sae_keep.${p}`,
  /** f32 [R, d_sae] */
  set: (p: string) => `sae_set.${p}`,
  /** f32 [R, d_in] */
  add: (p: string) => `sae_add.${p}`,
  /** output f32 [BT, d_sae] */
  acts: (p: string) => `hook.${p}.sae_acts`,
} as const;

/** The name under which a point's SAE activations are cached (`blocks.1.resid_post.sae_acts`). */
export const saeActsName = (point: string): string => `${point}.sae_acts`;

/** x [BT, d_in] → x' (see above); declares the SAE's inputs and, if asked, its activations output. */
export function saeSplice(g: GraphBuilder, spec: SaeGraphSpec, x: string): string {
  const F = DataType.FLOAT;
  const p = spec.hook;
  const { dIn, dSae } = spec;
  const W_enc = g.input(SAE_IO.W_enc(p), F, [dIn, dSae]);
  const b_enc = g.input(SAE_IO.b_enc(p), F, [dSae]);
  const b_dec = g.input(SAE_IO.b_dec(p), F, [dIn]);
  const saeIn = spec.applyBDecToInput ? g.op('Sub', [x, b_dec], {}, { name: 'sae_in' }) : x;
  let pre = g.op('Add', [g.op('MatMul', [saeIn, W_enc], {}, { name: 'sae_enc' }), b_enc], {}, { name: 'sae_pre' });
  let acts: string;
  const decNorm = spec.architecture === 'topk' && spec.rescaleActsByDecoderNorm ? g.input(SAE_IO.decNorm(p), F, [dSae]) : null;
  if (spec.architecture === 'standard') acts = g.op('Relu', [pre], {}, { name: 'sae_acts' });
  else if (spec.architecture === 'jumprelu') {
    const thr = g.input(SAE_IO.threshold(p), F, [dSae]);
    // strict >, as SAELens's JumpReLU: a pre-activation equal to its threshold is 0
    const open = g.op('Cast', [g.op('Greater', [pre, thr])], { to: F });
    acts = g.op('Mul', [g.op('Relu', [pre]), open], {}, { name: 'sae_acts' });
  } else {
    if (decNorm) pre = g.op('Mul', [pre, decNorm], {}, { name: 'sae_pre_rescaled' });
    const [values, indices] = g.opN('TopK', [pre, g.i64([spec.k!])], { axis: -1, largest: 1, sorted: 1 }, { outputs: 2, name: 'sae_topk' });
    const zeros = g.op('Mul', [pre, g.f32([0])]);
    acts = g.op('ScatterElements', [zeros, indices!, g.op('Relu', [values!])], { axis: -1 }, { name: 'sae_acts' });
  }
  if (spec.captureActs) g.output(SAE_IO.acts(p), acts, F, ['bt', dSae]);
  if (spec.splice === 'capture') return x;
  const W_dec = g.input(SAE_IO.W_dec(p), F, [dSae, dIn]);
  const keep = g.input(SAE_IO.keep(p), F, ['sae_rows', dSae]);
  const set = g.input(SAE_IO.set(p), F, ['sae_rows', dSae]);
  const add = g.input(SAE_IO.add(p), F, ['sae_rows', dIn]);
  const edited = g.op('Add', [g.op('Mul', [acts, keep]), set], {}, { name: 'sae_edited' });
  const unscale = (a: string) => (decNorm ? g.op('Div', [a, decNorm]) : a);
  if (spec.splice === 'reconstruction') {
    const recon = g.op('Add', [g.op('MatMul', [unscale(edited), W_dec], {}, { name: 'sae_dec' }), b_dec], {}, { name: 'sae_recon' });
    return g.op('Add', [recon, add], {}, { name: 'sae_out' });
  }
  const delta = g.op('MatMul', [unscale(g.op('Sub', [edited, acts])), W_dec], {}, { name: 'sae_dec_delta' });
  return g.op('Add', [x, g.op('Add', [delta, add])], {}, { name: 'sae_out' });
}
