/**
 * The ONNX engine: `createEngine(modelDir, {dtype, device, threads})` → `Engine` (src/engine/types.ts).
 *
 * One session per engine; every call goes through `step()`, a single forward of T new tokens per row on top of an
 * optional KV cache (`KvCache`: per-layer KV buffers with room to grow + where each row's real slots start; kv.ts).
 * The graph reads the buffer in place and returns only the new slots, which `step()` appends (in place while the
 * buffer has room). `forward()` is one step from an empty cache; `generate()` is a prefill step then one step per new
 * token. Because `step()` takes any past KV with its row starts, a shared-prefix cache can feed a stored prefix's KV
 * and run only suffixes.
 */
import * as ort from 'onnxruntime-node';
import { loadCheckpoint } from '../checkpoint/load.ts';
import { ropeInvFreq } from '../checkpoint/rope.ts';
import type { Checkpoint, ModelConfig } from '../checkpoint/types.ts';
import { SafekeepError } from '../util/errors.ts';
import { leftPad, planChunks, positionIds, selectPositions, steeringMatrix } from './batch.ts';
import { chunkedStep } from './chunked.ts';
import type { AttentionImpl, ComputeDType } from './graph.ts';
import { attentionImpl, IO } from './graph.ts';
import { appendKv, capacityBias, emptyKv, kvCapacity, KV_CHUNK, type KvCache } from './kv.ts';
import { chunkTokens, fitsStep, planMemory, RUNTIME_MARGIN, type MemoryPlan, type StepShape } from './memory.ts';
import { defaultDType } from './precision.ts';
import { firstTokenShared, forwardShared, type FirstTokenSharedResult, type SharedForwardOptions, type SharedForwardResult } from './prefix.ts';
import type { QuantScheme } from './quant-store.ts';
import { openSession, type Device } from './session.ts';
import type { Engine, ForwardOptions, ForwardResult, GenerateOptions, GenerateResult, Steering } from './types.ts';

export interface EngineOptions {
  dtype?: ComputeDType;
  device?: Device;
  threads?: number;
  /** graph cache root (default $SAFEKEEP_CACHE or ~/.cache/safekeep) */
  cacheDir?: string;
  /** most padded tokens (B·T) per internal batch (default 4096); sequences are grouped by length under it */
  maxBatchTokens?: number;
  /** weights only in the mmapped files, no pre-packed copy (less RSS, slower; see session.ts) */
  lowMemory?: boolean;
  /** attention kernel: 'mha' (fused, default) or 'matmul' (standard ops); see graph.ts */
  attention?: AttentionImpl;
  /** q8/q4: symmetric or asymmetric blocks (default: session.ts quantScheme) */
  quantScheme?: QuantScheme;
  /**
   * memory budget in bytes (memory.ts `planMemory`): sets maxBatchTokens, groups batches so every step fits, prefills
   * prompts too long for one step in chunks, and sizes the prefix cache (`memoryPlan.prefixCacheBytes`). A budget
   * the weights alone exceed is a SafekeepError before the session opens.
   */
  maxMemory?: number;
  /** bytes the budget leaves to the rest of the process (default: its RSS now + memory.ts RUNTIME_MARGIN) */
  runtimeBytes?: number;
}

export type { KvCache } from './kv.ts';

export interface StepInput {
  /** [B, T] ids (row-major), left-padded for the first step */
  ids: BigInt64Array;
  batch: number;
  width: number;
  /** where each row's real slots start (absolute, counting cached slots) */
  starts: number[];
  past: KvCache | null;
  /** [L+1, d] */
  steer: Float32Array;
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
}

export interface StepOutput {
  /** [L+1, hiddenIndex.length, d] */
  hidden: Float32Array;
  /** [logitsIndex.length, V] */
  logits: Float32Array;
  /** null when the step was run with wantPresent: false; tensors [B, kvH, capacity ≥ length, hd] (kv.ts) */
  present: KvCache | null;
}

const i64 = (xs: readonly number[]) => BigInt64Array.from(xs, (x) => BigInt(x));

export class OnnxEngine implements Engine {
  readonly modelType: string;
  readonly numLayers: number;
  readonly dModel: number;
  readonly vocabSize: number;
  readonly eosIds: number[];
  readonly config: ModelConfig;
  /** whether the graph came from the cache */
  readonly graphCached: boolean;

  /** most padded tokens per internal batch */
  maxBatchTokens = 4096;
  /** the `maxMemory` plan (null: no budget, one step per batch whatever its length) */
  memoryPlan: MemoryPlan | null = null;
  /** attention kernel of the session (for the memory model) */
  attention: AttentionImpl = attentionImpl();

