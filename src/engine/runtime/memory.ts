/**
 * A memory model of the engine and the plan that keeps a run under a `--max-memory` budget.
 *
 * Everything is bytes and pure arithmetic on the model config, so a plan can be checked by hand:
 *
 *   peak ≈ runtime + weights + prefix cache + one step
 *
 * - runtime: Node + onnxruntime + tokenizer and data (the process's RSS when the engine is created + a margin);
 * - weights (`weightBytes`): f32/bf16 compute = f32 Gemm weights pre-packed by onnxruntime (peak ≈ WEIGHT_PEAK.f32 ×
 *   f32 bytes, counting the mmapped pages read while packing; BF16/F16 storage is cast to f32 at session creation, so
 *   its f32 size counts, plus the stored pages); `lowMemory` = mmapped stored pages only; q8/q4 = the quantized
 *   store's bytes (`quantStoreBytes`: codes + f32 block scales + packed zero points) times WEIGHT_PEAK.quant (codes
 *   packed into the heap, scales and zero points read in place); in every dtype + the embedding's stored pages;
 * - prefix cache: the LRU of shared-prefix KV (prefix.ts), given a share of what the weights leave;
 * - one step (`stepBytes`): B rows × T new tokens on P cached slots (S = P + T): the per-token activations of one
 *   decoder block (residual, fused q/k/v and gate/up widths), the attention scores (B·H·T·S f32, several live copies
 *   on the 'matmul' path; one probability tensor plus K/V repeated per query head for the fused MultiHeadAttention),
 *   the attention bias, past and present KV, and the outputs (hidden [L+1, N, d], logits [M, V]).
 *
 * The constants below were calibrated with `npm run bench:memory` (peak RSS = VmHWM of fresh child processes) and
 * bench:8b (q4 on the Llama-3.1-8B shape); the figures are in src/engine/README.md ("Memory budget").
 */
import type { DType, ModelConfig } from '../../checkpoint/types.ts';
import { SafekeepError } from '../../util/errors.ts';
import { DEFAULT_QUANT_BLOCK, type AttentionImpl, type QuantBlock, type QuantScheme } from '../graph/config.ts';
import type { ComputeDType } from '../graph/precision.ts';

const F32 = 4;
const GiB = 2 ** 30;
const MiB = 2 ** 20;

/**
 * Default bytes in use besides the engine: Node + onnxruntime + the pipeline's modules measured 256 MiB of VmHWM
 * (tokenizer and 410 rendered agent prompts: 388 MiB). The engine plans with what the process really holds when it
 * is created (RSS) + RUNTIME_MARGIN for what the run adds in JS (rendered prompts, results, GC slack).
 */
export const RUNTIME_BYTES = 256 * MiB;
export const RUNTIME_MARGIN = 128 * MiB;

/**
 * Peak resident weight bytes per byte of the weights as computed: f32 (pre-packed Gemm weights, plus the mmapped
 * pages read while packing and folding the fused q/k/v and gate/up copies; measured 1.31× on the SmolLM2 shape) and
 * q8/q4 (codes pre-packed into the heap, block scales and zero points read in place from the mapped store: bench:8b
 * on the 32-layer Llama-3.1-8B shape at q4 measured 3.87 GiB anonymous + 0.98 GiB of scale/zp pages ≈ 1.0× the store).
 */
export const WEIGHT_PEAK = { f32: 1.35, lowMemory: 1.05, quant: 1.05 } as const;

/**
 * f32 values live per new token in one decoder block, in units of each width: residual stream, norms, attention
 * output and copies (× d), fused q/k/v output, its split, RoPE temporaries and head transposes (× (H + 2·kvH)·hd),
 * gate/up output, split, SiLU temporaries (× I). Calibrated with `npm run bench:memory -- --calibrate` (README).
 */
export const ACTIVATION_UNITS = { residual: 10, qkv: 8, mlp: 10 } as const;

