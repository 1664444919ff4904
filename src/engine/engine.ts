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
import { tensorName } from '../checkpoint/tensors.ts';
import type { Checkpoint, ModelConfig } from '../checkpoint/types.ts';
import { SafekeepError } from '../util/errors.ts';
import { resolveEngineConfig, type AttentionImpl, type EngineConfig, type EngineOptions } from './engine-config.ts';
import { HOOK_IO, hookSelectionKey, type HookSelection } from './graph/hooks.ts';
import { SAE_IO } from './graph/sae-splice.ts';
import { IO, newKvOf } from './graph/io.ts';
import { runWithCache, type RunWithCacheOptions, type RunWithCacheResult } from './run/hooked.ts';
import { callInterventions, interventionInputs, positionIds } from './run/batch.ts';
import { memoryFits, prefill } from './run/chunked.ts';
import { checkIds, forward } from './run/forward.ts';
import { generate } from './run/generate.ts';
import { Scheduler, type SchedulerOptions } from './run/scheduler.ts';
import { firstTokenShared, forwardShared } from './run/prefix.ts';
import type { StepInput, StepOutput, Stepper } from './run/step.ts';
import { appendKv, capacityBias, emptyKv, kvBytes, kvCapacity, kvTensor, KV_CHUNK, type KvArray, type KvCache, type KvDType } from './runtime/kv.ts';
import { lookupEmbeddings, type EmbeddingTable } from './runtime/host-embeddings.ts';
import { countRun, emptyTransfer, type TransferCounter } from './runtime/transfer.ts';
import { DEVICE_SESSION, DeviceKv, onDevice } from './runtime/device-kv.ts';
import { DeviceBias } from './runtime/device-bias.ts';
import { planMemory, RUNTIME_MARGIN, type MemoryPlan, type StepShape } from './runtime/memory.ts';
import { openSession, webgpuError } from './runtime/session.ts';
import type { Engine, FirstTokenSharedOptions, FirstTokenSharedResult, ForwardOptions, ForwardResult, GenerateOptions, GenerateResult, SharedForwardOptions, SharedForwardResult } from './types.ts';

const i64 = (xs: readonly number[]) => BigInt64Array.from(xs, (x) => BigInt(x));

/** sessions of hook-point graphs an engine keeps open at once (each pre-packs its own copy of the weights) */
export const HOOK_SESSIONS = 2;

export class OnnxEngine implements Engine, Stepper {
  readonly modelType: string;
  readonly numLayers: number;
  readonly dModel: number;
  readonly vocabSize: number;
  readonly eosIds: number[];
  readonly config: ModelConfig;
  /** whether the graph came from the cache */
  readonly graphCached: boolean;

  /** most padded tokens per internal batch (a tuning knob: callers may lower it between calls) */
  maxBatchTokens: number;
  /** the `maxMemory` plan (null: no budget, one step per batch whatever its length) */
  readonly memoryPlan: MemoryPlan | null;
  /** attention kernel of the session (for the memory model) */
  readonly attention: AttentionImpl;
  /**
   * The continuous-batching loop every generation goes through (run/scheduler.ts): its knobs (`stepTokens`,
   * `maxRunning`, `packTokens`), its `stats` (with its own clocks, `stats.seconds`) and the automatic prefix cache
   * (`prefixStore`).
   */
  readonly scheduler: Scheduler;
  /**
   * host ↔ device bytes of every session run (runtime/transfer.ts: host tensors fed to a device session and read back
   * from it); stays 0 on the CPU. `npm run bench:decode-step -- --contexts` reads it per decode step.
   */
  readonly transfer: TransferCounter = emptyTransfer();
  /** whether the session runs on a device (cuda, webgpu): its host tensors cross to it */
  private get onDevice(): boolean {
    return (this.engineConfig?.device ?? 'cpu') !== 'cpu';
  }

