/**
 * The engine's resolved configuration as every layer reads it: the graph builder, the session and the graph-cache
 * key take the same `EngineConfig`. It lives in the lowest layer so graph/ and runtime/ read it without importing
 * upwards; resolving options into it (the measured defaults) is engine-config.ts's job, above the layers.
 */
import type { ComputeDType } from './precision.ts';

export const DEVICES = ['cpu', 'cuda', 'webgpu'] as const;
export type Device = (typeof DEVICES)[number];

/**
 * Attention kernel. A decode step (one new token) always runs standard ops on the KV buffer in place. A multi-token
 * step (prefill, a prefix's suffix, a chunk) runs onnxruntime's fused MultiHeadAttention on the buffer and the new
 * slots with 'mha' (default; measured 1.11× / 1.28× a 2048-token prefill at 1 / 2 threads over standard ops on the
 * SmolLM2 shape, and the scores never materialized) or the same standard ops with 'matmul'. Both are tested against
 * HF and the oracle.
 */
export const ATTENTION_IMPLS = ['onnx', 'mha', 'matmul'] as const;
export type AttentionImpl = (typeof ATTENTION_IMPLS)[number];

/** q8/q4 block quantization: symmetric, or asymmetric with a zero point per block. */
export type QuantScheme = 'sym' | 'asym';

/** q8/q4: weights per block (one scale, and zero point, each) */
export type QuantBlock = 32 | 64 | 128;
export const QUANT_BLOCKS: readonly QuantBlock[] = [32, 64, 128];

/** the default block (engine-config.ts says why 32) */
export const DEFAULT_QUANT_BLOCK: QuantBlock = 32;

/** KV element type: f32, or f16 (held as its bits in a Uint16Array, onnxruntime's 'float16' tensor data) */
export type KvDType = 'f32' | 'f16';
export const KV_DTYPES: readonly KvDType[] = ['f32', 'f16'];

/**
 * Where the token embedding is looked up: 'host' = the engine reads the rows of a step's ids from the weight file and
 * feeds them as `inputs_embeds` (runtime/host-embeddings.ts); 'graph' = a Gather on the embedding table inside the
 * graph (its own mapping of the stored bytes). The default is 'host' on the CPU and 'graph' on a GPU (engine-config.ts
 * `defaultEmbeddings` says why).
 */
export type EmbeddingLookup = 'host' | 'graph';
export const EMBEDDING_LOOKUPS: readonly EmbeddingLookup[] = ['host', 'graph'];

/** What the session and the graph are made from: every choice resolved. */
export interface EngineConfig {
  dtype: ComputeDType;
  device: Device;
  threads: number;
  cacheDir: string;
  lowMemory: boolean;
  attention: AttentionImpl;
  fuse: boolean;
  /** null unless dtype is q8/q4 */
  quant: { bits: 4 | 8; scheme: QuantScheme; accuracyLevel: number; block: QuantBlock } | null;
  spin: boolean;
  quiet: boolean;
  /** trace path prefix, or null: no profiling */
  profile: string | null;
  kvDType: KvDType;
  embeddings: EmbeddingLookup;
}

/** The fields of a config that change the graph's bytes (the graph-cache key's share of it). */
export function graphConfigKey(c: EngineConfig): string {
  // webgpu graphs differ (attention.ts joinValues); the other devices' keys stay as they were
  return `${c.dtype}\n${c.attention}\n${c.fuse}\n${c.device === 'webgpu' ? 'webgpu\n' : ''}${c.kvDType === 'f16' ? 'kv f16\n' : ''}${c.embeddings === 'host' ? 'embeddings host\n' : ''}`;
}
