/**
 * Shared helpers for the engine tests: a temp graph cache, max-abs-diff, and reading reference tensors.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RandomCheckpointOptions } from '../../src/checkpoint/random.ts';
import { readSafetensorsHeader } from '../../src/checkpoint/safetensors.ts';
import { readTensorF32 } from '../../src/checkpoint/read.ts';
import type { Family } from '../../src/checkpoint/types.ts';

/**
 * The engine tests' tiny random models, one per family: GQA everywhere (mistral 4:1), llama untied and in 2 shards,
 * qwen2 with q/k/v biases and tied embeddings, qwen3 with q/k norms and an explicit head_dim ≠ hidden/heads.
 */
export const TINY_MODELS: Record<Family, RandomCheckpointOptions> = {
  llama: { numLayers: 3, hiddenSize: 48, numHeads: 6, numKvHeads: 2, intermediateSize: 96, vocabSize: 101, tieWordEmbeddings: false, shards: 2 },
  mistral: { numLayers: 2, hiddenSize: 32, numHeads: 4, numKvHeads: 1, intermediateSize: 80, vocabSize: 97, tieWordEmbeddings: false },
  qwen2: { numLayers: 2, hiddenSize: 32, numHeads: 4, numKvHeads: 2, intermediateSize: 64, vocabSize: 89, tieWordEmbeddings: true },
  qwen3: { numLayers: 3, hiddenSize: 40, numHeads: 4, numKvHeads: 2, headDim: 16, intermediateSize: 64, vocabSize: 83, tieWordEmbeddings: true },
};

/**
 * Three GQA families at one small size (llama 3:1, qwen2 2:1 with biases, qwen3 4:1 with q/k norms), random weights
 * large enough (std 0.2) that reuse or chunking mistakes show: the prefix and chunked-prefill tests' models.
 */
export const SMALL_GQA: { family: 'llama' | 'qwen2' | 'qwen3'; opts: RandomCheckpointOptions }[] = (
  [['llama', 6, 2], ['qwen2', 4, 2], ['qwen3', 4, 1]] as const
).map(([family, numHeads, numKvHeads]) => ({
  family, opts: { numLayers: 3, hiddenSize: 48, intermediateSize: 80, vocabSize: 97, std: 0.2, numHeads, numKvHeads },
}));

/** A fresh temp folder the tests pass as the engine's `cacheDir` (tests never touch ~/.cache). */
export function tempCache(): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-cache-'));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** max |a - b|; throws on length mismatch */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length mismatch: ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
  }
  return m;
}

/** All tensors of a .safetensors file as f32, by name. */
export function readAllF32(path: string): Map<string, { shape: number[]; data: Float32Array }> {
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const e of readSafetensorsHeader(path).entries) {
    out.set(e.name, { shape: e.shape, data: readTensorF32({ ...e, dtype: e.dtype as 'F32' }) });
  }
  return out;
}
