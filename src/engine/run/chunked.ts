/**
 * Chunked prefill: one step of T new tokens per row run as ⌈T/C⌉ steps of at most C tokens, each on the KV the
 * previous one returned. Attention is causal and the past KV carries every earlier slot, so each token sees exactly
 * what it sees in one step: same hidden states and logits (float rounding only, tested ≤ 1e-5 rel), while the
 * activations and attention scores of a step scale with C instead of T (memory.ts `chunkTokens` picks C under a
 * memory budget), and the masked scores above the diagonal are not computed (`causalChunk`, for long steps).
 * Sliding windows are in each chunk's bias (kv.ts); dynamic-NTK RoPE gets the whole step's length in every chunk.
 */
import type { ModelConfig } from '../../checkpoint/types.ts';
import type { AttentionImpl } from '../graph/config.ts';
import { chunkTokens, fitsStep, type MemoryPlan, type StepShape } from '../runtime/memory.ts';
import type { StepInput, StepOutput, StepSource } from './step.ts';
import { isEditFeed } from './sae-rows.ts';

/** A step runner under a memory plan (null: no budget). */
interface PlannedRunner extends StepSource {
  readonly config: ModelConfig;
  readonly memoryPlan: MemoryPlan | null;
  readonly attention: AttentionImpl;
}

/** `fits(B, T)` for batch planning under the memory plan: every step shape of a batch fits (undefined without a plan) */
export function memoryFits(r: PlannedRunner, shapes: (batch: number, width: number) => StepShape[]): ((batch: number, width: number) => boolean) | undefined {
  const plan = r.memoryPlan;
  if (!plan) return undefined;
  return (B, T) => shapes(B, T).every((s) => fitsStep(r.config, plan, s, r.attention));
}

/** steps of more new tokens than this are split by `causalChunk` */
const CAUSAL_MIN_TOKENS = 512;
/** the chunk size `causalChunk` aims at */
const CAUSAL_CHUNK_TOKENS = 384;

/**
 * The chunk size for T new tokens that saves the masked half of attention: a step's attention kernel computes all
 * T × (P + T) scores, the causally masked upper triangle included, while chunks of C tokens stop each chunk's scores
 * at its own last slot. Measured (SmolLM2 shape, f32, 1 thread, CPU time, best of 3–4 in one process): 1,024 tokens
 * from an empty cache 1.06× faster in chunks of 512, 1.05× in 3 of ~342, 1.085× in 4 of 256; 768 tokens on a 252-token
 * past 1.08× in 2 of 384, 1.07× in 3 of 256; 512 tokens no gain (2 of 256: 0.97×). So steps over 512 tokens are cut
 * into ⌈T / 384⌉ even chunks; T otherwise (one step).
 */
export function causalChunk(T: number): number {
  if (T <= CAUSAL_MIN_TOKENS) return T;
  const n = Math.ceil(T / CAUSAL_CHUNK_TOKENS);
  return Math.ceil(T / n);
}

/**
 * `r.step(inp)` for new tokens that may be many: run in chunks (same results within float rounding) when a step of
 * over 512 tokens saves attention work that way (`causalChunk`), or when under the memory plan one row's step does
 * not fit (the smaller chunk wins); otherwise exactly `r.step(inp)`.
 */
export async function prefill(r: PlannedRunner, inp: StepInput): Promise<StepOutput> {
  const causal = causalChunk(inp.width);
  const run = (chunk: number) => (chunk < inp.width ? chunkedStep(r, inp, chunk) : r.step(inp));
  const plan = r.memoryPlan;
  if (!plan || inp.batch !== 1) return run(causal);
  const P = inp.past?.length ?? 0;
  const shape = { batch: 1, width: inp.width, past: P, hidden: inp.hiddenIndex.length, logits: inp.logitsIndex.length, present: inp.wantPresent ?? true };
  if (inp.width <= plan.maxChunkTokens && fitsStep(r.config, plan, shape, r.attention)) return run(causal);
  const per = { hiddenPerToken: inp.hiddenIndex.length > 1, logitsPerToken: inp.logitsIndex.length > 1 };
  return run(Math.min(causal, chunkTokens(r.config, plan, inp.width, P, per, r.attention)));
}

