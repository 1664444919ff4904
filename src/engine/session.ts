/**
 * From a checkpoint to an onnxruntime session: resolve the weight files (symlinks followed: onnxruntime refuses
 * external data outside the folder it is told about), build or reuse the cached graph, and open the session.
 *
 * Cache: `$SAFEKEEP_CACHE` (default `~/.cache/safekeep`)/graphs/<key>.onnx, key = sha256 of (graph version,
 * config hash, each weight file's real path + size + mtime, tensor index, options). The graph holds no weight
 * bytes; the session reads them straight from the .safetensors files.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, realpathSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import * as ort from 'onnxruntime-node';
import type { Checkpoint } from '../checkpoint/types.ts';
import { SafekeepError } from '../util/errors.ts';
import { attentionImpl, buildModelGraph, isQuantized, quantAccuracyLevel, type AttentionImpl, type ComputeDType } from './graph.ts';
import { linearType } from './precision.ts';
import { quantizedWeights, type QuantScheme, type QuantStore } from './quant-store.ts';
import { machineThreads } from './threads.ts';

/** bump when graph.ts changes what it emits */
export const GRAPH_VERSION = 8;

/**
 * Default quantization scheme per bit width (measured, `safekeep quantize --report` on random and real-shaped
 * checkpoints; SAFEKEEP_QUANT_SCHEME=sym|asym overrides).
 */
export function quantScheme(dtype: 'q8' | 'q4', explicit?: QuantScheme): QuantScheme {
  if (explicit) return explicit;
  const env = process.env.SAFEKEEP_QUANT_SCHEME;
  if (env === 'sym' || env === 'asym') return env;
  // asymmetric measured closer to f32 (worst-layer hidden-state rel. error, random llama/qwen2): q4 0.17–0.28 vs
  // 0.23–0.31 symmetric; q8 with f32 activations 0.013–0.014 vs 0.010–0.017, with int8 activations (the q8 default)
  // 0.017–0.021 vs 0.016–0.023 — a wash at 8 bits
  void dtype;
  return 'asym';
}

export type Device = 'cpu' | 'cuda';

export interface SessionOptions {
  dtype: ComputeDType;
  device: Device;
  /** intra-op threads (default: defaultThreads()) */
  threads?: number;
  /** cache root (default $SAFEKEEP_CACHE or ~/.cache/safekeep) */
  cacheDir?: string;
  /**
   * keep f32 weights only in the mmapped .safetensors pages (no pre-packed heap copy): RSS ≈ weight bytes, but
   * decode measured ~4× slower here (Gemm reading file-backed pages), prefill ~1.5× slower. Default false.
   */
  lowMemory?: boolean;
  /** attention kernel (default: SAFEKEEP_ATTENTION or 'mha', see graph.ts) */
  attention?: AttentionImpl;
  /** q8/q4 only: symmetric or asymmetric blocks (default quantScheme()) */
  quantScheme?: QuantScheme;
}

export function cacheRoot(explicit?: string): string {
  return explicit ?? process.env.SAFEKEEP_CACHE ?? join(homedir(), '.cache', 'safekeep');
}

/** Real path of every weight file; they must share one folder (true for plain folders and the HF hub cache). */
export function resolveWeightFiles(ckpt: Checkpoint): { realFiles: Map<string, string>; weightsDir: string } {
  const realFiles = new Map<string, string>();
  for (const e of ckpt.tensors.values()) if (!realFiles.has(e.file)) realFiles.set(e.file, realpathSync(e.file));
  const dirs = new Set([...realFiles.values()].map((f) => dirname(f)));
  if (dirs.size !== 1) {
    throw new SafekeepError(`${ckpt.dir}: the weight files resolve to different folders (${[...dirs].join(', ')}); put them in one folder`);
  }
  const names = [...realFiles.values()].map((f) => basename(f));
  if (new Set(names).size !== names.length) throw new SafekeepError(`${ckpt.dir}: two weight files resolve to the same file`);
  return { realFiles, weightsDir: [...dirs][0]! };
}

export function graphCacheKey(ckpt: Checkpoint, realFiles: Map<string, string>, dtype: ComputeDType, attention: AttentionImpl, fused: boolean, extra = ''): string {
  const h = createHash('sha256');
  h.update(`safekeep-graph v${GRAPH_VERSION}\n${ckpt.configHash}\n${dtype}\n${attention}\n${fused}\n${extra}`);
  for (const real of [...realFiles.values()].sort()) {
    const st = statSync(real);
    h.update(`${real}\t${st.size}\t${st.mtimeMs}\n`);
  }
  for (const e of ckpt.tensors.values()) h.update(`${e.name}\t${e.dtype}\t${e.shape.join('x')}\t${e.file}\t${e.offset}\t${e.byteLength}\n`);
  return h.digest('hex').slice(0, 32);
}

