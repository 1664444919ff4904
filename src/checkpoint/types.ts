/**
 * What the rest of safekeep knows about a checkpoint. Families differ only through `ModelConfig` fields
 * (the config table in `config.ts`), never through copies of the forward pass.
 */

export type Family = 'llama' | 'mistral' | 'qwen2' | 'qwen3';
export type DType = 'F32' | 'BF16' | 'F16';

export type RopeScaling =
  | { type: 'default' }
  | {
      type: 'llama3';
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositionEmbeddings: number;
    };

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
  tieWordEmbeddings: boolean;
  /** q/k/v projections carry a bias (qwen2) */
  qkvBias: boolean;
  /** per-head RMSNorm on q and k before RoPE (qwen3) */
  qkNorm: boolean;
  bosTokenId: number | null;
  /** stop ids: generation_config.json eos_token_id (int or list), else config.json's */
  eosTokenIds: number[];
  padTokenId: number | null;
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