/**
 * live f32 copies of the B·H·T·S attention scores: 'matmul' = repeated bias + scores + probabilities; 'mha' and 'onnx' =
 * probabilities and scratch (calibrated)
 */
export const SCORE_COPIES: Record<AttentionImpl, number> = { matmul: 3, mha: 1.5, onnx: 1.5 };

/** per-step bytes that do not scale with the shape (onnxruntime's per-run allocations, first arena blocks) */
export const STEP_FIXED = 64 * MiB;

/**
 * onnxruntime's CPU arena (BFC) grows by regions that double in size and never shrinks, so it can hold up to ~2× the
 * live bytes of its largest step (bench:memory: a 3 GB budget planned with 1.3 here peaked 301 MiB over it, the
 * growth coming from generate's prefill after forward's steps had shaped the arena).
 */
export const ARENA_SLACK = 2;

/** share of the bytes left after weights and runtime given to the prefix KV cache, and its ceiling */
export const PREFIX_CACHE_SHARE = 0.25;
export const PREFIX_CACHE_MAX = 1 * GiB;

/** most padded tokens per step even when memory allows more (no throughput gain above, measured) */
const MAX_STEP_TOKENS = 4096;

export const formatBytes = (n: number): string =>
  n >= GiB ? `${(n / GiB).toFixed(2)} GiB` : n >= 10 * MiB ? `${(n / MiB).toFixed(0)} MiB` : n >= MiB ? `${(n / MiB).toFixed(1)} MiB` : `${(n / 1024).toFixed(0)} KiB`;

interface Linear {
  name: string;
  /** [N, K]: N outputs, K inputs (HF [out, in]) */
  shape: [number, number];
}

/** The linear layers as the graph runs them (q/k/v and gate/up row-concatenated, lm_head). */
function linearShapes(c: ModelConfig): Linear[] {
  const { hiddenSize: d, numHeads: H, numKvHeads: kvH, headDim: hd, intermediateSize: I } = c;
  const out: Linear[] = [];
  for (let l = 0; l < c.numLayers; l++) {
    out.push({ name: `layers.${l}.qkv`, shape: [(H + 2 * kvH) * hd, d] });
    out.push({ name: `layers.${l}.o`, shape: [d, H * hd] });
    out.push({ name: `layers.${l}.gate_up`, shape: [2 * I, d] });
    out.push({ name: `layers.${l}.down`, shape: [d, I] });
  }
  out.push({ name: 'lm_head', shape: [c.vocabSize, d] });
  return out;
}

/** parameters of the linear layers (lm_head counted once, tied or not) */
export const linearParams = (c: ModelConfig): number => linearShapes(c).reduce((s, x) => s + x.shape[0] * x.shape[1], 0);

/** parameters outside the linear layers: embedding (when untied: its own tensor), norms, q/k/v biases */
export function otherParams(c: ModelConfig): number {
  const { hiddenSize: d, numHeads: H, numKvHeads: kvH, headDim: hd, numLayers: L } = c;
  const perLayer = 2 * d + (c.qkNorm ? 2 * hd : 0) + (c.qkvBias ? (H + 2 * kvH) * hd : 0);
  return L * perLayer + d + (c.tieWordEmbeddings ? 0 : c.vocabSize * d);
}

/**
 * Bytes of a linear [N, K] in the quantized store, blocks of `block` along K: codes N·⌈K/block⌉·block·bits/8, f32
 * scales N·⌈K/block⌉·4, asymmetric zero points N·⌈⌈K/block⌉·bits/8⌉ (packed per row, quant.ts; none when symmetric).
 */
export function quantLinearBytes([N, K]: [number, number], bits: 4 | 8, asym = true, block = 32): number {
  const blocks = Math.ceil(K / block);
  const codes = N * blocks * block * bits / 8;
  const scales = N * blocks * F32;
  const zp = asym ? N * Math.ceil((blocks * bits) / 8) : 0;
  return codes + scales + zp;
}