/** [L+1, N, d] / [M, V] outputs: which chunk and row each requested flat index (b·T + t) lands in */
function route(index: readonly number[], width: number, chunk: number): { chunk: number; local: number; row: number }[] {
  const count = new Map<number, number>();
  return index.map((f) => {
    const b = Math.floor(f / width);
    const t = f - b * width;
    const k = Math.floor(t / chunk);
    const w = Math.min(chunk, width - k * chunk);
    const row = count.get(k) ?? 0;
    count.set(k, row + 1);
    return { chunk: k, local: b * w + (t - k * chunk), row };
  });
}

/**
 * `runner.step(inp)` computed in chunks of at most `chunk` new tokens per row. Returns the same StepOutput: hidden
 * rows in `inp.hiddenIndex` order, logits in `inp.logitsIndex` order, the present KV of the whole step (when asked).
 */
export async function chunkedStep(runner: StepSource, inp: StepInput, chunk: number): Promise<StepOutput> {
  const { batch: B, width: T } = inp;
  if (!Number.isInteger(chunk) || chunk < 1) throw new Error(`chunkedStep: chunk must be a positive integer, got ${chunk}`);
  if (chunk >= T) return runner.step(inp);
  // hook and SAE edits split into chunks only when they broadcast over the tokens (generation's; captures are per step)
  if (inp.hooks && (inp.hooks.selection.capture.length > 0 || Object.entries(inp.hooks.feeds).some(([n, f]) => isEditFeed(n) && f.dims[0] !== 1))) {
    throw new Error('chunkedStep: per-token hook feeds or captures cannot be chunked');
  }
  const L1 = runner.numLayers + 1;
  const d = runner.dModel;
  const V = runner.vocabSize;
  const hRoute = route(inp.hiddenIndex, T, chunk);
  const lRoute = route(inp.logitsIndex, T, chunk);
  const N = inp.hiddenIndex.length;
  const M = inp.logitsIndex.length;
  const hidden = new Float32Array(L1 * N * d);
  const logits = new Float32Array(M * V);
  const chunks = Math.ceil(T / chunk);
  let past = inp.past;
  let last: StepOutput | null = null;
  // dynamic-NTK RoPE: every chunk rotates with the whole step's length, as one step would
  const P0 = inp.past?.length ?? 0;
  const ropeLength = inp.ropeLength ?? inp.starts.map((s) => P0 + T - s);
  for (let k = 0; k < chunks; k++) {
    const off = k * chunk;
    const w = Math.min(chunk, T - off);
    const ids = new BigInt64Array(B * w);
    for (let b = 0; b < B; b++) ids.set(inp.ids.subarray(b * T + off, b * T + off + w), b * w);
    const hSel = hRoute.map((r, i) => ({ ...r, i })).filter((r) => r.chunk === k);
    const lSel = lRoute.map((r, i) => ({ ...r, i })).filter((r) => r.chunk === k);
    const isLast = k === chunks - 1;
    const out = await runner.step({
      ids, batch: B, width: w, starts: inp.starts, past, steer: inp.steer, ...(inp.project ? { project: inp.project } : {}), ropeLength,
      ...(inp.hooks ? { hooks: inp.hooks } : {}),
      hiddenIndex: hSel.map((r) => r.local), logitsIndex: lSel.map((r) => r.local),
      wantPresent: isLast ? (inp.wantPresent ?? true) : true,
      // room in the KV buffer for the chunks still to come (and what the caller reserves after the step; kv.ts caps it)
      ...(isLast ? (inp.reserve !== undefined ? { reserve: inp.reserve } : {}) : { reserve: T - off - w + (inp.reserve ?? 0) }),
    });
    const n = hSel.length;
    for (const r of hSel) {
      for (let l = 0; l < L1; l++) hidden.set(out.hidden.subarray((l * n + r.row) * d, (l * n + r.row + 1) * d), (l * N + r.i) * d);
    }
    for (const r of lSel) logits.set(out.logits.subarray(r.row * V, (r.row + 1) * V), r.i * V);
    past = out.present;
    last = out;
  }
  return { hidden, logits, present: last!.present };
}
