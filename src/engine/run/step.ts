/**
 * One step of the model: T new tokens per row on top of an optional KV cache (kv.ts). `Stepper` is what the run
 * layer (chunked prefill, shared-prefix reuse, generation) needs from an engine, so those modules depend on this
 * interface and never on the engine class.
 */
import type * as ort from 'onnxruntime-node';
import type { KvArray, KvDType } from '../runtime/kv.ts';
import type { ModelConfig } from '../../checkpoint/types.ts';
import type { HookSelection } from '../graph/hooks.ts';
import type { KvCache } from '../runtime/kv.ts';
import type { MemoryPlan, StepShape } from '../runtime/memory.ts';

export interface StepInput {
  /** [B, T] ids (row-major), left-padded for the first step */
  ids: BigInt64Array;
  batch: number;
  width: number;
  /** where each row's real slots start (absolute, counting cached slots) */
  starts: number[];
  past: KvCache | null;
  /**
   * [L+1, d]: row l added to hidden[l] of every row; or one such set per batch row, [B, L+1, d] (row b's set on its T
   * tokens: a decode step whose sequences are steered differently)
   */
  steer: Float32Array;
  /**
   * projections set after the adds (ablate/clamp, run/batch.ts `interventionInputs`): dir [L+1, d] and value [L+1]
   * for every row, or one set per batch row ([B, L+1, d], [B, L+1]); absent = none
   */
  project?: { dir: Float32Array; value: Float32Array };
  /** flat indices b·T + t of the new slots whose hidden states / logits are wanted */
  hiddenIndex: number[];
  logitsIndex: number[];
  /**
   * return the present KV (default true): `past` extended by the new slots, written into past's buffer in place when
   * it has room (kv.ts; the `past` value itself stays valid), else into a new buffer. false skips fetching the new slots.
   */
  wantPresent?: boolean;
  /**
   * slots the caller expects to append after this step: when the step allocates a new KV buffer it leaves room for
   * min(reserve, KV_CHUNK) of them. Default: KV_CHUNK for a single-token (decode) step, 0 otherwise.
   */
  reserve?: number;
  /**
   * per row, the sequence length dynamic-NTK RoPE is computed for (rope.ts; other RoPE types ignore it). Default: the
   * row's last position in this step + 1 (past + T − starts[b]), as transformers does for one forward. Chunked
   * prefill passes the whole prompt's length so its chunks equal one step; right-padded rows pass their real length.
   */
  ropeLength?: number[];
  /** named hook points (graph/hooks.ts): the step runs the graph with this selection (absent = the plain graph) */
  hooks?: StepHooks;
  /**
   * a decode step (T = 1, a past with room for the slot) on an engine that keeps KV on its device (`kvOnDevice`):
   * the present's buffers stay on the device (device tensors; never read on the host). Ignored elsewhere.
   */
  keepOnDevice?: boolean;
}

/** A step's hook points: which the graph exposes and the edit inputs (graph/hook-edit.ts) by graph input name. */
export interface StepHooks {
  selection: HookSelection;
  feeds: Record<string, { data: Float32Array; dims: number[] }>;
}

export interface StepOutput {
  /** [L+1, hiddenIndex.length, d] */
  hidden: Float32Array;
  /** [logitsIndex.length, V] */
  logits: Float32Array;
  /** null when the step was run with wantPresent: false; tensors [B, kvH, capacity ≥ length, hd] (kv.ts) */
  present: KvCache | null;
  /** with `hooks`: each captured point's output by graph output name (graph/hooks.ts HOOK_IO.output) */
  hooks?: Record<string, { data: Float32Array; dims: number[] }>;
}

/** The least a chunked step needs: the shapes and `step`. */
export interface StepSource {
  readonly numLayers: number;
  readonly dModel: number;
  readonly vocabSize: number;
  step(inp: StepInput): Promise<StepOutput>;
}

/** What the run layer needs from an engine: steps, the memory plan's limits, and the model's shapes. */
export interface Stepper extends StepSource {
  readonly config: ModelConfig;
  readonly eosIds: readonly number[];
  /** most padded tokens per internal batch */
  readonly maxBatchTokens: number;
  /** the `maxMemory` plan (null: no budget) */
  readonly memoryPlan: MemoryPlan | null;
  /** the KV cache's element type (the past inputs' and new_kv's; default f32) */
  readonly kvDType?: KvDType;
  /** whether decode steps may keep their KV on the device (`StepInput.keepOnDevice`; absent: never) */
  readonly kvOnDevice?: boolean;
  /** device K/V read back to the host (the scheduler's re-layouts of a device decode buffer); with kvOnDevice */
  readonly deviceKv?: { readback(ts: readonly ort.Tensor[]): Promise<KvArray[]> };
  /** `step` that may chunk new tokens too many for one step under the memory plan (same results) */
  prefill(inp: StepInput): Promise<StepOutput>;
  /** `fits(B, T)` for batch planning: every step shape of a batch fits the memory plan (undefined without one) */
  memoryFits(shapes: (batch: number, width: number) => StepShape[]): ((batch: number, width: number) => boolean) | undefined;
}

/** Rows from..from+n of a step's hidden output [L+1, N, d] → [L+1, n, d] (one sequence's positions). */
export function hiddenRows(hidden: Float32Array, layers: number, N: number, d: number, from: number, n: number): Float32Array {
  const out = new Float32Array(layers * n * d);
  for (let l = 0; l < layers; l++) out.set(hidden.subarray((l * N + from) * d, (l * N + from + n) * d), l * n * d);
  return out;
}