/** The store's layout (engine-config.ts: symmetric blocks of 32 unless SAFEKEEP_QUANT_SCHEME / _BLOCK say otherwise). */
export interface QuantLayout {
  scheme: QuantScheme;
  block: QuantBlock;
}

/** what the engine stores by default (engine-config.ts: symmetric, DEFAULT_QUANT_BLOCK) */
export const DEFAULT_QUANT_LAYOUT: QuantLayout = { scheme: 'sym', block: DEFAULT_QUANT_BLOCK };

export const quantStoreBytes = (c: ModelConfig, bits: 4 | 8, layout: QuantLayout = DEFAULT_QUANT_LAYOUT): number =>
  linearShapes(c).reduce((s, x) => s + quantLinearBytes(x.shape, bits, layout.scheme === 'asym', layout.block), 0);

/** parameters resident outside the linear layers: norms and q/k/v biases (embedding rows are gathered from the mapped file as touched) */
export const normParams = (c: ModelConfig): number => otherParams(c) - (c.tieWordEmbeddings ? 0 : c.vocabSize * c.hiddenSize);

interface WeightOptions {
  /** the checkpoint's storage dtype (default F32) */
  storage?: DType;
  /** weights only in the mmapped files (f32/bf16 only; q8/q4 are always packed) */
  lowMemory?: boolean;
  /** q8/q4: the store's scheme and block (default DEFAULT_QUANT_LAYOUT) */
  quant?: QuantLayout;
  /** the host reads the embedding rows by position (EngineConfig.embeddings = 'host'): the table is never mapped */
  hostEmbeddings?: boolean;
}

const storageBytes = (s: DType | undefined): number => (s === 'BF16' || s === 'F16' ? 2 : 4);

/**
 * Peak resident weight bytes of a session: the linear layers as computed (f32 pre-packed, or the q8/q4 store) times
 * WEIGHT_PEAK, plus norms and biases in storage, plus the embedding's stored bytes when the graph gathers it: a Gather
 * on the mapped file, and read-ahead around the rows a long workload uses eventually pages all of it in (bench:8b);
 * read by the host (`hostEmbeddings`, the CPU's default) it is never mapped.
 */
export function weightBytes(c: ModelConfig, dtype: ComputeDType, o: WeightOptions = {}): number {
  const sb = storageBytes(o.storage);
  const other = (normParams(c) + (o.hostEmbeddings ? 0 : c.vocabSize * c.hiddenSize)) * sb;
  if (dtype === 'q8' || dtype === 'q4') return WEIGHT_PEAK.quant * quantStoreBytes(c, dtype === 'q8' ? 8 : 4, o.quant) + other;
  const lin = linearParams(c);
  if (o.lowMemory) return WEIGHT_PEAK.lowMemory * lin * sb + other;
  // f32 Gemm weights (storage cast to f32 and folded), plus the stored pages read once when they are not f32
  return WEIGHT_PEAK.f32 * lin * F32 + (sb !== F32 ? lin * sb : 0) + other;
}

/** KV bytes per cached token of one row: 2 (K, V) · L · kvH · hd · element bytes (4 for an f32 KV, 2 for f16) */
export const kvBytesPerToken = (c: ModelConfig, element = F32): number => 2 * c.numLayers * c.numKvHeads * c.headDim * element;

/** One step: `batch` rows × `width` new tokens on `past` cached slots; `hidden`/`logits` = rows returned. */
export interface StepShape {
  batch: number;
  width: number;
  past: number;
  /** N: hidden-state rows returned (each [L+1, d]) */
  hidden: number;
  /** M: logit rows returned (each [V]) */
  logits: number;
  /** the present KV is copied out (generate, prefix steps, chunked prefill) */
  present?: boolean;
  /**
   * intervention sets fed one per row (0: one set broadcast): the scheduler's stacked steer [S, (L+1)·d],
   * projection dirs [S, (L+1)·d] and values [S, L+1], when the rows of a decode step steer or project differently
   */
  sets?: number;
  /** bytes of one stored K/V element (the engine's kvDType: 4 f32, 2 f16; default 4) */
  kvElement?: number;
}