  /** the sliding window of the windowed layers (one size per config), null when every layer attends fully */
  readonly window: number | null;
  /** RoPE inv_freq as f32 when it does not depend on the length (every type but dynamic) */
  private readonly fixedInvFreq: Float32Array | null;

  constructor(readonly checkpoint: Checkpoint, private readonly session: ort.InferenceSession, graphCached: boolean) {
    this.config = checkpoint.config;
    this.window = this.config.attentionWindows.find((w) => w !== null) ?? null;
    this.fixedInvFreq = this.config.rope.type === 'dynamic' ? null : Float32Array.from(ropeInvFreq(this.config));
    this.modelType = this.config.family;
    this.numLayers = this.config.numLayers;
    this.dModel = this.config.hiddenSize;
    this.vocabSize = this.config.vocabSize;
    this.eosIds = [...this.config.eosTokenIds];
    this.graphCached = graphCached;
  }

  /** [B, hd/2] inverse frequencies, row b for a sequence of lengths[b] tokens (only dynamic NTK looks at it) */
  private invFreqRows(B: number, lengths: readonly number[]): Float32Array {
    const half = this.config.headDim / 2;
    const out = new Float32Array(B * half);
    for (let b = 0; b < B; b++) out.set(this.fixedInvFreq ?? Float32Array.from(ropeInvFreq(this.config, lengths[b]!)), b * half);
    return out;
  }

  emptyCache(batch: number): KvCache {
    return emptyKv(this.numLayers, batch, this.config.numKvHeads, this.config.headDim);
  }

  /**
   * One forward of T new slots per row on top of `past` (null = empty cache). The graph reads past's whole buffer
   * (unused capacity masked) and returns only the new slots, which are appended to the cache (kv.ts).
   */
  async step(inp: StepInput): Promise<StepOutput> {
    const { batch: B, width: T } = inp;
    const past = inp.past ?? this.emptyCache(B);
    if (past.batch !== B) throw new Error(`step: cache has ${past.batch} rows, input ${B}`);
    const P = past.length;
    const C = kvCapacity(past);
    const feeds: Record<string, ort.Tensor> = {
      [IO.inputIds]: new ort.Tensor('int64', inp.ids, [B, T]),
      [IO.positionIds]: new ort.Tensor('int64', positionIds(B, T, P, inp.starts), [B, T]),
      [IO.attnBias]: new ort.Tensor('float32', capacityBias(B, T, P, C, inp.starts), [B, T, C + T]),
      [IO.ropeInvFreq]: new ort.Tensor('float32', this.invFreqRows(B, inp.ropeLength ?? inp.starts.map((s) => P + T - s)), [B, this.config.headDim / 2]),
      [IO.steer]: new ort.Tensor('float32', inp.steer, [this.numLayers + 1, this.dModel]),
      [IO.hiddenIndex]: new ort.Tensor('int64', i64(inp.hiddenIndex), [inp.hiddenIndex.length]),
      [IO.logitsIndex]: new ort.Tensor('int64', i64(inp.logitsIndex), [inp.logitsIndex.length]),
    };
    if (this.window !== null) feeds[IO.attnBiasWindow] = new ort.Tensor('float32', capacityBias(B, T, P, C, inp.starts, this.window), [B, T, C + T]);
    for (let l = 0; l < this.numLayers; l++) {
      feeds[IO.pastKey(l)] = past.keys[l]!;
      feeds[IO.pastValue(l)] = past.values[l]!;
    }
    const wantPresent = inp.wantPresent ?? true;
    const fetches: string[] = [IO.hidden, IO.logits];
    if (wantPresent) for (let l = 0; l < this.numLayers; l++) fetches.push(IO.newKey(l), IO.newValue(l));
    const out = await this.session.run(feeds, fetches);
    let present: KvCache | null = null;
    if (wantPresent) {
      const newKeys: Float32Array[] = [];
      const newValues: Float32Array[] = [];
      for (let l = 0; l < this.numLayers; l++) {
        newKeys.push(out[IO.newKey(l)]!.data as Float32Array);
        newValues.push(out[IO.newValue(l)]!.data as Float32Array);
      }
      present = appendKv(inp.past, newKeys, newValues, {
        batch: B, width: T, kvHeads: this.config.numKvHeads, headDim: this.config.headDim, starts: inp.starts,
        reserve: inp.reserve ?? (T === 1 ? KV_CHUNK : 0),
      });
    }
    return {
      hidden: out[IO.hidden]!.data as Float32Array,
      logits: out[IO.logits]!.data as Float32Array,
      present,
    };
  }

