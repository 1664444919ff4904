/**
 * The quantized store's layout as the graph reads it (runtime/quant-store.ts writes it): one weights.bin with every
 * tensor the graph needs, and an index of byte ranges; each quantized linear [N, K] as `<name>.codes`,
 * `<name>.scales` and, asymmetric, `<name>.zp`.
 */
import type { DType } from '../../checkpoint/types.ts';
import type { QuantScheme } from './config.ts';

/** One tensor in weights.bin. */
export interface StoredTensor {
  offset: number;
  length: number;
  /** 'U8' codes / packed zero points, 'F32' scales, or the checkpoint's storage dtype for copied tensors */
  dtype: 'U8' | DType;
  shape: number[];
}

/** A quantized linear weight [N, K]: `<name>.codes`, `<name>.scales`, `<name>.zp` (asymmetric) in the index. */
export interface QuantIndex {
  version: number;
  bits: 4 | 8;
  scheme: QuantScheme;
  block: number;
  tensors: Record<string, StoredTensor>;
  /** quantized linear weights: name → [N, K] */
  linears: Record<string, [number, number]>;
}

export interface QuantStore {
  dir: string;
  file: string;
  index: QuantIndex;
  /** true when it came from the cache */
  cached: boolean;
}

