/**
 * A sparse autoencoder as safekeep holds it: the SAELens inference model (sae_lens/saes/sae.py and the
 * architectures beside it, jbloomAus/SAELens @ 91ca16ccd0684e4dd6323cd4f23ded734339ec54) with its weights in the
 * dtype they were stored in. Shapes use SAELens's names: W_enc [d_in, d_sae], W_dec [d_sae, d_in].
 */

export const SAE_ARCHITECTURES = ['standard', 'jumprelu', 'topk'] as const;
export type SaeArchitecture = (typeof SAE_ARCHITECTURES)[number];

/** The run-time input normalizations SAELens applies at inference ('none' = identity). */
export const SAE_NORMALIZATIONS = ['none', 'constant_norm_rescale', 'layer_norm'] as const;
export type SaeNormalization = (typeof SAE_NORMALIZATIONS)[number];

export type StoredDtype = 'F32' | 'BF16' | 'F16';

/** Where a dictionary came from: a SAELens folder, Gemma Scope params.npz / params.safetensors, Llama Scope. */
export type SaeLayout = 'saelens' | 'gemma-scope' | 'llama-scope';

export interface SaeConfig {
  architecture: SaeArchitecture;
  dIn: number;
  dSae: number;
  /** topk: features kept per token */
  k: number | null;
  /** topk: pre-activations scaled by |W_dec row| before the choice, activations divided by it before decoding */
  rescaleActsByDecoderNorm: boolean;
  /** x − b_dec is encoded (SAELens `apply_b_dec_to_input`) */
  applyBDecToInput: boolean;
  normalizeActivations: SaeNormalization;
  /** TransformerLens hook name (`blocks.12.hook_resid_post`); null when the files do not say */
  hookName: string | null;
  /** the dtype the weights are held in (cfg.json `dtype`; computation is f32) */
  dtype: StoredDtype;
  layout: SaeLayout;
  /** the folder or file read */
  source: string;
}

/** A row-major matrix in its stored dtype: F32 as Float32Array, BF16 / F16 as their 16-bit patterns. */
export interface StoredMatrix {
  dtype: StoredDtype;
  rows: number;
  cols: number;
  data: Float32Array | Uint16Array;
}

export interface Sae {
  config: SaeConfig;
  /** [d_in, d_sae] */
  W_enc: StoredMatrix;
  /** [d_sae, d_in] */
  W_dec: StoredMatrix;
  /** [d_sae] */
  b_enc: Float32Array;
  /** [d_in] */
  b_dec: Float32Array;
  /** [d_sae], JumpReLU only */
  threshold: Float32Array | null;
  /** bytes the weights occupy in memory (as stored: a 131k × 4096 dictionary is 4.3 GB in f32, half in bf16) */
  bytes: number;
}