  async forward(inputIds: number[][], opts: ForwardOptions = {}): Promise<ForwardResult[]> {
    this.checkIds(inputIds);
    const steer = steeringMatrix(this.numLayers, this.dModel, opts.steer);
    const results: ForwardResult[] = new Array(inputIds.length);
    const L1 = this.numLayers + 1;
    const d = this.dModel;
    const V = this.vocabSize;
    const rows = (sel: ForwardOptions['hiddenAt'], B: number, T: number) =>
      B * (sel === undefined || sel === 'all' ? T : sel === 'last' ? 1 : sel === 'none' ? 0 : Math.min(T, sel.length));
    const fits = this.memoryFits((B, T) => [{ batch: B, width: T, past: 0, hidden: rows(opts.hiddenAt, B, T), logits: rows(opts.logitsAt, B, T) }]);
    for (const chunk of planChunks(inputIds.map((s) => s.length), this.config.numHeads, this.maxBatchTokens, undefined, fits)) {
      const pb = leftPad(chunk.map((i) => inputIds[i]!));
      const hiddenPos = chunk.map((i, b) => selectPositions(opts.hiddenAt, pb.lengths[b]!, `sequence ${i} hiddenAt`));
      const logitPos = chunk.map((i, b) => selectPositions(opts.logitsAt, pb.lengths[b]!, `sequence ${i} logitsAt`));
      const flat = (pos: number[][]) => pos.flatMap((ps, b) => ps.map((p) => b * pb.width + pb.pads[b]! + p));
      const out = await this.prefill({
        ids: pb.ids, batch: pb.batch, width: pb.width, starts: pb.pads, past: null, steer,
        hiddenIndex: flat(hiddenPos), logitsIndex: flat(logitPos), wantPresent: false,
      });
      const N = hiddenPos.reduce((a, p) => a + p.length, 0);
      let hOff = 0;
      let lOff = 0;
      chunk.forEach((i, b) => {
        const n = hiddenPos[b]!.length;
        const hidden = new Float32Array(L1 * n * d);
        for (let l = 0; l < L1; l++) hidden.set(out.hidden.subarray((l * N + hOff) * d, (l * N + hOff + n) * d), l * n * d);
        const m = logitPos[b]!.length;
        results[i] = {
          length: pb.lengths[b]!,
          hiddenPositions: hiddenPos[b]!,
          hidden,
          logitPositions: logitPos[b]!,
          logits: out.logits.slice(lOff * V, (lOff + m) * V),
        };
        hOff += n;
        lOff += m;
      });
    }
    return results;
  }

  /** `fits(B, T)` for planChunks under the memory plan: every step shape of a batch fits (undefined without a plan) */
  memoryFits(shapes: (batch: number, width: number) => StepShape[]): ((batch: number, width: number) => boolean) | undefined {
    const plan = this.memoryPlan;
    if (!plan) return undefined;
    return (B, T) => shapes(B, T).every((s) => fitsStep(this.config, plan, s, this.attention));
  }

  /**
   * `step(inp)` for new tokens that may be too many for one step under the memory plan: one row whose step does not
   * fit is run in chunks (chunked.ts, same results); without a plan, or when it fits, exactly `step(inp)`.
   */
  async prefill(inp: StepInput): Promise<StepOutput> {
    const plan = this.memoryPlan;
    if (!plan || inp.batch !== 1) return this.step(inp);
    const P = inp.past?.length ?? 0;
    const shape = { batch: 1, width: inp.width, past: P, hidden: inp.hiddenIndex.length, logits: inp.logitsIndex.length, present: inp.wantPresent ?? true };
    if (inp.width <= plan.maxChunkTokens && fitsStep(this.config, plan, shape, this.attention)) return this.step(inp);
    const per = { hiddenPerToken: inp.hiddenIndex.length > 1, logitsPerToken: inp.logitsIndex.length > 1 };
    return chunkedStep(this, inp, chunkTokens(this.config, plan, inp.width, P, per, this.attention));
  }

  /**
   * `forward` with shared-prefix KV reuse (prefix.ts): same results within float rounding, each distinct shared
   * prefix computed once (kept in `opts.cache` across calls), plus {promptTokens, computedTokens}.
   */
  async forwardShared(inputIds: number[][], opts: SharedForwardOptions = {}): Promise<SharedForwardResult> {
    this.checkIds(inputIds);
    return forwardShared(this, inputIds, steeringMatrix(this.numLayers, this.dModel, opts.steer), opts);
  }

