/**
 * The engine's one resolved configuration. Callers give `EngineOptions` (every field optional); the CLI fills them
 * from its flags and the SAFEKEEP_* environment (src/cli/env.ts) — nothing below the CLI reads the environment.
 * `resolveEngineConfig` applies the measured defaults once; the graph builder, the session and the graph-cache key
 * all read the same `EngineConfig`.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import {
  DEFAULT_QUANT_BLOCK, DEVICES, EMBEDDING_LOOKUPS, KV_DTYPES, type AttentionImpl, type EmbeddingLookup, type Device, type EngineConfig, type KvDType, type QuantBlock,
  type QuantScheme,
} from './graph/config.ts';
import { defaultDType, type ComputeDType } from './graph/precision.ts';
import { machineThreads } from './runtime/threads.ts';
import { SafekeepError } from '../util/errors.ts';

// the resolved config and its vocabularies live below the layers (graph/config.ts, so graph/ and runtime/ read them
// without importing upwards); re-exported here for the callers above the engine
export { ATTENTION_IMPLS, DEFAULT_QUANT_BLOCK, DEVICES, graphConfigKey, QUANT_BLOCKS } from './graph/config.ts';
export type { AttentionImpl, Device, EngineConfig, QuantBlock, QuantScheme } from './graph/config.ts';

export interface EngineOptions {
  dtype?: ComputeDType;
  /**
   * execution provider (default 'cpu'): 'cuda' (a separate install, `npm run install:cuda`) or 'webgpu' (bundled with
   * onnxruntime-node; Dawn on Vulkan on Linux). On either GPU the nodes the provider lacks (int64 shape arithmetic)
   * run on the CPU provider.
   */
  device?: Device;
  /** intra-op threads (default: one per physical core within the CPU quota, threads.ts) */
  threads?: number;
  /** graph and quantized-weight cache root (default ~/.cache/safekeep) */
  cacheDir?: string;
  /** most padded tokens (B·T) per internal batch (default 4096); sequences are grouped by length under it */
  maxBatchTokens?: number;
  /** weights only in the mmapped files, no pre-packed copy (less RSS, slower; see session.ts) */
  lowMemory?: boolean;
  /**
   * multi-token attention kernel: 'onnx' (the ONNX Attention op; default on cpu), 'mha' (onnxruntime's
   * MultiHeadAttention; default on cuda, whose Attention-op support is untested here; refused on webgpu) or 'matmul'
   * (standard ops; default on webgpu)
   */
  attention?: AttentionImpl;
  /**
   * q/k/v and gate/up as one Gemm each on in-graph concatenated weights (default true; always false with
   * lowMemory, because the concatenation is a folded copy that only pays when weights are pre-packed anyway)
   */
  fuse?: boolean;
  /** q8/q4: symmetric or asymmetric blocks (default `defaultQuantScheme`) */
  quantScheme?: QuantScheme;
  /** q8/q4: MatMulNBits accuracy level 0..4 (default `defaultQuantAccuracy`) */
  quantAccuracy?: number;
  /**
   * q8/q4: weights per block (default `DEFAULT_QUANT_BLOCK` = 32; symmetric with f32 scales that is 5 / 9 bits per
   * weight, 64 is 4.5 / 8.5 — the bytes of llama.cpp's Q4_0 / Q8_0 —, 128 is 4.25 / 8.25)
   */
  quantBlock?: QuantBlock;
  /**
   * let session workers spin within a run (stopping at its end): faster on a machine of your own, slower once other
   * processes want the cores (runtime/session.ts). Default false.
   */
  spin?: boolean;
  /** no progress lines on stderr (quantizing weights) */
  quiet?: boolean;
  /**
   * onnxruntime's per-node profiler: the path prefix of its trace (Chrome trace JSON, written when the engine is
   * disposed; `npm run bench:profile` sums it per op). Slows every node a little; for finding where time goes.
   */
  profile?: string;
  /**
   * memory budget in bytes (memory.ts `planMemory`): sets maxBatchTokens, groups batches so every step fits, prefills
   * prompts too long for one step in chunks, and sizes the prefix cache (`memoryPlan.prefixCacheBytes`). A budget
   * the weights alone exceed is a SafekeepError before the session opens.
   */
  maxMemory?: number;
  /** bytes the budget leaves to the rest of the process (default: its RSS now + memory.ts RUNTIME_MARGIN) */
  runtimeBytes?: number;
  /**
   * the KV cache's element type: 'f32' or 'f16' (half the bytes held and moved per step; the attention math stays
   * f32, only the stored keys and values are rounded). Default: the compute dtype's (`defaultKvDType`)
   */
  kvDType?: KvDType;
  /**
   * where the token embedding is looked up: 'host' (the engine reads the step's rows from the weight file; the CPU's
   * default) or 'graph' (a Gather in the graph; the default on cuda and webgpu). Results are bit-equal; 'host' keeps
   * the table out of resident memory (runtime/host-embeddings.ts).
   */
  embeddings?: EmbeddingLookup;
}