/** per-new-token activation bytes of one decoder block (ACTIVATION_UNITS × widths × 4) */
function activationBytesPerToken(c: ModelConfig): number {
  const u = ACTIVATION_UNITS;
  return F32 * (u.residual * c.hiddenSize + u.qkv * (c.numHeads + 2 * c.numKvHeads) * c.headDim + u.mlp * c.intermediateSize);
}

/**
 * Bytes of one step above weights and runtime:
 *   STEP_FIXED + ARENA_SLACK · ( B·T·activation + SCORE_COPIES · B·H·T·S·4 [+ mha: 2·B·H·S·hd·4 repeated K/V] + B·T·S·4 bias
 *     + 2·B·kvH·S·hd·4 (this layer's K/V) )
 *   + past KV B·P·kv (fed from JS) + present KV 2·B·S·kv when copied out (onnxruntime's outputs + the JS copies)
 *     + B·T·kv (the new slots stacked into the one `new_kv` output: a third copy while the step runs)
 *   + 3 · (L+1)·N·d·4 (gathered per layer, concatenated, copied to JS) + 2 · M·V·4 (in onnxruntime, copied to JS)
 * where kv = kvBytesPerToken at the KV's element bytes (the graph widens an f16 KV to f32 inside one layer, so the
 * arena's per-layer K/V stays f32). A config with sliding-window layers feeds a second bias (attn_bias_window), and its
 * copy repeated per query head: + ARENA_SLACK · (B·T·S·4 + B·H·T·S·4).
 */
export function stepBytes(c: ModelConfig, s: StepShape, attention: AttentionImpl = 'onnx'): number {
  const { batch: B, width: T, past: P } = s;
  const S = P + T;
  const H = c.numHeads;
  const hd = c.headDim;
  const kv = kvBytesPerToken(c, s.kvElement ?? F32);
  const scores = SCORE_COPIES[attention] * B * H * T * S * F32 + (attention === 'mha' && H !== c.numKvHeads ? 2 * B * H * S * hd * F32 : 0);
  const windowBias = c.attentionWindows.some((w) => w !== null) ? B * T * S * F32 + B * H * T * S * F32 : 0;
  const arena = B * T * activationBytesPerToken(c) + scores + B * T * S * F32 + windowBias + 2 * B * c.numKvHeads * S * hd * F32;
  const kvBytes = B * P * kv + (s.present ? 2 * B * S * kv + B * T * kv : 0);
  const outputs = 3 * (c.numLayers + 1) * s.hidden * c.hiddenSize * F32 + 2 * s.logits * c.vocabSize * F32;
  const sets = (s.sets ?? 0) * (2 * (c.numLayers + 1) * c.hiddenSize + (c.numLayers + 1)) * F32;
  return STEP_FIXED + ARENA_SLACK * arena + kvBytes + outputs + sets;
}

export interface MemoryPlan {
  budgetBytes: number;
  /** runtime + weights: what is resident before any step */
  baseBytes: number;
  weightBytes: number;
  runtimeBytes: number;
  /** bytes of shared-prefix KV the LRU may hold */
  prefixCacheBytes: number;
  /** bytes one step may use (budget − base − prefix cache) */
  stepBytes: number;
  /** most padded tokens B·T per step (the per-token terms alone; the score term is checked per batch by `fitsStep`) */
  maxBatchTokens: number;
  /** most new tokens T per step of one prompt from an empty cache: longer prompts are prefilled in chunks */
  maxChunkTokens: number;
  /** bytes of one stored K/V element (4 f32, 2 f16): every step the plan checks counts the KV at these */
  kvElement: number;
}