  /** the sliding window of the windowed layers (one size per config), null when every layer attends fully */
  readonly window: number | null;
  /** the projection inputs of a step without ablate/clamp (zero directions: the graph leaves hidden states as they are) */
  private readonly noProjection: { dir: Float32Array; value: Float32Array };
  /** RoPE inv_freq as f32 when it does not depend on the length (every type but dynamic) */
  private readonly fixedInvFreq: Float32Array | null;

  /** the table a step's embedding rows are read from (runtime/host-embeddings.ts), or null: the graph gathers them */
  private readonly embeddingTable: EmbeddingTable | null;

  /** the resolved options the session was opened with (to open the graphs with hook points); absent: no hooks */
  private readonly engineConfig: EngineConfig | null;
  /** sessions of graphs with hook points, by their selection's key, opened on first use */
  private readonly hookSessions = new Map<string, Promise<ort.InferenceSession>>();

  constructor(readonly checkpoint: Checkpoint, private readonly session: ort.InferenceSession, graphCached: boolean,
    run: { attention: AttentionImpl; memoryPlan?: MemoryPlan | null; maxBatchTokens?: number; profiling?: boolean; engineConfig?: EngineConfig; scheduler?: SchedulerOptions; embeddings?: EmbeddingTable | null }) {
    this.engineConfig = run.engineConfig ?? null;
    this.embeddingTable = run.embeddings ?? null;
    if ((this.embeddingTable !== null) !== (this.engineConfig?.embeddings === 'host')) throw new Error('OnnxEngine: a host embedding table goes with engineConfig.embeddings = host, and only then');
    this.attention = run.attention;
    this.profiling = run.profiling ?? false;
    this.memoryPlan = run.memoryPlan ?? null;
    this.maxBatchTokens = run.maxBatchTokens ?? 4096;
    this.config = checkpoint.config;
    this.window = this.config.attentionWindows.find((w) => w !== null) ?? null;
    this.fixedInvFreq = this.config.rope.type === 'dynamic' ? null : Float32Array.from(ropeInvFreq(this.config));
    this.modelType = this.config.family;
    this.numLayers = this.config.numLayers;
    this.dModel = this.config.hiddenSize;
    this.vocabSize = this.config.vocabSize;
    this.eosIds = [...this.config.eosTokenIds];
    this.graphCached = graphCached;
    this.noProjection = { dir: new Float32Array((this.numLayers + 1) * this.dModel), value: new Float32Array(this.numLayers + 1) };
    this.deviceKv = new DeviceKv(this.numLayers, this.config.numKvHeads, this.config.headDim, this.kvDType, this.transfer, { window: this.window });
    this.deviceBias = new DeviceBias({ ...DEVICE_SESSION, preferredOutputLocation: 'gpu-buffer' }, this.window, this.transfer);
    this.scheduler = new Scheduler(this, run.scheduler);
  }

  /** whether decode steps keep their KV on the device (webgpu: runtime/device-kv.ts) */
  get kvOnDevice(): boolean {
    return this.engineConfig?.device === 'webgpu';
  }

  /** [B, hd/2] inverse frequencies, row b for a sequence of lengths[b] tokens (only dynamic NTK looks at it) */
  private invFreqRows(B: number, lengths: readonly number[]): Float32Array {
    const half = this.config.headDim / 2;
    const out = new Float32Array(B * half);
    for (let b = 0; b < B; b++) out.set(this.fixedInvFreq ?? Float32Array.from(ropeInvFreq(this.config, lengths[b]!)), b * half);
    return out;
  }

