/**
 * What the rest of safekeep knows about a checkpoint. Families differ only through `ModelConfig` fields
 * (the config table in `config.ts`), never through copies of the forward pass.
 */

export type Family = 'llama' | 'mistral' | 'qwen2' | 'qwen3';
export type DType = 'F32' | 'BF16' | 'F16';

/** Resolved RoPE type and its parameters (rope.ts; transformers' `rope_parameters` / `rope_scaling`). */
export type RopeScaling =
  | { type: 'default' }
  | { type: 'linear'; factor: number }
  | {
      type: 'llama3';
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositionEmbeddings: number;
    }
  | {
      type: 'yarn';
      factor: number;
      originalMaxPositionEmbeddings: number;
      /** multiplies cos and sin (explicit `attention_factor`, else from factor / mscale / mscale_all_dim) */
      attentionFactor: number;
      betaFast: number;
      betaSlow: number;
      truncate: boolean;
    }
  /** NTK: θ grows with the length being run beyond `maxPositionEmbeddings` (recomputed per forward, as transformers does) */
  | { type: 'dynamic'; factor: number; maxPositionEmbeddings: number };

/** Normalised config.json (+ generation_config.json). */
export interface ModelConfig {
  family: Family;
  numLayers: number;
  hiddenSize: number;
  intermediateSize: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
  rmsNormEps: number;
  ropeTheta: number;
  rope: RopeScaling;
  maxPositionEmbeddings: number;
  /**
   * per layer: the sliding attention window W (query at position i sees keys i−W+1..i, transformers'
   * `kv_idx > q_idx - sliding_window`), or null for full causal attention. [numLayers]
   */
  attentionWindows: (number | null)[];
  tieWordEmbeddings: boolean;
  /** q/k/v projections carry a bias (qwen2) */
  qkvBias: boolean;
  /** per-head RMSNorm on q and k before RoPE (qwen3) */
  qkNorm: boolean;
  bosTokenId: number | null;
  /** stop ids: generation_config.json eos_token_id (int or list), else config.json's */
  eosTokenIds: number[];
  padTokenId: number | null;
  /** config.json keys that were read (they decide the forward pass or the stop ids) and those ignored as harmless */
  configKeys: { read: string[]; ignored: string[] };
}

/** One tensor inside a .safetensors file, validated against its header and the file size. */
export interface TensorEntry {
  name: string;
  /** absolute path of the .safetensors file */
  file: string;
  dtype: DType;
  shape: number[];
  /** absolute byte offset of the data in `file` (8 + header length + data_offsets[0]) */
  offset: number;
  byteLength: number;
}

export interface Checkpoint {
  /** absolute folder */
  dir: string;
  config: ModelConfig;
  /** every tensor of the model, by HF name */
  tensors: Map<string, TensorEntry>;
  /** sha256 of config.json bytes (+ generation_config.json when present) */
  configHash: string;
}