interface PlanOptions extends WeightOptions {
  attention?: AttentionImpl;
  /** bytes in use besides the engine (default RUNTIME_BYTES; the engine passes its process's RSS + RUNTIME_MARGIN) */
  runtimeBytes?: number;
  /** bytes of one stored K/V element (the engine's kvDType: 4 f32, 2 f16; default 4) */
  kvElement?: number;
}

/** largest integer x in [lo, hi] with ok(x) (ok monotone decreasing), or lo − 1 */
function largest(lo: number, hi: number, ok: (x: number) => boolean): number {
  if (!ok(lo)) return lo - 1;
  while (lo < hi) {
    const mid = Math.floor((lo + hi + 1) / 2);
    if (ok(mid)) lo = mid; else hi = mid - 1;
  }
  return lo;
}

/**
 * The plan for a budget: runtime and weights first (a SafekeepError when they alone exceed it, or leave no room for
 * a step of 64 tokens), then the prefix cache (PREFIX_CACHE_SHARE of the rest, at most PREFIX_CACHE_MAX), then steps.
 * maxBatchTokens and maxChunkTokens count one returned hidden row and one logit row per sequence (extraction).
 */
export function planMemory(c: ModelConfig, dtype: ComputeDType, budgetBytes: number, o: PlanOptions = {}): MemoryPlan {
  if (!Number.isFinite(budgetBytes) || budgetBytes <= 0) throw new SafekeepError(`--max-memory must be a positive size, got ${budgetBytes}`);
  const attention = o.attention ?? 'onnx';
  const kvElement = o.kvElement ?? F32;
  const weights = weightBytes(c, dtype, o);
  const runtime = o.runtimeBytes ?? RUNTIME_BYTES;
  const base = runtime + weights;
  const what = `${c.family} ${c.numLayers} layers, d_model ${c.hiddenSize}, ${dtype}${o.lowMemory ? ' lowMemory' : ''}`;
  if (weights >= budgetBytes) {
    throw new SafekeepError(`--max-memory ${formatBytes(budgetBytes)} is too small: the weights alone need ${formatBytes(weights)} (${what}) plus ${formatBytes(runtime)} runtime; raise it${dtype === 'q4' ? '' : dtype === 'q8' ? ' or use --dtype q4' : ' or use a smaller --dtype (q8, q4)'}`);
  }
  if (base >= budgetBytes) {
    throw new SafekeepError(`--max-memory ${formatBytes(budgetBytes)} is too small: the weights (${formatBytes(weights)}, ${what}) and the runtime (${formatBytes(runtime)}: the process so far and a margin) need ${formatBytes(base)} before any step; raise it`);
  }
  const free = budgetBytes - base;
  const minStep = stepBytes(c, { batch: 1, width: 64, past: 0, hidden: 1, logits: 1, kvElement }, attention);
  if (free < minStep) {
    throw new SafekeepError(`--max-memory ${formatBytes(budgetBytes)} is too small: the weights need ${formatBytes(weights)} (${what}) plus ${formatBytes(runtime)} runtime, leaving ${formatBytes(free)}, less than one 64-token step (${formatBytes(minStep)})`);
  }
  const prefixCacheBytes = Math.floor(Math.min(PREFIX_CACHE_MAX, PREFIX_CACHE_SHARE * (free - minStep)));
  const step = free - prefixCacheBytes;
  const perToken = (n: number) => stepBytes(c, { batch: n, width: 1, past: 0, hidden: 1, logits: 1, kvElement }, attention) <= step;
  const maxBatchTokens = Math.max(64, largest(1, MAX_STEP_TOKENS, perToken));
  const chunk = (t: number) => stepBytes(c, { batch: 1, width: t, past: 0, hidden: 1, logits: 1, present: true, kvElement }, attention) <= step;
  const maxChunkTokens = Math.max(1, largest(1, maxBatchTokens, chunk));
  return { budgetBytes, baseBytes: base, weightBytes: weights, runtimeBytes: runtime, prefixCacheBytes, stepBytes: step, maxBatchTokens, maxChunkTokens, kvElement };
}