/**
 * Default quantization: symmetric blocks of 32 with f32 scales (5 / 9 bits per weight). Symmetric 4-bit uses
 * llama.cpp Q4_0's scale rule (quant.ts). Measured against the other stores (src/engine/README.md "q8 / q4"): the
 * fastest decode at 1 thread — MatMulNBits' int8 kernels run block 32 faster than 64 (Llama-3.2-1B shape, one
 * process, interleaved, CPU ms per step: q4 sym 32 92.9, sym 128 93.6, asym 32 101.8, sym 64 106.3; q8 sym 32 182,
 * sym 64 190, asym 32 204), equal at 2 threads — and a finer grid than 64 (worst-layer hidden-state rel. error vs
 * f32 on the d-64 test checkpoints: q4 sym 32 0.21–0.25, sym 64 0.24–0.30, asym 32 0.17–0.28). Block 64 has exactly
 * the bytes per weight of Q4_0 / Q8_0 (4.5 / 8.5: their blocks of 32 carry f16 scales, MatMulNBits' scales are f32
 * with f32 activations); `bench:llama` times both against llama.cpp.
 */
function defaultQuantScheme(): QuantScheme {
  return 'sym';
}

/**
 * MatMulNBits accuracy level: 0 = f32 activations × dequantized weights, 4 = int8 activations (blockwise-quantized
 * activations, integer dot products: the fast kernels, and what llama.cpp's q4_0/q8_0 do). 4 for both widths, as
 * measured (SmolLM2 shape, 1 thread, A/B in one process): q4 decode 1.4–1.8× faster than level 0 (e.g. 79.9 vs 58.6
 * tok/s by CPU time under load 5.9) with the same hidden-state error vs f32 (worst layer, random llama/qwen2: rel
 * 0.2138 vs 0.2142, 0.2754 vs 0.2753 — the int8 activation rounding is far below the 4-bit weight error); 8-bit at
 * level 0 has no fast kernel here (decode 1.2 vs 57 tok/s).
 */
function defaultQuantAccuracy(bits: 4 | 8, device: Device): number {
  void bits;
  // onnxruntime 1.30's WebGPU MatMulNBits computes level 0's numbers whatever the level (measured: ≤ 3e-6 from the
  // CPU's level 0 on the test checkpoints, 3e-2 from its level 4), so webgpu asks for what it computes
  return device === 'webgpu' ? 0 : 4;
}

/**
 * The ONNX Attention op (opset 23) on cpu: same results as MultiHeadAttention (bit-equal on the test checkpoints), and
 * K/V heads read in place instead of repeated per query head — measured in one process, SmolLM2 shape: prefill
 * 1×512 1.02× (1 thread, CPU time) / 1.02× (2 threads, wall), 4 suffixes on a 1,000-token prefix 1.01×, decode equal
 * (the same T = 1 path). cuda keeps 'mha': the Attention op's CUDA kernel is untested here. webgpu runs 'matmul':
 * onnxruntime 1.30's WebGPU provider has no Attention-23 kernel (the op and the If around it fall back to the CPU,
 * with copies both ways each layer), and its MultiHeadAttention is wrong once both the query and the key lengths
 * reach 32 (measured against the CPU kernel, no bias, 4×16 and 2×64 heads: Tq = Tk = 31 ≤ 5e-8, 32 → 1e-2, 64 → 4e-3),
 * which `resolveEngineConfig` refuses by name.
 */