/** The graph bytes for this checkpoint and options: from the cache, or built and cached (atomic write). */
export function modelGraph(ckpt: Checkpoint, opts: SessionOptions): { bytes: Uint8Array; weightsDir: string; cached: boolean; path: string } {
  const { realFiles, weightsDir: ckptDir } = resolveWeightFiles(ckpt);
  const attention = attentionImpl(opts.attention);
  // fused q/k/v and gate/up weights are folded copies: only when weights are pre-packed (copied) anyway
  const fused = !opts.lowMemory && process.env.SAFEKEEP_FUSE !== '0';
  // q8/q4: every weight comes from the quantized store in the cache (made once), not the checkpoint folder
  let quant: QuantStore | undefined;
  if (isQuantized(opts.dtype)) quant = quantizedWeights(ckpt, opts.dtype === 'q8' ? 8 : 4, quantScheme(opts.dtype, opts.quantScheme), opts.cacheDir);
  const weightsDir = quant ? quant.dir : ckptDir;
  const key = graphCacheKey(ckpt, realFiles, opts.dtype, attention, fused, quant ? `${quant.dir}\n${quant.index.scheme}\n${quantAccuracyLevel(quant.index.bits)}\n` : '');
  const dir = join(cacheRoot(opts.cacheDir), 'graphs');
  const path = join(dir, `${key}.onnx`);
  if (existsSync(path)) return { bytes: readFileSync(path), weightsDir, cached: true, path };
  const { bytes } = buildModelGraph(ckpt, opts.dtype, realFiles, weightsDir, attention, fused, quant);
  try {
    mkdirSync(dir, { recursive: true });
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, bytes);
    renameSync(tmp, path);
  } catch {
    // an unwritable cache only costs the rebuild next time
  }
  return { bytes, weightsDir, cached: false, path };
}

/** intra-op threads when none are given: SAFEKEEP_THREADS, else physical cores within the cgroup quota (threads.ts) */
export function defaultThreads(): number {
  return machineThreads().threads;
}

const CUDA_HINT = 'On a host with CUDA 12 + cuDNN 9 install it with `npm ci --onnxruntime-node-install=cuda12` (README, CUDA), or use --device cpu';

/** onnxruntime-node's CUDA provider is a separate download next to its binding; fail early and clearly without it. */
function checkCudaInstalled(): void {
  const bindingDir = join(dirname(createRequire(import.meta.url).resolve('onnxruntime-node')), '..', 'bin', 'napi-v6', process.platform, process.arch);
  if (!existsSync(join(bindingDir, 'libonnxruntime_providers_cuda.so')) && !existsSync(join(bindingDir, 'onnxruntime_providers_cuda.dll'))) {
    throw new SafekeepError(`--device cuda: onnxruntime's CUDA execution provider is not installed (no libonnxruntime_providers_cuda in ${bindingDir}). ${CUDA_HINT}`);
  }
}

export async function openSession(ckpt: Checkpoint, opts: SessionOptions): Promise<{ session: ort.InferenceSession; cached: boolean }> {
  if (opts.device === 'cuda') checkCudaInstalled();
  if (linearType(opts.dtype) === 'bf16' && opts.device !== 'cuda') {
    throw new SafekeepError(`--dtype ${opts.dtype} runs only with --device cuda (onnxruntime's CPU provider has no bf16 MatMul); on the CPU use --dtype bf16 (bf16-rounded weights, f32 math) or f16`);
  }
  const { bytes, weightsDir, cached } = modelGraph(ckpt, opts);
  const options: ort.InferenceSession.SessionOptions = {
    executionProviders: opts.device === 'cuda' ? ['cuda', 'cpu'] : ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: opts.threads ?? defaultThreads(),
    interOpNumThreads: 1,
    executionMode: 'sequential',
    extra: {
      session: {
        // workers never spin. Measured A/B in one process, 2 threads, decode: spinning within a run (with
        // force_spinning_stop at its end) gained 1.2–1.3× on a lightly loaded machine (load ≤ 4.6 on 2 cores: q8
        // 81 → 101, q4 90 → 117 tok/s) but lost 1.2–2.5× once other processes wanted the cores (load 5–7: q8 49 → 40,
        // f32 23 → 12, q4 64 → 26): a spinning worker keeps a core the descheduled one needs. Users share machines
        // (the guard beside an agent, tests beside a build), so the safe side is the default. SAFEKEEP_SPIN=1 opts in
        // (spinning stops at the end of each run, so no core burns between steps or while idle)
        intra_op: { allow_spinning: process.env.SAFEKEEP_SPIN === '1' ? '1' : '0' },
        ...(process.env.SAFEKEEP_SPIN === '1' ? { force_spinning_stop: '1' } : {}),
        // q8/q4 need pre-packing: unpacked MatMulNBits dequantizes whole weights per call (measured 2.6 GiB peak and
        // minutes for one 8B-shaped layer), so lowMemory only applies to f32/bf16
        ...(opts.lowMemory && !isQuantized(opts.dtype) ? { disable_prepacking: '1' } : {}),
        inter_op: { allow_spinning: '0' },
        model_external_initializers_file_folder_path: weightsDir,
      },
    },
    // warnings (e.g. nodes placed on CPU under CUDA) are noise for users; errors surface as exceptions
    logSeverityLevel: opts.device === 'cuda' ? 4 : 3,
  };
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(bytes, options);
  } catch (e) {
    if (opts.device !== 'cuda') throw e;
    const why = String((e as Error).message ?? e).split('\n')[0]!.slice(0, 300);
    throw new SafekeepError(`--device cuda: onnxruntime's CUDA execution provider could not start (${why}). ${CUDA_HINT}`);
  }
  return { session, cached };
}