/** One line for stderr and summaries. */
export function describePlan(p: MemoryPlan): string {
  return `memory plan for --max-memory ${formatBytes(p.budgetBytes)}: weights ≈ ${formatBytes(p.weightBytes)} + runtime ${formatBytes(p.runtimeBytes)}, `
    + `prefix cache ${formatBytes(p.prefixCacheBytes)}, steps ≤ ${formatBytes(p.stepBytes)} (≤ ${p.maxBatchTokens} tokens; prompts over ${p.maxChunkTokens} tokens prefilled in chunks)`;
}

/** The plan as a manifest records it (whole bytes). */
export function planRecord(p: MemoryPlan): Record<string, number> {
  return Object.fromEntries(Object.entries(p).map(([k, v]) => [k, Math.round(v)]));
}

/** Does a step of this shape fit the plan's step bytes? (its KV at the plan's element bytes unless the shape says) */
export function fitsStep(c: ModelConfig, plan: Pick<MemoryPlan, 'stepBytes'> & Partial<Pick<MemoryPlan, 'kvElement'>>, s: StepShape, attention: AttentionImpl = 'onnx'): boolean {
  return stepBytes(c, { kvElement: plan.kvElement ?? F32, ...s }, attention) <= plan.stepBytes;
}

/**
 * New tokens per chunk for prefilling one row of `length` tokens on `past` cached slots: the largest T ≤
 * maxChunkTokens whose LAST chunk (the widest span, S = past + length) fits. SafekeepError when not even one token fits
 * (the KV of the prompt alone is too big for the budget).
 */
export function chunkTokens(c: ModelConfig, plan: Pick<MemoryPlan, 'stepBytes' | 'maxChunkTokens' | 'budgetBytes'> & Partial<Pick<MemoryPlan, 'kvElement'>>, length: number, past: number,
  out: { hiddenPerToken: boolean; logitsPerToken: boolean }, attention: AttentionImpl = 'onnx'): number {
  const total = past + length;
  const kvElement = plan.kvElement ?? F32;
  const shape = (t: number): StepShape => ({
    batch: 1, width: t, past: total - t, present: true, kvElement,
    hidden: out.hiddenPerToken ? t : 1, logits: out.logitsPerToken ? t : 1,
  });
  const t = largest(1, Math.min(length, plan.maxChunkTokens), (x) => fitsStep(c, plan, shape(x), attention));
  if (t < 1) {
    throw new SafekeepError(`--max-memory ${formatBytes(plan.budgetBytes)} is too small for a prompt of ${total} tokens: its KV cache alone is ${formatBytes(total * kvBytesPerToken(c, kvElement))} and one step on it needs ${formatBytes(stepBytes(c, shape(1), attention))}, ${formatBytes(plan.stepBytes)} are left after the weights`);
  }
  return t;
}

const UNITS: Record<string, number> = { b: 1, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12, kib: 2 ** 10, mib: MiB, gib: GiB, tib: 2 ** 40 };

/** '6GB' (10⁹), '6GiB' (2³⁰), '500MB', '1.5 GiB', '123456' (bytes) → bytes; anything else is a SafekeepError. */
export function parseBytes(s: string, flag = '--max-memory'): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(s);
  const unit = m ? (m[2] ?? '').toLowerCase() || 'b' : '';
  const k = UNITS[unit];
  if (!m || k === undefined) throw new SafekeepError(`${flag} must be a size like 6GB, 6GiB or 500MB, got '${s}'`);
  const n = Math.floor(Number(m[1]) * k);
  if (!(n > 0)) throw new SafekeepError(`${flag} must be a positive size, got '${s}'`);
  return n;
}