  /**
   * One greedy token per prompt with shared-prefix reuse: equals `generate(ids, {maxNewTokens: 1,
   * returnPromptLastHidden: true, returnFirstTokenHidden: true, stopIds, steer})` (prefix.ts).
   */
  async firstTokenShared(inputIds: number[][], opts: Omit<SharedForwardOptions, 'hiddenAt' | 'logitsAt'> & { stopIds?: number[] } = {}): Promise<FirstTokenSharedResult> {
    this.checkIds(inputIds);
    return firstTokenShared(this, inputIds, steeringMatrix(this.numLayers, this.dModel, opts.steer), opts);
  }

  async generate(inputIds: number[][], opts: GenerateOptions): Promise<GenerateResult[]> {
    this.checkIds(inputIds);
    if (!Number.isInteger(opts.maxNewTokens) || opts.maxNewTokens < 0) {
      throw new SafekeepError(`maxNewTokens must be a non-negative integer, got ${opts.maxNewTokens}`);
    }
    const steer = steeringMatrix(this.numLayers, this.dModel, opts.steer);
    const results: GenerateResult[] = new Array(inputIds.length);
    // prefill, then decode steps on up to T + maxNewTokens cached slots (past fed + present copied out)
    const fits = this.memoryFits((B, T) => [
      { batch: B, width: T, past: 0, hidden: B, logits: B, present: true },
      { batch: B, width: 1, past: T + opts.maxNewTokens, hidden: B, logits: B, present: true },
    ]);
    for (const chunk of planChunks(inputIds.map((s) => s.length), this.config.numHeads, this.maxBatchTokens, undefined, fits)) {
      // haltAfterPrefill sees the caller's row index, not the index within this internal batch
      const halt = opts.haltAfterPrefill;
      const chunkOpts = halt ? { ...opts, haltAfterPrefill: (b: number, h: Float32Array) => halt(chunk[b]!, h) } : opts;
      const rs = await this.generateBatch(chunk.map((i) => inputIds[i]!), chunkOpts, steer);
      chunk.forEach((i, b) => { results[i] = rs[b]!; });
    }
    return results;
  }

  private async generateBatch(prompts: number[][], opts: GenerateOptions, steer: Float32Array): Promise<GenerateResult[]> {
    const stop = new Set(opts.stopIds ?? this.eosIds);
    const V = this.vocabSize;
    const d = this.dModel;
    const L1 = this.numLayers + 1;
    const pb = leftPad(prompts);
    const B = pb.batch;
    const lastSlots = pb.pads.map((p, b) => b * pb.width + p + pb.lengths[b]! - 1);
    const wantPromptHidden = !!opts.returnPromptLastHidden || !!opts.haltAfterPrefill;
    // positions 'generated': the prompt (prefill) is unsteered, the decode steps steered
    const prefillSteer = opts.steer?.positions === 'generated' ? new Float32Array(steer.length) : steer;
    let out = await this.prefill({
      ids: pb.ids, batch: B, width: pb.width, starts: pb.pads, past: null, steer: prefillSteer,
      hiddenIndex: wantPromptHidden ? lastSlots : [],
      logitsIndex: opts.maxNewTokens > 0 ? lastSlots : [],
      reserve: opts.maxNewTokens, // the KV buffer gets room for the decode steps (up to KV_CHUNK, kv.ts)
    });
    const res: GenerateResult[] = prompts.map(() => ({ generatedIds: [], finish: 'length' }));
    const stepLogits: Float32Array[][] = prompts.map(() => []);
    const done = new Array<boolean>(B).fill(opts.maxNewTokens === 0);
    if (wantPromptHidden) {
      res.forEach((r, b) => {
        const h = new Float32Array(L1 * d);
        for (let l = 0; l < L1; l++) h.set(out.hidden.subarray((l * B + b) * d, (l * B + b + 1) * d), l * d);
        if (opts.returnPromptLastHidden) r.promptLastHidden = h;
        if (opts.haltAfterPrefill?.(b, h)) { done[b] = true; r.finish = 'halted'; }
      });
      if (done.every(Boolean)) {
        if (opts.returnStepLogits) res.forEach((r) => { r.stepLogits = new Float32Array(0); });
        return res;
      }
    }
    const wantFirstHidden = !!opts.returnFirstTokenHidden && opts.maxNewTokens > 0;
    for (let k = 0; ; k++) {
      // choose token k from the logits of the last step (rows = batch)
      const fed = new BigInt64Array(B);
      for (let b = 0; b < B; b++) {
        const r = res[b]!;
        if (!done[b]) {
          const row = out.logits.subarray(b * V, (b + 1) * V);
          const tok = argmax(row);
          r.generatedIds.push(tok);
          if (opts.returnStepLogits) stepLogits[b]!.push(row.slice());
          if (stop.has(tok)) { done[b] = true; r.finish = 'stop'; }
          else if (r.generatedIds.length >= opts.maxNewTokens) done[b] = true;
        }
        fed[b] = BigInt(r.generatedIds.at(-1) ?? 0);
      }
      const needHidden = wantFirstHidden && k === 0;
      if (done.every(Boolean) && !needHidden) break;
      const all = Array.from({ length: B }, (_, b) => b);
      out = await this.step({
        ids: fed, batch: B, width: 1, starts: pb.pads, past: out.present!, steer,
        hiddenIndex: needHidden ? all : [],
        logitsIndex: done.every(Boolean) ? [] : all,
        reserve: opts.maxNewTokens - k - 1,
      });
      if (needHidden) {
        res.forEach((r, b) => {
          if (r.finish === 'halted') return; // no first token was chosen
          const h = new Float32Array(L1 * d);
          for (let l = 0; l < L1; l++) h.set(out.hidden.subarray((l * B + b) * d, (l * B + b + 1) * d), l * d);
          r.firstTokenHidden = h;
        });
        if (done.every(Boolean)) break;
      }
    }
    if (opts.returnStepLogits) {
      res.forEach((r, b) => {
        const rows = stepLogits[b]!;
        const m = new Float32Array(rows.length * V);
        rows.forEach((row, k) => m.set(row, k * V));
        r.stepLogits = m;
      });
    }
    return res;
  }