function defaultAttention(device: string): AttentionImpl {
  return device === 'cpu' ? 'onnx' : device === 'webgpu' ? 'matmul' : 'mha';
}

/**
 * The KV follows the activations' precision: f16 only where the linear layers compute in f16 (`--dtype f16` on cuda
 * and webgpu); everywhere else f32, so `--dtype f32` on a GPU gives the CPU's numbers (an f16 KV put webgpu f32 up to
 * 3.5e-3 off HF instead of 3e-6). On the CPU `--dtype f16` computes f32 math on f16-rounded weights (precision.ts),
 * so its KV stays f32 too. An f16 KV anywhere else is an explicit `kvDType`.
 */
export function defaultKvDType(dtype: ComputeDType, device: Device): KvDType {
  return dtype === 'f16' && device !== 'cpu' ? 'f16' : 'f32';
}

/**
 * The CPU looks the embedding up on the host: a Gather in the graph pages in the whole table through its mapping
 * (runtime/host-embeddings.ts; bench:generate measured the peak RSS 0.13–0.17 GB lower). On a GPU the table lives in
 * device memory, so the graph's Gather reads it there, and host rows would cross to the device every step.
 */
export function defaultEmbeddings(device: Device): EmbeddingLookup {
  return device === 'cpu' ? 'host' : 'graph';
}

function defaultCacheDir(): string {
  return join(homedir(), '.cache', 'safekeep');
}

export function resolveEngineConfig(o: EngineOptions): EngineConfig {
  const device = o.device ?? 'cpu';
  if (!DEVICES.includes(device)) throw new SafekeepError(`device must be one of ${DEVICES.join(', ')}, got '${String(device)}'`);
  if (o.kvDType !== undefined && !KV_DTYPES.includes(o.kvDType)) throw new SafekeepError(`kvDType must be one of ${KV_DTYPES.join(', ')}, got '${String(o.kvDType)}'`);
  if (o.embeddings !== undefined && !EMBEDDING_LOOKUPS.includes(o.embeddings)) throw new SafekeepError(`embeddings must be one of ${EMBEDDING_LOOKUPS.join(', ')}, got '${String(o.embeddings)}'`);
  if (device === 'webgpu' && o.attention === 'mha') {
    throw new SafekeepError("attention 'mha' is refused on webgpu: onnxruntime 1.30's WebGPU MultiHeadAttention is wrong once the query and key lengths reach 32 (use 'matmul', the webgpu default)");
  }
  // f32 on cpu, f16 weights on cuda and webgpu unless asked otherwise (precision.ts)
  const dtype = o.dtype ?? defaultDType(device);
  const lowMemory = o.lowMemory ?? false;
  const bits = dtype === 'q8' ? 8 : dtype === 'q4' ? 4 : null;
  return {
    dtype, device, lowMemory,
    threads: o.threads ?? machineThreads().threads,
    cacheDir: o.cacheDir ?? defaultCacheDir(),
    attention: o.attention ?? defaultAttention(device),
    fuse: !lowMemory && (o.fuse ?? true),
    quant: bits === null ? null : { bits, scheme: o.quantScheme ?? defaultQuantScheme(), accuracyLevel: o.quantAccuracy ?? defaultQuantAccuracy(bits, device), block: o.quantBlock ?? DEFAULT_QUANT_BLOCK },
    spin: o.spin ?? false,
    quiet: o.quiet ?? false,
    profile: o.profile ?? null,
    kvDType: o.kvDType ?? defaultKvDType(dtype, device),
    embeddings: o.embeddings ?? defaultEmbeddings(device),
  };
}