  /**
   * The steer / projection inputs of a step: one set (S = 1, fed as it is) or one per batch row, repeated over the
   * row's T tokens (S = B·T; graph/intervene.ts). The steer and the projection choose independently.
   */
  private interventionFeeds(inp: StepInput): Record<string, ort.Tensor> {
    const { batch: B, width: T } = inp;
    const L1 = this.numLayers + 1;
    const d = this.dModel;
    const sets = (data: Float32Array, per: number, what: string): { data: Float32Array; sets: number } => {
      if (data.length === per) return { data, sets: 1 };
      if (data.length !== B * per) throw new Error(`step: ${what} holds ${data.length / per} sets for ${B} rows`);
      if (T === 1) return { data, sets: B };
      const out = new Float32Array(B * T * per);
      for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) out.set(data.subarray(b * per, (b + 1) * per), (b * T + t) * per);
      return { data: out, sets: B * T };
    };
    const steer = sets(inp.steer, L1 * d, 'steer');
    const dir = sets(inp.project?.dir ?? this.noProjection.dir, L1 * d, 'intervene_dir');
    const value = sets(inp.project?.value ?? this.noProjection.value, L1, 'intervene_value');
    if (dir.sets !== value.sets) throw new Error(`step: ${dir.sets} projection directions, ${value.sets} values`);
    return {
      [IO.steer]: new ort.Tensor('float32', steer.data, [steer.sets, L1 * d]),
      [IO.interveneDir]: new ort.Tensor('float32', dir.data, [dir.sets, L1 * d]),
      [IO.interveneValue]: new ort.Tensor('float32', value.data, [value.sets, L1]),
    };
  }

  /** the KV cache's element type (EngineConfig.kvDType; f32 for an engine made without one) */
  get kvDType(): KvDType {
    return this.engineConfig?.kvDType ?? 'f32';
  }

  emptyCache(batch: number): KvCache {
    return emptyKv(this.numLayers, batch, this.config.numKvHeads, this.config.headDim, this.kvDType);
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
    // a decode step on the device takes its bias from a device graph (or the append run of the step before): the
    // host bias is 4 bytes a slot of every row
    const deviceBias = this.kvOnDevice && T === 1 ? await this.deviceBias.make(inp.starts, P, C) : null;
    const feeds: Record<string, ort.Tensor> = {
      [IO.inputIds]: new ort.Tensor('int64', inp.ids, [B, T]),
      [IO.positionIds]: new ort.Tensor('int64', positionIds(B, T, P, inp.starts), [B, T]),
      [IO.attnBias]: deviceBias?.bias ?? new ort.Tensor('float32', capacityBias(B, T, P, C, inp.starts), [B, T, C + T]),
      [IO.ropeInvFreq]: new ort.Tensor('float32', this.invFreqRows(B, inp.ropeLength ?? inp.starts.map((s) => P + T - s)), [B, this.config.headDim / 2]),
      ...this.interventionFeeds(inp),
      [IO.hiddenIndex]: new ort.Tensor('int64', i64(inp.hiddenIndex), [inp.hiddenIndex.length]),
      [IO.logitsIndex]: new ort.Tensor('int64', i64(inp.logitsIndex), [inp.logitsIndex.length]),
    };
    if (this.embeddingTable) feeds[IO.inputsEmbeds] = new ort.Tensor('float32', lookupEmbeddings(this.embeddingTable, inp.ids), [B, T, this.dModel]);
    if (this.window !== null) feeds[IO.attnBiasWindow] = deviceBias?.window ?? new ort.Tensor('float32', capacityBias(B, T, P, C, inp.starts, this.window), [B, T, C + T]);
    for (let l = 0; l < this.numLayers; l++) {
      feeds[IO.pastKey(l)] = past.keys[l]!;
      feeds[IO.pastValue(l)] = past.values[l]!;
    }
    const wantPresent = inp.wantPresent ?? true;
    const fetches: string[] = [IO.hidden, IO.logits];
    // on webgpu new_kv is a device output and is always fetched (then released when not wanted): onnxruntime-node
    // 1.30 fails a run that leaves a device output out after one that fetched it (INVALID_ARGUMENT in the Concat
    // that makes it; src/engine/README.md, GPU)
    if (wantPresent || this.kvOnDevice) fetches.push(IO.newKv);
    const hookOutputs = [
      ...inp.hooks?.selection.capture.map(HOOK_IO.output) ?? [],
      ...(inp.hooks?.selection.sae ?? []).filter((s) => s.captureActs).map((s) => SAE_IO.acts(s.hook)),
    ];
    for (const [name, t] of Object.entries(inp.hooks?.feeds ?? {})) feeds[name] = new ort.Tensor('float32', t.data, t.dims);
    fetches.push(...hookOutputs);
    // a hook selection's session counts as in use from before it is looked up until its run ends (never released then)
    const hookKey = inp.hooks ? hookSelectionKey(inp.hooks.selection) : null;
    if (hookKey !== null) this.hookRuns.set(hookKey, (this.hookRuns.get(hookKey) ?? 0) + 1);
    let out: ort.InferenceSession.ReturnType;
    try {
      const session = inp.hooks ? await this.hookSession(inp.hooks.selection) : this.session;
      out = await session.run(feeds, fetches);
      if (this.onDevice) countRun(this.transfer, feeds, out);
    } catch (e) {
      // a WebGPU failure mid-run (out of device memory, a kernel the provider cannot run) as one line
      if (this.engineConfig?.device === 'webgpu' && !(e instanceof SafekeepError)) throw webgpuError(String((e as Error).message ?? e).split('\n')[0]!.slice(0, 300));
      throw e;
    } finally {
      if (hookKey !== null) this.hookRuns.set(hookKey, this.hookRuns.get(hookKey)! - 1);
      deviceBias?.bias.dispose();
      deviceBias?.window?.dispose();
    }
    let present: KvCache | null = null;
    const newKv = out[IO.newKv];
    if (!wantPresent && onDevice(newKv)) newKv!.dispose();
    else if (wantPresent && onDevice(newKv)) {
      present = await this.devicePresent(inp, past, newKv!);
    } else if (wantPresent) {
      const newKeys: KvArray[] = [];
      const newValues: KvArray[] = [];
      const data = newKv!.data as KvArray;
      const n = B * this.config.numKvHeads * T * this.config.headDim;
      for (let l = 0; l < this.numLayers; l++) {
        const { k, v } = newKvOf(data, l, n);
        newKeys.push(k);
        newValues.push(v);
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
      ...(inp.hooks ? { hooks: Object.fromEntries(hookOutputs.map((n) => [n, { data: out[n]!.data as Float32Array, dims: out[n]!.dims.map(Number) }])) } : {}),
    };
  }

  /**
   * A step's present when its new slots stayed on the device (webgpu): a decode step asked to keep its KV there
   * (`keepOnDevice`, one new slot into a past with room) gets the past's buffers with slot P written on the device
   * (runtime/device-kv.ts, nothing crosses); any other step reads the new slots back through a device graph with CPU
   * outputs and appends them on the host as the CPU does.
   */
  private async devicePresent(inp: StepInput, past: KvCache, newKv: ort.Tensor): Promise<KvCache> {
    const { batch: B, width: T } = inp;
    const P = past.length;
    try {
      if (inp.keepOnDevice && T === 1 && inp.past && kvCapacity(past) > P) {
        const { keys, values, nextBias } = await this.deviceKv.append(past.keys, past.values, newKv, P, inp.starts);
        // the next step of these rows on this buffer takes it instead of running the bias graph
        if (nextBias) this.deviceBias.keep(inp.starts, P + 1, kvCapacity(past), nextBias);
        return { keys, values, batch: B, length: P + 1, starts: inp.starts.slice() };
      }
      const [data] = await this.deviceKv.readback([newKv]);
      const n = B * this.config.numKvHeads * T * this.config.headDim;
      const newKeys: KvArray[] = [];
      const newValues: KvArray[] = [];
      for (let l = 0; l < this.numLayers; l++) {
        const { k, v } = newKvOf(data!, l, n);
        newKeys.push(k);
        newValues.push(v);
      }
      return appendKv(await this.hostPast(inp.past), newKeys, newValues, {
        batch: B, width: T, kvHeads: this.config.numKvHeads, headDim: this.config.headDim, starts: inp.starts,
        reserve: inp.reserve ?? (T === 1 ? KV_CHUNK : 0),
      });
    } finally {
      newKv.dispose();
    }
  }

  /** a past on the host (a device past read back first: appendKv writes host arrays) */
  private async hostPast(past: KvCache | null): Promise<KvCache | null> {
    if (!past || !onDevice(past.keys[0])) return past;
    const data = await this.deviceKv.readback([...past.keys, ...past.values]);
    const L = this.numLayers;
    return { ...past, keys: past.keys.map((t, l) => kvTensor(data[l]!, t.dims)), values: past.values.map((t, l) => kvTensor(data[L + l]!, t.dims)) };
  }

  /** device K/V graphs (webgpu): append a decode step's slot on the device, read device tensors back */
  readonly deviceKv: DeviceKv;
  /** a decode step's attention bias made on the device (webgpu) */
  private readonly deviceBias: DeviceBias;

  /**
   * The session of the graph with these hook points (its graph built and cached once per selection). Each session
   * holds its own pre-packed weights, so at most HOOK_SESSIONS are kept: the least recently used one not running is
   * released when another is opened.
   */
  private async hookSession(sel: HookSelection): Promise<ort.InferenceSession> {
    const key = hookSelectionKey(sel);
    let s = this.hookSessions.get(key);
    if (s) {
      this.hookSessions.delete(key); // re-inserted below: the map's order is the use order
    } else {
      if (!this.engineConfig) throw new SafekeepError('hook points need an engine made by createEngine');
      for (const [k, old] of this.hookSessions) {
        if (this.hookSessions.size < HOOK_SESSIONS) break;
        if (this.hookRuns.get(k)) continue;
        this.hookSessions.delete(k);
        await (await old.catch(() => null))?.release();
      }
      s = openSession(this.checkpoint, this.engineConfig, sel).then((r) => r.session);
      s.catch(() => this.hookSessions.delete(key)); // a failed open is not kept
    }
    this.hookSessions.set(key, s);
    return s;
  }

  /** hook-point sessions open now (≤ HOOK_SESSIONS unless more are running at once) */
  get hookSessionCount(): number {
    return this.hookSessions.size;
  }

  /** runs in flight per hook selection key (a session in use is never released) */
  private readonly hookRuns = new Map<string, number>();

  /**
   * TransformerLens's run_with_cache: one forward of `ids` (one sequence) that returns the activations at the hook
   * points `names` selects (graph/hooks.ts: `blocks.<l>.<point>`, `*` globs) as an ActivationCache, with `hooks`
   * (edits at hook points: add / ablate / clamp / patch / ablate_heads) and the residual-stream interventions applied.
   */
  async runWithCache(ids: number[], opts: RunWithCacheOptions = {}): Promise<RunWithCacheResult> {
    return runWithCache(this, ids, opts);
  }

  /** `runWithCache` that reads no activations: the logits under the hook edits (TransformerLens's run_with_hooks). */
  async runWithHooks(ids: number[], opts: Omit<RunWithCacheOptions, 'names'> = {}): Promise<{ logits: Float32Array; logitPositions: number[] }> {
    const { logits, logitPositions } = await runWithCache(this, ids, { ...opts, names: [] });
    return { logits, logitPositions };
  }

  async forward(inputIds: number[][], opts: ForwardOptions = {}): Promise<ForwardResult[]> {
    return forward(this, inputIds, opts);
  }

  memoryFits(shapes: (batch: number, width: number) => StepShape[]): ((batch: number, width: number) => boolean) | undefined {
    return memoryFits(this, shapes);
  }

  async prefill(inp: StepInput): Promise<StepOutput> {
    return prefill(this, inp);
  }

  /**
   * `forward` with shared-prefix KV reuse (prefix.ts): same results within float rounding, each distinct shared
   * prefix computed once (kept in `opts.cache` across calls), plus {promptTokens, computedTokens}.
   */
  async forwardShared(inputIds: number[][], opts: SharedForwardOptions = {}): Promise<SharedForwardResult> {
    checkIds(inputIds, this.vocabSize);
    return forwardShared(this, inputIds, interventionInputs(this.numLayers, this.dModel, callInterventions(opts)), opts);
  }

  /**
   * One greedy token per prompt with shared-prefix reuse: equals `generate(ids, {maxNewTokens: 1,
   * returnPromptLastHidden: true, returnFirstTokenHidden: true, stopIds, steer})` (prefix.ts).
   */
  async firstTokenShared(inputIds: number[][], opts: FirstTokenSharedOptions = {}): Promise<FirstTokenSharedResult> {
    checkIds(inputIds, this.vocabSize);
    return firstTokenShared(this, inputIds, interventionInputs(this.numLayers, this.dModel, callInterventions(opts)), opts);
  }

  /** every row a sequence of the scheduler: batched continuously with each other and with concurrent calls */
  async generate(inputIds: number[][], opts: GenerateOptions): Promise<GenerateResult[]> {
    return generate(this, this.scheduler, inputIds, opts);
  }

  /**
   * One prompt into the scheduler; resolves when it finishes. Concurrent submits (and generate calls) share decode
   * steps; `opts.signal` cancels this sequence alone at its next step (finish 'cancelled', its slots freed).
   */
  async submit(ids: number[], opts: GenerateOptions): Promise<GenerateResult> {
    return this.scheduler.submit(ids, opts);
  }

  /** whether the session profiles (EngineOptions.profile): its trace is written by dispose() */
  private readonly profiling: boolean;

  async dispose(): Promise<void> {
    if (this.profiling) this.session.endProfiling();
    for (const s of this.hookSessions.values()) await (await s.catch(() => null))?.release();
    this.hookSessions.clear();
    await this.deviceKv.release();
    await this.deviceBias.release();
    await this.session.release();
  }
}

