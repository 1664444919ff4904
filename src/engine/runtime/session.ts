/**
 * From a checkpoint to an onnxruntime session: resolve the weight files (symlinks followed: onnxruntime refuses
 * external data outside the folder it is told about), build or reuse the cached graph, and open the session.
 *
 * Cache: `<cacheDir>`/graphs/<key>.onnx, key = sha256 of (graph version, config hash, each weight file's real path +
 * size + mtime, tensor index, the graph-relevant EngineConfig fields). The graph holds no weight
 * bytes; the session reads them straight from the .safetensors files.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { tensorName } from '../../checkpoint/tensors.ts';
import type { Checkpoint } from '../../checkpoint/types.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { SafekeepError } from '../../util/errors.ts';
import { sha256Hex } from '../../util/hash.ts';
import { graphConfigKey, type EngineConfig } from '../graph/config.ts';
import { isQuantized } from '../graph/precision.ts';
import { buildModelGraph } from '../graph/decoder.ts';
import { hookSelectionKey, type HookSelection } from '../graph/hooks.ts';
import type { QuantStore } from '../graph/quant-index.ts';
import { IO } from '../graph/io.ts';
import { linearType } from '../graph/precision.ts';
import type { EmbeddingTable } from './host-embeddings.ts';
import { quantizedWeights } from './quant-store.ts';
import { resolveWeightFiles, weightFilesStamp } from './weight-files.ts';

/** bump when the graph builders (graph/) change what they emit, so cached graphs are rebuilt */
export const GRAPH_VERSION = 17;

/** Cache key of the graph: what the graph's bytes depend on (GRAPH_VERSION, config, weight files, tensor index, config). */
function graphCacheKey(ckpt: Checkpoint, realFiles: Map<string, string>, cfg: EngineConfig, quantDir: string | null, hooks?: HookSelection): string {
  const quant = cfg.quant && quantDir !== null ? `${quantDir}\n${cfg.quant.scheme}\n${cfg.quant.accuracyLevel}\n` : '';
  // the hook selection adds its line only when there is one: the plain graph keeps its key
  let text = `safekeep-graph v${GRAPH_VERSION}\n${ckpt.configHash}\n${graphConfigKey(cfg)}${quant}${hookSelectionKey(hooks)}` + weightFilesStamp(realFiles);
  for (const e of ckpt.tensors.values()) text += `${e.name}\t${e.dtype}\t${e.shape.join('x')}\t${e.file}\t${e.offset}\t${e.byteLength}\n`;
  return sha256Hex(text).slice(0, 32);
}

/** The graph bytes for this checkpoint and options: from the cache, or built and cached (atomic write). */
function modelGraph(ckpt: Checkpoint, cfg: EngineConfig, hooks?: HookSelection): { bytes: Uint8Array; weightsDir: string; cached: boolean; path: string; embeddings: EmbeddingTable | null } {
  const { realFiles, weightsDir: ckptDir } = resolveWeightFiles(ckpt);
  // q8/q4: every weight comes from the quantized store in the cache (made once), not the checkpoint folder
  const quant = cfg.quant ? quantizedWeights(ckpt, cfg.quant.bits, cfg.quant.scheme, cfg.quant.block, cfg.cacheDir, cfg.quiet) : undefined;
  const weightsDir = quant ? quant.dir : ckptDir;
  const key = graphCacheKey(ckpt, realFiles, cfg, quant?.dir ?? null, hooks);
  const path = join(cfg.cacheDir, 'graphs', `${key}.onnx`);
  const embeddings = cfg.embeddings === 'host' ? embeddingTable(ckpt, cfg, realFiles, quant) : null;
  if (existsSync(path)) return { bytes: readFileSync(path), weightsDir, cached: true, path, embeddings };
  const bytes = buildModelGraph(ckpt, cfg, realFiles, quant, hooks);
  try {
    writeFileAtomic(path, bytes);
  } catch {
    // an unwritable cache only costs the rebuild next time
  }
  return { bytes, weightsDir, cached: false, path, embeddings };
}

/** the bytes the graph's Gather would read (graph/weights.ts): the checkpoint's tensor, or its copy in the q8/q4 store */
function embeddingTable(ckpt: Checkpoint, cfg: EngineConfig, realFiles: Map<string, string>, quant: QuantStore | undefined): EmbeddingTable {
  const e = ckpt.tensors.get(tensorName('embed'));
  if (!e) throw new Error(`graph: checkpoint has no tensor ${tensorName('embed')}`);
  const stored = quant ? quant.index.tensors[e.name] : undefined;
  if (quant && !stored) throw new Error(`graph: quantized store has no tensor ${e.name}`);
  const file = quant ? quant.file : realFiles.get(e.file);
  if (!file) throw new Error(`graph: no resolved path for ${e.file}`);
  return { file, offset: stored ? stored.offset : e.offset, dtype: e.dtype, rows: e.shape[0]!, dim: e.shape[1]!, roundBf16: cfg.dtype === 'bf16' };
}

/** the one install instruction, said the same way by this error, `npm run check:gpu` and docs/engine.md (GPU) */
const CUDA_HINT = 'On a host with CUDA 12 + cuDNN 9 run `npm run install:cuda` (installs the provider and checks it loads; docs/engine.md, GPU), or use --device cpu';