  private checkIds(inputIds: number[][]): void {
    if (!Array.isArray(inputIds)) throw new SafekeepError('input ids must be a list of token-id lists');
    inputIds.forEach((s, i) => {
      if (!Array.isArray(s) || s.length === 0) throw new SafekeepError(`sequence ${i}: needs at least one token id`);
      s.forEach((id, t) => {
        if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
          throw new SafekeepError(`sequence ${i}, position ${t}: token id ${JSON.stringify(id)} is not in 0..${this.vocabSize - 1}`);
        }
      });
    });
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }
}

/** index of the largest value (first on ties, like torch.argmax) */
export function argmax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

export async function createEngineFromCheckpoint(ckpt: Checkpoint, opts: EngineOptions = {}): Promise<OnnxEngine> {
  // f32 on cpu, f16 weights on cuda unless asked otherwise (precision.ts)
  const dtype = opts.dtype ?? defaultDType(opts.device ?? 'cpu');
  // the plan first: a budget the weights alone exceed fails before any memory is spent
  const plan = opts.maxMemory === undefined ? null : planMemory(ckpt.config, dtype, opts.maxMemory, {
    storage: [...ckpt.tensors.values()].find((t) => t.name.endsWith('mlp.down_proj.weight'))?.dtype ?? 'F32',
    lowMemory: opts.lowMemory, attention: attentionImpl(opts.attention),
    runtimeBytes: opts.runtimeBytes ?? process.memoryUsage().rss + RUNTIME_MARGIN,
  });
  const { session, cached } = await openSession(ckpt, {
    dtype, device: opts.device ?? 'cpu', threads: opts.threads, cacheDir: opts.cacheDir, lowMemory: opts.lowMemory,
    attention: opts.attention, quantScheme: opts.quantScheme,
  });
  const engine = new OnnxEngine(ckpt, session, cached);
  engine.attention = attentionImpl(opts.attention);
  if (plan) {
    engine.memoryPlan = plan;
    engine.maxBatchTokens = plan.maxBatchTokens;
  }
  if (opts.maxBatchTokens !== undefined) {
    if (!Number.isInteger(opts.maxBatchTokens) || opts.maxBatchTokens < 1) throw new SafekeepError(`maxBatchTokens must be a positive integer, got ${opts.maxBatchTokens}`);
    engine.maxBatchTokens = plan ? Math.min(plan.maxBatchTokens, opts.maxBatchTokens) : opts.maxBatchTokens;
  }
  return engine;
}

export async function createEngine(modelDir: string, opts: EngineOptions = {}): Promise<OnnxEngine> {
  return createEngineFromCheckpoint(await loadCheckpoint(modelDir), opts);
}

export type { Steering };