export async function createEngineFromCheckpoint(ckpt: Checkpoint, opts: EngineOptions = {}): Promise<OnnxEngine> {
  const cfg = resolveEngineConfig(opts);
  // the plan first: a budget the weights alone exceed fails before any memory is spent
  const plan = opts.maxMemory === undefined ? null : planMemory(ckpt.config, cfg.dtype, opts.maxMemory, {
    storage: ckpt.tensors.get(tensorName('down', 0))?.dtype ?? 'F32',
    lowMemory: cfg.lowMemory, attention: cfg.attention, kvElement: kvBytes(cfg.kvDType), hostEmbeddings: cfg.embeddings === 'host',
    ...(cfg.quant ? { quant: { scheme: cfg.quant.scheme, block: cfg.quant.block } } : {}),
    runtimeBytes: opts.runtimeBytes ?? process.memoryUsage().rss + RUNTIME_MARGIN,
  });
  if (opts.maxBatchTokens !== undefined && (!Number.isInteger(opts.maxBatchTokens) || opts.maxBatchTokens < 1)) {
    throw new SafekeepError(`maxBatchTokens must be a positive integer, got ${opts.maxBatchTokens}`);
  }
  const { session, cached, embeddings } = await openSession(ckpt, cfg);
  const maxBatchTokens = Math.min(plan?.maxBatchTokens ?? Infinity, opts.maxBatchTokens ?? (plan ? Infinity : 4096));
  return new OnnxEngine(ckpt, session, cached, { attention: cfg.attention, memoryPlan: plan, maxBatchTokens, profiling: cfg.profile !== null, engineConfig: cfg, embeddings });
}

export async function createEngine(modelDir: string, opts: EngineOptions = {}): Promise<OnnxEngine> {
  return createEngineFromCheckpoint(await loadCheckpoint(modelDir), opts);
}