/** onnxruntime-node's CUDA provider is a separate download next to its binding; fail early and clearly without it. */
function checkCudaInstalled(): void {
  const bindingDir = join(dirname(createRequire(import.meta.url).resolve('onnxruntime-node')), '..', 'bin', 'napi-v6', process.platform, process.arch);
  if (!existsSync(join(bindingDir, 'libonnxruntime_providers_cuda.so')) && !existsSync(join(bindingDir, 'onnxruntime_providers_cuda.dll'))) {
    throw new SafekeepError(`--device cuda: onnxruntime's CUDA execution provider is not installed (no libonnxruntime_providers_cuda in ${bindingDir}). ${CUDA_HINT}`);
  }
}

/** the one install instruction for --device webgpu, said the same way by this error, the tests, `npm run check:gpu` and docs/engine.md (GPU) */
export const WEBGPU_HINT = "no WebGPU adapter: install your GPU's Vulkan driver; on a machine without a GPU, Mesa's lavapipe "
  + '(Debian: mesa-vulkan-drivers from bookworm-backports, and libvulkan1)';

/**
 * onnxruntime's WebGPU failures as one line: no adapter (Dawn found no Vulkan driver it accepts: none installed, or
 * Mesa before 25 — bookworm's 22.3 lacks shaderUniform*ArrayDynamicIndexing), out of device memory, or anything else
 * by onnxruntime's own first line. `why`: that first line.
 */
export function webgpuError(why: string): SafekeepError {
  if (/WebGPU adapter|No supported adapters/i.test(why)) return new SafekeepError(`--device webgpu: ${WEBGPU_HINT}`);
  if (/out of memory|OutOfMemory|allocat/i.test(why)) return new SafekeepError(`--device webgpu: out of device memory (${why.slice(0, 200)}); use a smaller --dtype (f16, q8, q4), --max-memory, or --device cpu`);
  return new SafekeepError(`--device webgpu: onnxruntime's WebGPU execution provider failed (${why})`);
}

/** `hooks`: the hook points the session's graph exposes (graph/hooks.ts); none by default. */
/** `embeddings`: the table the engine reads the rows from when the host looks them up (EngineConfig.embeddings), else null */
export async function openSession(ckpt: Checkpoint, opts: EngineConfig, hooks?: HookSelection): Promise<{ session: ort.InferenceSession; cached: boolean; embeddings: EmbeddingTable | null }> {
  if (opts.device === 'cuda') checkCudaInstalled();
  if (linearType(opts.dtype) === 'bf16' && opts.device !== 'cuda') {
    throw new SafekeepError(`--dtype ${opts.dtype} runs only with --device cuda (onnxruntime's ${opts.device === 'webgpu' ? 'WebGPU' : 'CPU'} provider has no bf16 MatMul); use --dtype bf16 (bf16-rounded weights, f32 math) or f16`);
  }
  const { bytes, weightsDir, cached, embeddings } = modelGraph(ckpt, opts, hooks);
  const options: ort.InferenceSession.SessionOptions = {
    executionProviders: opts.device === 'cpu' ? ['cpu'] : [opts.device, 'cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: opts.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    extra: {
      session: {
        // workers never spin by default. Measured A/B in one process, 2 threads, decode: spinning within a run (with
        // force_spinning_stop at its end) gained 1.2–1.3× on a lightly loaded machine (load ≤ 4.6 on 2 cores: q8
        // 81 → 101, q4 90 → 117 tok/s) but lost 1.2–2.5× once other processes wanted the cores (load 5–7: q8 49 → 40,
        // f32 23 → 12, q4 64 → 26): a spinning worker keeps a core the descheduled one needs. Users share machines
        // (the guard beside an agent, tests beside a build), so the safe side is the default; `spin` opts in
        // (spinning stops at the end of each run, so no core burns between steps or while idle)
        intra_op: { allow_spinning: opts.spin ? '1' : '0' },
        ...(opts.spin ? { force_spinning_stop: '1' } : {}),
        // q8/q4 need pre-packing: unpacked MatMulNBits dequantizes whole weights per call (measured 2.6 GiB peak and
        // minutes for one 8B-shaped layer), so lowMemory only applies to f32/bf16
        ...(opts.lowMemory && !isQuantized(opts.dtype) ? { disable_prepacking: '1' } : {}),
        inter_op: { allow_spinning: '0' },
        model_external_initializers_file_folder_path: weightsDir,
      },
    },
    // warnings (e.g. nodes placed on CPU under CUDA or WebGPU: shape arithmetic in int64) are noise for users; errors
    // surface as exceptions
    logSeverityLevel: opts.device === 'cpu' ? 3 : 4,
    // webgpu: a step's new K/V slots stay on the device (runtime/device-kv.ts appends them to a device buffer or
    // reads them back through a graph with CPU outputs); every other output comes back to the host
    ...(opts.device === 'webgpu' ? { preferredOutputLocation: { [IO.newKv]: 'gpu-buffer' as const } } : {}),
    ...(opts.profile !== null ? { enableProfiling: true, profileFilePrefix: opts.profile } : {}),
  };
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(bytes, options);
  } catch (e) {
    if (opts.device === 'cpu') throw e;
    const why = String((e as Error).message ?? e).split('\n')[0]!.slice(0, 300);
    if (opts.device === 'webgpu') throw webgpuError(why);
    throw new SafekeepError(`--device cuda: onnxruntime's CUDA execution provider could not start (${why}). ${CUDA_HINT}`);
  }
  return { session, cached, embeddings };
}
