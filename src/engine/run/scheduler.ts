/**
 * Continuous batching: the engine's one generation loop, shared by every caller (`generate`, `submit`, the local
 * chat backend's concurrent calls). Sequences join and leave at step boundaries:
 *
 *   waiting ──admit──▶ prefilling ──last chunk──▶ decoding (a row of its group's batch) ──stop/length/cancel──▶ done
 *
 * Each iteration runs one decode step for all running sequences (one new token each, every row with its own
 * steering and interventions), then prefill chunks of the prefilling sequences, first come first served, within the step token budget
 * (`stepTokens` minus the decode rows; whole prompts while they fit, a longer one in even chunks, one chunk of it per
 * iteration): a long prompt is prefilled in chunks interleaved with the decode steps of the sequences already
 * running, so they keep producing tokens while it is read. A finished sequence leaves the decode
 * batch at once (runtime/row-kv.ts: its row is refilled by the last one), so no step computes a token nobody wants.
 *
 * Interventions per row: the graph takes one steer / projection set per token row (graph/intervene.ts), so sequences
 * with different steering, ablations or clamps decode in the same step; when every row's set is the same the step
 * feeds that one set (the plain path is the step it always was). Groups remain only for hook points: a selection of
 * edited points runs another graph (its own session, graph/hook-edit.ts), so each selection decodes as its own batch;
 * within it the rows' edit values are per row too (keep/set/dir/value one row each).
 * The prefill of each sequence is its own batch-1 step with its own prefill interventions (positions 'generated'
 * leave it unsteered).
 *
 * Capture (GenerateOptions.capture, a research server's per-request activations): the hidden states of chosen prompt
 * positions come from the sequence's own prefill steps (it skips the prefix cache and packing, so each is computed),
 * each fed-back token's from its row of the decode step; captured hook points inside the blocks are outputs of the
 * sequence's graph, so it decodes in the group of that selection. Log probabilities (`topLogprobs`) are taken from
 * the row of logits that chose each token.
 *
 * Prefix caching (runtime/kv-blocks.ts): when a sequence's prefill starts, the longest chain of cached full blocks
 * of its prompt (under its prefill interventions) is copied into its KV and only the rest is computed; every full
 * block a chunk completes is stored. The last prompt token is always computed (its logits choose the first token).
 *
 * Exactness: every row's arithmetic is the one-at-a-time arithmetic on other shapes (batch size, buffer width,
 * chunk boundaries), so results agree within float rounding (tests: ≤ 1e-5 relative, greedy ids equal), not bit for
 * bit: onnxruntime's GEMMs and softmax reductions block and vectorise by shape.
 */
import { createHash } from 'node:crypto';
import { SafekeepError } from '../../util/errors.ts';
import { HOOK_IO, hookSelectionKey } from '../graph/hooks.ts';
import { KvBlockStore } from '../runtime/kv-blocks.ts';
import { appendKv, kvArray, kvBytes, kvCapacity, kvOfArrays, KV_CHUNK, packRowsKv, rowSlotsKv, type KvArray, type KvCache } from '../runtime/kv.ts';
import { RowKv } from '../runtime/row-kv.ts';
import type { GenerateOptions, GenerateResult, TokenLogprob } from './types.ts';
import { argmax } from './argmax.ts';
import type { InterventionInputs } from './batch.ts';
import { generationInputs } from './generation-inputs.ts';
import { choosePack, packLayout, type PackLayout } from './prefill-pack.ts';
import { hiddenRows, type StepHooks, type StepInput, type StepOutput, type Stepper } from './step.ts';

export interface SchedulerOptions {
  /** most tokens per iteration: the decode rows plus the prefill chunks (default 512) */
  stepTokens?: number;
  /** most sequences in flight (prefilling + decoding; default 64) */
  maxRunning?: number;
  /** bytes of prefix-cache blocks (default: the memory plan's prefix cache, else 256 MiB; 0 = off) */
  prefixCacheBytes?: number;
  /** tokens per prefix-cache block (default 16) */
  blockTokens?: number;
  /**
   * most tokens per row of a packed prefill step (run/prefill-pack.ts: the last chunks of several prompts as the rows
   * of one step; default 128, 0 = every prefill chunk its own step)
   */
  packTokens?: number;
}

export interface SchedulerStats {
  /** sequences completed */
  sequences: number;
  /** decode steps run and the rows they computed */
  decodeSteps: number;
  decodeRows: number;
  /** prefill chunks run and the prompt tokens they computed */
  prefillChunks: number;
  prefillTokens: number;
  /** prompt tokens of admitted sequences (computed + served by the prefix cache) */
  promptTokens: number;
  /** most sequences decoding in one step */
  peakBatch: number;
  /** packed prefill steps, the sequences they prefilled, and their slots computed but not kept (pads, recomputed) */
  packedSteps: number;
  packedRows: number;
  packWaste: number;
  /**
   * wall seconds: `loop` while the scheduler had work (the rest of a caller's time it was idle, waiting for
   * submits); of it, awaiting model steps (`steps`), the prefix cache's lookups and block copies (`prefixCache`),
   * KV copied between caches (`rowKv`: the decode buffer's row joins, re-layouts and removals, a packed prefill's
   * past and its rows' new slots), and choosing tokens from logits (`choose`);
   * loop − the four = the rest of the scheduler's JS (admission, feeds, intervention sets)
   */
  seconds: { loop: number; steps: number; prefixCache: number; rowKv: number; choose: number };
}

/** the projection inputs of a step (one set, or one per row) */
type Projection = Pick<InterventionInputs, 'dir' | 'value'>;

const DEFAULT_PREFIX_BYTES = 256 * 2 ** 20;
/**
 * the most bytes of per-token intervention sets a pack of prompts with different prefill interventions feeds (each
 * token row its sequence's [L+1, d] steer and projection: 1 MiB a token at d = 4096, L = 32); beyond, they prefill apart
 */
const PACK_MAX_SET_BYTES = 64 * 2 ** 20;
/** a pack computes at most this share of its slots for nothing (pads, recomputed cached tokens) */
const PACK_MAX_WASTE = 0.25;
/** and masks at most this share of the past slots its rows attend (rows whose past is shorter than the longest) */
const PACK_MAX_MASKED_PAST = 0.25;

/** A decode batch: the running sequences that share a graph (no hook edits, or edits at the same hook points). */
interface Group {
  /** '' for the plain graph, else the hook selection's key (graph/hooks.ts hookSelectionKey) */
  key: string;
  kv: RowKv;
  /** row b's sequence */
  seqs: Seq[];
  /** the per-row intervention inputs of the last step and the rows they were built for (rebuilt when rows change) */
  rowSets: { seqs: Seq[]; steer: Float32Array | null; project: Projection | null; hooks: StepHooks | undefined } | null;
}

interface Seq {
  ids: number[];
  maxNew: number;
  stop: Set<number>;
  wantStepLogits: boolean;
  wantFirstHidden: boolean;
  wantPromptHidden: boolean;
  keepPromptHidden: boolean;
  halt: ((h: Float32Array) => boolean) | undefined;
  signal: AbortSignal | undefined;
  stopWhen: GenerateOptions['stopWhen'];
  /** what the caller's stopWhen threw: the sequence ends rejected with it */
  failed: { error: unknown } | null;
  prefillIv: InterventionInputs;
  decodeIv: InterventionInputs;
  /** edits at hook points, at every prefill and decode position */
  hooks: StepHooks | undefined;
  /** digest of each hook feed by graph input name (rows with equal ones share the feed in a step) */
  hookKeys: Record<string, string>;
  /** the decode group: '' without hook edits, else the hook selection's key */
  groupKey: string;
  /** digests of the decode steer rows and of the projections: rows with equal ones share one set in a step */
  steerKey: string;
  projectKey: string;
  prefillSalt: string;
  /** the prefill's KV (batch 1) while prefilling */
  kv: KvCache | null;
  /** prompt tokens in kv */
  filled: number;
  /** prefix-cache keys of the prompt's full blocks (null until the prefill starts, or without a cache) */
  chain: string[] | null;
  /** the same keys, computed once (before the prefill starts when a pack looks at the sequence) */
  keys: string[] | null;
  /** full blocks already in the store */
  stored: number;
  /** prompt positions whose hidden states are kept (GenerateOptions.capture; null = none), and those computed so far */
  capturePrompt: readonly number[] | null;
  captured: Map<number, Float32Array>;
  /** keep each fed-back generated token's hidden states */
  captureGen: boolean;
  /** the hidden-state rows kept of each captured position (null: all L+1; [] none: hook points only) */
  captureLayers: readonly number[] | null;
  /** hook points captured (graph outputs), and their rows so far: prompt positions by position, generated in order */
  captureHooks: readonly string[];
  hookPrompt: Map<number, Record<string, Float32Array>>;
  hookGen: Record<string, Float32Array>[];
  /** top log probabilities per chosen token (-1 = no log probabilities) */
  topK: number;
  result: GenerateResult;
  stepLogits: Float32Array[];
  /** no more tokens wanted (stays in its batch only for the first generated token's hidden state) */
  finished: boolean;
  resolve: (r: GenerateResult) => void;
  reject: (e: unknown) => void;
}

const digest = (parts: readonly Float32Array[]): string => {
  const h = createHash('sha256');
  for (const p of parts) h.update(new Uint8Array(p.buffer, p.byteOffset, p.byteLength));
  return h.digest('hex');
};

/** A hook selection and its edit inputs as a key part (names and values). */
const hooksDigest = (h: StepHooks): string => {
  const hash = createHash('sha256');
  hash.update(JSON.stringify(h.selection));
  for (const [name, f] of Object.entries(h.feeds).sort(([a], [b]) => (a < b ? -1 : 1))) {
    hash.update(`${name}:${f.dims.join('x')}`);
    hash.update(new Uint8Array(f.data.buffer, f.data.byteOffset, f.data.byteLength));
  }
  return `+hooks:${hash.digest('hex')}`;
};

export class Scheduler {
  readonly stats: SchedulerStats = {
    sequences: 0, decodeSteps: 0, decodeRows: 0, prefillChunks: 0, prefillTokens: 0, promptTokens: 0, peakBatch: 0, packedSteps: 0, packedRows: 0, packWaste: 0,
    seconds: { loop: 0, steps: 0, prefixCache: 0, rowKv: 0, choose: 0 },
  };
  stepTokens: number;
  maxRunning: number;
  packTokens: number;
  /** the prefix cache (null when off: a dynamic-NTK RoPE makes a prefix's KV depend on the whole prompt's length) */
  readonly prefixStore: KvBlockStore | null;
  private readonly waiting: Seq[] = [];
  private readonly prefilling: Seq[] = [];
  private readonly groups = new Map<string, Group>();
  private looping = false;
  /** bytes of one intervention set (steer, projection directions and values) */
  private get setBytes(): number {
    const L1 = this.s.numLayers + 1;
    return (2 * L1 * this.s.dModel + L1) * 4;
  }

  constructor(private readonly s: Stepper, o: SchedulerOptions = {}) {
    this.stepTokens = positive(o.stepTokens ?? 512, 'stepTokens');
    this.maxRunning = positive(o.maxRunning ?? 64, 'maxRunning');
    this.packTokens = o.packTokens ?? 128;
    if (!Number.isInteger(this.packTokens) || this.packTokens < 0) throw new SafekeepError(`packTokens must be a non-negative integer, got ${this.packTokens}`);
    const c = s.config;
    const bytes = o.prefixCacheBytes ?? s.memoryPlan?.prefixCacheBytes ?? DEFAULT_PREFIX_BYTES;
    this.prefixStore = bytes > 0 && c.rope.type !== 'dynamic'
      ? new KvBlockStore(c.numLayers, c.numKvHeads, c.headDim, positive(o.blockTokens ?? 16, 'blockTokens'), bytes, kvBytes(s.kvDType ?? 'f32'))
      : null;
  }

  /** sequences waiting, prefilling and decoding */
  get inFlight(): number {
    let n = this.prefilling.length;
    for (const g of this.groups.values()) n += g.seqs.length;
    return n + this.waiting.length;
  }

  /**
   * Generate for one prompt: resolves when the sequence finishes (stop id, stopWhen, maxNewTokens, haltAfterPrefill,
   * or its signal: finish 'cancelled' with the tokens so far). `haltAfterPrefill` is called with row 0.
   */
  submit(ids: number[], opts: GenerateOptions): Promise<GenerateResult> {
    const { prefillIv, decodeIv, hooks } = generationInputs(this.s, [ids], opts);
    return this.enqueue(ids, opts, prefillIv, decodeIv, undefined, hooks);
  }

  /** `submit` with the interventions already resolved (generate() resolves a call's once for all its rows) */
  enqueue(ids: number[], opts: GenerateOptions, prefillIv: InterventionInputs, decodeIv: InterventionInputs, halt?: (h: Float32Array) => boolean, hooks?: StepHooks): Promise<GenerateResult> {
    const capture = opts.capture;
    const captureHooks = capture?.hooks ?? [];
    const L = this.s.numLayers;
    capture?.layers?.forEach((l) => { if (!Number.isInteger(l) || l < 0 || l > L) throw new SafekeepError(`capture: layer ${l} is not in 0..${L}`); });
    // captured hook points are outputs of the sequence's graph: they join its selection (its edits kept)
    if (captureHooks.length > 0) hooks = { selection: { capture: [...captureHooks], edit: hooks?.selection.edit ?? [] }, feeds: hooks?.feeds ?? {} };
    // hook edits change every position's KV: they salt the prefix cache like interventions; the points edited choose the graph
    const hookKey = hooks ? hooksDigest(hooks) : '';
    const topK = opts.topLogprobs ?? -1;
    if (opts.topLogprobs !== undefined && (!Number.isInteger(topK) || topK < 0 || topK > MAX_TOP_LOGPROBS)) throw new SafekeepError(`topLogprobs must be an integer 0..${MAX_TOP_LOGPROBS}, got ${opts.topLogprobs}`);
    const positions = capture && capture.promptPositions.length > 0 ? [...capture.promptPositions] : null;
    positions?.forEach((p, i) => {
      if (!Number.isInteger(p) || p < 0 || p >= ids.length) throw new SafekeepError(`capture: prompt position ${p} is outside a prompt of ${ids.length} tokens`);
      if (positions.indexOf(p) !== i) throw new SafekeepError(`capture: prompt position ${p} given twice`);
    });
    return new Promise<GenerateResult>((resolve, reject) => {
      const seq: Seq = {
        ids, maxNew: opts.maxNewTokens, stop: new Set(opts.stopIds ?? this.s.eosIds),
        wantStepLogits: !!opts.returnStepLogits,
        wantFirstHidden: !!opts.returnFirstTokenHidden && opts.maxNewTokens > 0,
        wantPromptHidden: !!opts.returnPromptLastHidden || !!opts.haltAfterPrefill,
        keepPromptHidden: !!opts.returnPromptLastHidden,
        halt: halt ?? (opts.haltAfterPrefill ? (h) => opts.haltAfterPrefill!(0, h) : undefined),
        signal: opts.signal,
        stopWhen: opts.stopWhen,
        failed: null,
        prefillIv, decodeIv, hooks,
        hookKeys: Object.fromEntries(Object.entries(hooks?.feeds ?? {}).map(([name, f]) => [name, digest([f.data])])),
        groupKey: hooks ? hookSelectionKey(hooks.selection) : '',
        steerKey: digest([decodeIv.steer]),
        projectKey: digest([decodeIv.dir, decodeIv.value]),
        prefillSalt: digest([prefillIv.steer, prefillIv.dir, prefillIv.value]) + hookKey,
        kv: null, filled: 0, chain: null, keys: null, stored: 0,
        capturePrompt: positions, captured: new Map(), captureGen: !!capture?.generated, captureLayers: capture?.layers ? [...capture.layers] : null, topK,
        captureHooks, hookPrompt: new Map(), hookGen: [],
        result: { generatedIds: [], finish: 'length', ...(capture?.generated ? { capturedGenerated: [] } : {}), ...(topK >= 0 ? { logprobs: [] } : {}) },
        stepLogits: [], finished: false, resolve, reject,
      };
      this.waiting.push(seq);
      this.kick();
    });
  }

  private kick(): void {
    if (this.looping) return;
    this.looping = true;
    // from a microtask: the submits of one synchronous burst (generate's rows, Promise.all of calls) are all waiting
    // when the first iteration admits, so they prefill together and decode from the same step
    queueMicrotask(() => void this.loop());
  }

  private async loop(): Promise<void> {
    const t0 = performance.now();
    try {
      while (this.waiting.length || this.prefilling.length || this.groups.size) {
        // one turn of the event loop first: onnxruntime-node runs a step synchronously on the main thread (inside a
        // setImmediate), so a request that reached a server during the last step is read only in the loop's poll
        // phase; without this turn it would be admitted one step later, its row missing from that decode step
        await new Promise<void>((r) => setImmediate(r));
        await this.iteration();
      }
    } catch (e) {
      this.failAll(e);
    } finally {
      this.looping = false;
      this.stats.seconds.loop += (performance.now() - t0) / 1000;
    }
  }

  /** f() with its wall time added to stats.seconds[key] */
  private timed<R>(key: Exclude<keyof SchedulerStats['seconds'], 'loop'>, f: () => R): R {
    const t = performance.now();
    try {
      return f();
    } finally {
      this.stats.seconds[key] += (performance.now() - t) / 1000;
    }
  }

  /** a model step, its wall time added to stats.seconds.steps */
  private async timedStep(f: () => Promise<StepOutput>): Promise<StepOutput> {
    const t = performance.now();
    try {
      return await f();
    } finally {
      this.stats.seconds.steps += (performance.now() - t) / 1000;
    }
  }

  /** one scheduling round: reap cancelled, admit, one decode step (one per hook-edit group), prefill chunks within the budget */
  private async iteration(): Promise<void> {
    this.reapCancelled();
    this.admit();
    let decodeTokens = 0;
    for (const g of [...this.groups.values()]) {
      if (g.seqs.length === 0) { this.groups.delete(g.key); continue; }
      decodeTokens += g.seqs.length;
      try {
        await this.decodeStep(g);
      } catch (e) {
        this.groups.delete(g.key);
        for (const q of g.seqs) q.reject(e);
      }
    }
    // prefill: chunks of the prefilling sequences in order while they fit the budget left (the first always runs);
    // a sequence whose prompt is not done after its chunk waits for the next iteration, so decode steps interleave
    const full = Math.max(1, this.stepTokens - decodeTokens);
    let budget = full;
    while (this.prefilling.length) {
      const q = this.prefilling[0]!;
      if (q.chain === null && q.filled === 0) this.timed('prefixCache', () => this.startPrefill(q)); // a prefix hit shortens what is left
      const T = this.chunkTokens(q, full);
      if (budget < full && T > budget) break;
      const pack = T === q.ids.length - q.filled ? this.packWith(q, budget) : null;
      if (pack) {
        budget -= pack.seqs.length * pack.layout.width;
        await this.runPack(pack.seqs, pack.layout);
        continue;
      }
      try {
        await this.prefillChunk(q, T);
        budget -= T;
        if (q.filled < q.ids.length) break;
        this.prefilling.shift();
        this.endPrefill(q); // may throw: a caller's haltAfterPrefill
      } catch (e) {
        if (this.prefilling[0] === q) this.prefilling.shift();
        q.kv = null;
        q.reject(e);
      }
    }
  }

  /** a failure outside any one sequence's step: every sequence in flight is rejected with it */
  private failAll(e: unknown): void {
    const all = [...this.waiting.splice(0), ...this.prefilling.splice(0), ...[...this.groups.values()].flatMap((g) => g.seqs)];
    this.groups.clear();
    for (const q of all) q.reject(e);
  }

  private reapCancelled(): void {
    const cancelled = (q: Seq) => q.signal?.aborted === true;
    for (const list of [this.waiting, this.prefilling]) {
      for (let i = list.length - 1; i >= 0; i--) {
        if (cancelled(list[i]!)) { const [q] = list.splice(i, 1); q!.kv = null; this.complete(q!, 'cancelled'); }
      }
    }
    for (const g of this.groups.values()) this.dropRows(g, (q) => !q.finished && cancelled(q), 'cancelled');
  }

  /** waiting → prefilling while fewer than maxRunning are in flight and (under a memory plan) the decode batch fits */
  private admit(): void {
    if (this.waiting.length === 0) return;
    // rows whose decode sets differ are fed one set each (stacked per row): counted in the step when any differ
    const keys = new Set<string>();
    for (const q of [...this.waiting, ...this.prefilling, ...[...this.groups.values()].flatMap((g) => g.seqs)]) keys.add(`${q.steerKey}|${q.projectKey}`);
    const perRow = keys.size > 1;
    const fits = this.s.memoryFits((B, P) => [{ batch: B, width: 1, past: P, hidden: B, logits: B, present: true, sets: perRow ? B : 0 }]);
    let running = this.prefilling.length;
    let rows = 0;
    let span = 0;
    for (const g of this.groups.values()) { running += g.seqs.length; rows += g.seqs.length; span = Math.max(span, g.kv.slotCapacity); }
    for (const q of this.prefilling) { rows++; span = Math.max(span, q.ids.length + q.maxNew); }
    while (this.waiting.length && running < this.maxRunning) {
      const q = this.waiting[0]!;
      const past = Math.max(span, q.ids.length + q.maxNew);
      if (fits && running > 0 && !fits(rows + 1, past)) break;
      this.waiting.shift();
      this.prefilling.push(q);
      this.stats.promptTokens += q.ids.length;
      running++;
      rows++;
      span = past;
    }
  }

  /** q's prefix-cache keys (computed once; [] without a cache) */
  private keysOf(q: Seq): string[] {
    return (q.keys ??= this.prefixStore ? this.prefixStore.chain(q.ids, q.prefillSalt) : []);
  }

  /**
   * The prefilling sequences whose whole rest joins q's in one packed step (prefill-pack.ts), or null for q alone.
   * Candidates: no hook edits (their captures and per-step feeds stay one sequence per step), no captured prompt
   * positions, any prefill interventions (different ones fed per token row, within PACK_MAX_SET_BYTES), and not
   * waiting for a prefix a pack member is about to compute — a prompt whose first uncached block is one of a
   * member's computes it once, in a later step, from the member's stored blocks instead of twice.
   */
  private packWith(q: Seq, budget: number): { seqs: Seq[]; layout: PackLayout } | null {
    if (this.packTokens === 0 || q.hooks || q.capturePrompt || this.prefilling.length < 2 || q.ids.length - q.filled > this.packTokens) return null;
    const store = this.prefixStore;
    const claimed = new Set(this.keysOf(q));
    const seqs = [q];
    const limits = { maxWidth: this.packTokens, budget, maxWaste: PACK_MAX_WASTE, maxMaskedPast: PACK_MAX_MASKED_PAST };
    const chunkOf = (y: Seq) => ({ filled: y.filled, end: y.ids.length });
    for (const x of this.prefilling.slice(1)) {
      if (x.hooks || x.capturePrompt) continue;
      // a sequence not started is looked at by what its prefix lookup would give now, and started only when it joins
      // (one left out stays unstarted: its lookup, later, finds what this pack stores)
      let chunk = chunkOf(x);
      const fresh = x.chain === null && x.filled === 0;
      if (fresh) {
        const keys = this.keysOf(x);
        const hit = store ? store.cachedBlocks(keys, x.ids.length - 1) : 0;
        if (hit < keys.length && claimed.has(keys[hit]!)) continue;
        chunk = { filled: hit * (store?.blockTokens ?? 0), end: x.ids.length };
      }
      const chunks = [...seqs.map(chunkOf), chunk];
      const lay = packLayout(chunks);
      // rows whose prefill interventions differ feed one set per token row (the step expands a row's set over its slots)
      const perRow = [...seqs, x].some((y) => y.prefillSalt !== q.prefillSalt);
      if (perRow && chunks.length * lay.width * this.setBytes > PACK_MAX_SET_BYTES) continue;
      const fits = this.s.memoryFits((B, W) => [{ batch: B, width: W, past: lay.past, hidden: B, logits: B, present: true, sets: perRow ? B * W : 0 }]);
      if (choosePack(chunks, limits, fits ? (l) => fits(chunks.length, l.width) : undefined).length < chunks.length) continue;
      if (fresh) this.timed('prefixCache', () => this.startPrefill(x));
      seqs.push(x);
      for (const k of this.keysOf(x)) claimed.add(k);
    }
    return seqs.length > 1 ? { seqs, layout: packLayout(seqs.map(chunkOf)) } : null;
  }

  /**
   * Prefill the rest of every sequence of a pack in one step (layout: prefill-pack.ts), then each joins its decode
   * group. A failed step rejects the pack's sequences; a caller's haltAfterPrefill throwing rejects only its own.
   */
  private async runPack(seqs: Seq[], lay: PackLayout): Promise<void> {
    for (const q of seqs) this.prefilling.splice(this.prefilling.indexOf(q), 1);
    const c = this.s.config;
    const { numKvHeads: kvH, headDim: hd, numLayers: L } = c;
    const B = seqs.length;
    const W = lay.width;
    let out: StepOutput;
    try {
      const ids = new BigInt64Array(B * W);
      seqs.forEach((q, b) => {
        const r = lay.rows[b]!;
        const toks = q.ids.slice(r.from, q.ids.length);
        ids.set(BigInt64Array.from(toks, (x) => BigInt(x)), b * W + W - toks.length);
      });
      const starts = lay.rows.map((r) => r.start);
      const past = lay.past > 0
        ? this.timed('rowKv', () => packRowsKv(seqs.map((q) => q.kv), lay.rows.map((r) => r.pastLen), W, starts, kvH, hd, L, this.s.kvDType ?? 'f32'))
        : null;
      const hiddenRowsWanted = seqs.flatMap((q, b) => (q.wantPromptHidden ? [b] : []));
      const logitRows = seqs.flatMap((q, b) => (q.maxNew > 0 ? [b] : []));
      const q0 = seqs[0]!;
      const perRow = seqs.some((q) => q.prefillSalt !== q0.prefillSalt);
      const stack = (part: (q: Seq) => Float32Array) => {
        const per = part(q0).length;
        const m = new Float32Array(B * per);
        seqs.forEach((q, b) => m.set(part(q), b * per));
        return m;
      };
      const steer = perRow ? stack((q) => q.prefillIv.steer) : q0.prefillIv.steer;
      const project = perRow ? { dir: stack((q) => q.prefillIv.dir), value: stack((q) => q.prefillIv.value) } : q0.prefillIv;
      out = await this.timedStep(() => this.s.step({
        ids, batch: B, width: W, starts, past, steer, project,
        hiddenIndex: hiddenRowsWanted.map((b) => b * W + W - 1), logitsIndex: logitRows.map((b) => b * W + W - 1),
        ropeLength: seqs.map((q) => q.ids.length), reserve: 0,
      }));
      const V = this.s.vocabSize;
      const L1 = L + 1;
      const present = out.present!;
      seqs.forEach((q, b) => {
        const kept = lay.rows[b]!.kept;
        const fresh = rowSlotsKv(present, b, present.length - kept, kept);
        q.kv = this.timed('rowKv', () => appendKv(q.kv, fresh.keys, fresh.values, { batch: 1, width: kept, kvHeads: kvH, headDim: hd, starts: [0], reserve: 0 }));
        const hi = hiddenRowsWanted.indexOf(b);
        const li = logitRows.indexOf(b);
        this.prefillOut.set(q, {
          hidden: hi >= 0 ? hiddenRows(out.hidden, L1, hiddenRowsWanted.length, this.s.dModel, hi, 1) : new Float32Array(0),
          logits: li >= 0 ? out.logits.subarray(li * V, (li + 1) * V) : new Float32Array(0),
        });
        this.afterChunk(q, kept);
      });
      this.stats.packedSteps++;
      this.stats.packedRows += B;
      this.stats.packWaste += lay.waste;
    } catch (e) {
      for (const q of seqs) { q.kv = null; this.prefillOut.delete(q); q.reject(e); }
      return;
    }
    for (const q of seqs) {
      try {
        this.endPrefill(q);
      } catch (e) {
        q.kv = null;
        q.reject(e);
      }
    }
  }

  /**
   * The next chunk of q's prompt under a per-iteration budget: the rest when it fits, else even chunks (700 tokens in
   * a 512 budget: 350 + 350, not 512 + 188, so no chunk is a short tail; causalChunk in chunked.ts measured why).
   */
  private chunkTokens(q: Seq, budget: number): number {
    const rest = q.ids.length - q.filled;
    return rest <= budget ? rest : Math.ceil(rest / Math.ceil(rest / budget));
  }

  /** Run the next T tokens of q's prefill. */
  private async prefillChunk(q: Seq, T: number): Promise<void> {
    const n = q.ids.length;
    const last = q.filled + T === n;
    const ids = BigInt64Array.from(q.ids.slice(q.filled, q.filled + T), (x) => BigInt(x));
    // captured prompt positions in this chunk come first in the hidden output, the last prompt token's after them
    const from = q.filled;
    const cap = q.capturePrompt ? q.capturePrompt.filter((p) => p >= from && p < from + T) : [];
    // the hidden rows only when some layer is kept (a capture of hook points alone reads none)
    const capH = q.captureLayers?.length === 0 ? [] : cap;
    const wantLast = last && q.wantPromptHidden;
    // a step with captured hook points is one graph run (chunkedStep cannot split its outputs); its T is within the budget
    const run = q.captureHooks.length > 0 ? (inp: StepInput) => this.s.step(inp) : (inp: StepInput) => this.s.prefill(inp);
    const out = await this.timedStep(() => run({
      ids, batch: 1, width: T, starts: [0], past: q.kv, steer: q.prefillIv.steer, project: q.prefillIv, ...(q.hooks ? { hooks: q.hooks } : {}),
      hiddenIndex: [...capH.map((p) => p - from), ...(wantLast ? [T - 1] : [])],
      logitsIndex: last && q.maxNew > 0 ? [T - 1] : [],
      ropeLength: [n], // dynamic-NTK RoPE: the whole prompt's length in every chunk, as one prefill step
      reserve: n - q.filled - T,
    }));
    q.kv = out.present;
    this.afterChunk(q, T);
    if (q.captureHooks.length > 0) for (const p of cap) q.hookPrompt.set(p, hookRow(out, q.captureHooks, p - from));
    if (capH.length === 0) {
      if (last) this.prefillOut.set(q, out);
      return;
    }
    const L1 = this.s.numLayers + 1;
    const N = capH.length + (wantLast ? 1 : 0);
    capH.forEach((p, i) => q.captured.set(p, this.keptLayers(q, hiddenRows(out.hidden, L1, N, this.s.dModel, i, 1))));
    if (last) this.prefillOut.set(q, { hidden: wantLast ? hiddenRows(out.hidden, L1, N, this.s.dModel, capH.length, 1) : new Float32Array(0), logits: out.logits });
  }

  /** the kept rows ([K, d]) of one position's hidden states [L+1, d] */
  private keptLayers(q: Seq, h: Float32Array): Float32Array {
    const ls = q.captureLayers;
    if (ls === null) return h;
    const d = this.s.dModel;
    const out = new Float32Array(ls.length * d);
    ls.forEach((l, k) => out.set(h.subarray(l * d, (l + 1) * d), k * d));
    return out;
  }

  /** q's KV now holds T more prompt tokens: count them and store the full blocks they completed */
  private afterChunk(q: Seq, T: number): void {
    q.filled += T;
    this.stats.prefillChunks++;
    this.stats.prefillTokens += T;
    const store = this.prefixStore;
    if (store && q.chain && q.chain.length > 0) {
      const full = Math.floor(q.filled / store.blockTokens);
      if (full > q.stored) {
        const kv = q.kv!;
        this.timed('prefixCache', () => store.write(q.chain!, q.stored, full, { keys: kv.keys.map((t) => t.data as KvArray), values: kv.values.map((t) => t.data as KvArray), capacity: kvCapacity(kv) }));
        q.stored = full;
      }
    }
  }

  /** the last prefill step's outputs, until endPrefill reads them */
  private readonly prefillOut = new WeakMap<Seq, { hidden: Float32Array; logits: Float32Array }>();

  /** the prefix cache lookup: the cached full blocks of the prompt become the start of its KV */
  private startPrefill(q: Seq): void {
    const store = this.prefixStore;
    // a captured prompt position must be computed, not read from cached KV (which holds no hidden states)
    if (!store || q.capturePrompt) { q.chain = []; return; }
    const n = q.ids.length;
    q.chain = this.keysOf(q);
    if (q.chain.length === 0) return;
    const c = this.s.config;
    const size = c.numKvHeads * n * c.headDim;
    const kvd = this.s.kvDType ?? 'f32';
    const dst = { keys: Array.from({ length: c.numLayers }, () => kvArray(kvd, size)), values: Array.from({ length: c.numLayers }, () => kvArray(kvd, size)), capacity: n };
    const hit = store.read(q.chain, n - 1, dst);
    if (hit === 0) return;
    q.kv = kvOfArrays(dst.keys, dst.values, c.numKvHeads, n, c.headDim, hit);
    q.filled = hit;
    q.stored = hit / store.blockTokens;
  }

  /** after the last chunk: prompt hidden state / halt, the first token, then the sequence joins its decode group */
  private endPrefill(q: Seq): void {
    const out = this.prefillOut.get(q)!;
    this.prefillOut.delete(q);
    if (q.wantPromptHidden) {
      const h = out.hidden.slice(0, (this.s.numLayers + 1) * this.s.dModel);
      if (q.keepPromptHidden) q.result.promptLastHidden = h;
      if (q.halt?.(h)) { q.kv = null; this.complete(q, 'halted'); return; }
    }
    if (q.maxNew === 0) { q.kv = null; this.complete(q, 'length'); return; }
    this.choose(q, out.logits.subarray(0, this.s.vocabSize));
    if (q.finished && !q.wantFirstHidden) { q.kv = null; this.complete(q, q.result.finish); return; }
    let g = this.groups.get(q.groupKey);
    if (!g) {
      const c = this.s.config;
      g = { key: q.groupKey, kv: new RowKv(c.numLayers, c.numKvHeads, c.headDim, this.maxRunning, this.s.kvDType ?? 'f32'), seqs: [], rowSets: null };
      this.groups.set(g.key, g);
    }
    const kv = q.kv!;
    // the admitted sequences still prefilling for this group are about to join: one re-layout makes room for them too
    const coming = this.prefilling.filter((x) => x.groupKey === q.groupKey);
    // and the decode steps until the last of them joins: at most one per prefill chunk they still need (an iteration
    // runs one decode step and at least one chunk), so the buffer is not re-laid out mid-decode when they have
    const chunk = Math.max(1, this.stepTokens - g.seqs.length - 1 - coming.length);
    const steps = coming.reduce((a, x) => a + Math.ceil((x.ids.length - x.filled) / chunk), 0);
    const expect = { rows: coming.length, length: Math.max(0, ...coming.map((x) => x.ids.length)), steps };
    this.timed('rowKv', () => g.kv.addRow({ keys: kv.keys.map((t) => t.data as KvArray), values: kv.values.map((t) => t.data as KvArray), capacity: kvCapacity(kv), length: kv.length }, this.ahead(g, q), expect));
    g.seqs.push(q);
    q.kv = null;
  }

  /** slots a group's buffer should have room for when it is re-laid out: the decode steps its rows still want */
  private ahead(g: Group, extra?: Seq): number {
    let most = 1;
    for (const q of extra ? [...g.seqs, extra] : g.seqs) most = Math.max(most, q.maxNew - q.result.generatedIds.length + 1);
    return Math.min(most, KV_CHUNK);
  }

  /** greedy choice from one row of logits; marks the sequence finished at a stop id, its stopWhen or maxNewTokens */
  private choose(q: Seq, row: Float32Array): void {
    const t = performance.now();
    const tok = argmax(row);
    q.result.generatedIds.push(tok);
    if (q.wantStepLogits) q.stepLogits.push(row.slice());
    if (q.topK >= 0) q.result.logprobs!.push(tokenLogprob(row, tok, q.topK));
    if (q.stop.has(tok) || (q.stopWhen && this.stopsHere(q))) { q.finished = true; q.result.finish = 'stop'; } else if (q.result.generatedIds.length >= q.maxNew) { q.finished = true; q.result.finish = 'length'; }
    this.stats.seconds.choose += (performance.now() - t) / 1000;
  }

  /** the caller's stopWhen; one that throws ends its own sequence (rejected at completion), not the step's batch */
  private stopsHere(q: Seq): boolean {
    try {
      return q.stopWhen!(q.result.generatedIds, q.result.logprobs);
    } catch (e) {
      q.failed = { error: e };
      return true;
    }
  }

  /** one new token for every row of a group (finished rows only for the first token's hidden state) */
  private async decodeStep(g: Group): Promise<void> {
    this.timed('rowKv', () => g.kv.reserve(this.ahead(g)));
    const B = g.seqs.length;
    const fed = BigInt64Array.from(g.seqs, (q) => BigInt(q.result.generatedIds.at(-1)!));
    const hiddenRowsWanted: number[] = [];
    const logitRows: number[] = [];
    g.seqs.forEach((q, b) => {
      if ((q.wantFirstHidden && !q.result.firstTokenHidden) || (q.captureGen && q.captureLayers?.length !== 0)) hiddenRowsWanted.push(b);
      if (!q.finished) logitRows.push(b);
    });
    const past = g.kv.view();
    const { steer, project, hooks } = this.rowInterventions(g);
    const out = await this.timedStep(() => this.s.step({
      ids: fed, batch: B, width: 1, starts: past.starts, past, steer, project, ...(hooks ? { hooks } : {}),
      hiddenIndex: hiddenRowsWanted, logitsIndex: logitRows, reserve: 0,
    }));
    this.timed('rowKv', () => g.kv.advance(out.present!));
    this.stats.decodeSteps++;
    this.stats.decodeRows += B;
    this.stats.peakBatch = Math.max(this.stats.peakBatch, B);
    const L1 = this.s.numLayers + 1;
    const V = this.s.vocabSize;
    hiddenRowsWanted.forEach((b, i) => {
      const q = g.seqs[b]!;
      const h = hiddenRows(out.hidden, L1, hiddenRowsWanted.length, this.s.dModel, i, 1);
      if (q.wantFirstHidden && !q.result.firstTokenHidden) q.result.firstTokenHidden = h;
      if (q.captureGen && q.captureLayers?.length !== 0) q.result.capturedGenerated!.push(this.keptLayers(q, h));
    });
    g.seqs.forEach((q, b) => { if (q.captureGen && q.captureHooks.length > 0) q.hookGen.push(hookRow(out, q.captureHooks, b)); });
    logitRows.forEach((b, i) => this.choose(g.seqs[b]!, out.logits.subarray(i * V, (i + 1) * V)));
    this.dropRows(g, (q) => q.finished && !(q.wantFirstHidden && !q.result.firstTokenHidden), null);
  }

  /**
   * The decode step's interventions: the rows' one set when they all share it (steer and projections separately),
   * else one set per row, row b's at b (run/step.ts). Built again only when the rows changed since the last step.
   */
  private rowInterventions(g: Group): { steer: Float32Array; project: Projection; hooks: StepHooks | undefined } {
    const seqs = g.seqs;
    const first = seqs[0]!;
    const c = g.rowSets;
    const same = c !== null && c.seqs.length === seqs.length && c.seqs.every((q, b) => q === seqs[b]);
    if (!same) {
      const L1 = this.s.numLayers + 1;
      const d = this.s.dModel;
      const perRowSteer = seqs.some((q) => q.steerKey !== first.steerKey);
      const perRowProject = seqs.some((q) => q.projectKey !== first.projectKey);
      const stack = (part: (q: Seq) => Float32Array, per: number) => {
        const out = new Float32Array(seqs.length * per);
        seqs.forEach((q, b) => out.set(part(q), b * per));
        return out;
      };
      g.rowSets = {
        seqs: [...seqs],
        steer: perRowSteer ? stack((q) => q.decodeIv.steer, L1 * d) : null,
        project: perRowProject ? { dir: stack((q) => q.decodeIv.dir, L1 * d), value: stack((q) => q.decodeIv.value, L1) } : null,
        hooks: first.hooks && rowHooks(seqs, first.hooks),
      };
    }
    return { steer: g.rowSets!.steer ?? first.decodeIv.steer, project: g.rowSets!.project ?? first.decodeIv, hooks: g.rowSets!.hooks };
  }

  /** remove the rows whose sequence `leaves` (finish as given, or its own), completing them */
  private dropRows(g: Group, leaves: (q: Seq) => boolean, finish: GenerateResult['finish'] | null): void {
    for (let b = g.seqs.length - 1; b >= 0; b--) {
      const q = g.seqs[b]!;
      if (!leaves(q)) continue;
      const moved = this.timed('rowKv', () => g.kv.removeRow(b));
      if (moved >= 0) g.seqs[b] = g.seqs[moved]!;
      g.seqs.pop();
      this.complete(q, finish ?? q.result.finish);
    }
    if (g.seqs.length === 0) this.groups.delete(g.key);
  }

  private complete(q: Seq, finish: GenerateResult['finish']): void {
    q.result.finish = finish;
    if (q.capturePrompt && q.captureLayers?.length !== 0) {
      // [K, n, d] in the order the positions were given (a cancelled or failed prefill leaves zeros)
      const L1 = q.captureLayers?.length ?? this.s.numLayers + 1;
      const d = this.s.dModel;
      const n = q.capturePrompt.length;
      const m = new Float32Array(L1 * n * d);
      q.capturePrompt.forEach((p, i) => {
        const h = q.captured.get(p);
        for (let l = 0; h && l < L1; l++) m.set(h.subarray(l * d, (l + 1) * d), (l * n + i) * d);
      });
      q.result.capturedPrompt = m;
      q.captured.clear();
    }
    if (q.captureHooks.length > 0) {
      const rows = [...(q.capturePrompt ?? []).map((p) => q.hookPrompt.get(p)), ...q.hookGen];
      q.result.capturedHooks = Object.fromEntries(q.captureHooks.map((name) => {
        const w = rows.find((r) => r)?.[name]?.length ?? 0;
        const m = new Float32Array(rows.length * w);
        rows.forEach((r, i) => { if (r) m.set(r[name]!, i * w); });
        return [name, m];
      }));
      q.hookPrompt.clear();
      q.hookGen = [];
    }
    if (q.wantStepLogits) {
      const V = this.s.vocabSize;
      const m = new Float32Array(q.stepLogits.length * V);
      q.stepLogits.forEach((row, k) => m.set(row, k * V));
      q.result.stepLogits = m;
      q.stepLogits = [];
    }
    this.stats.sequences++;
    if (q.failed) q.reject(q.failed.error);
    else q.resolve(q.result);
  }
}

/**
 * The hook feeds of a decode step whose rows edit the same points: a feed shared by every row as it is ([1, w]), else
 * one row per sequence ([B, w]); a point's direction and value go per row together (one mask for both, hook-edit.ts).
 */
function rowHooks(seqs: readonly Seq[], first: StepHooks): StepHooks {
  const differs = (name: string) => seqs.some((q) => q.hookKeys[name] !== seqs[0]!.hookKeys[name]);
  const stacked = (name: string) => {
    const f = first.feeds[name]!;
    const per = f.data.length;
    const data = new Float32Array(seqs.length * per);
    seqs.forEach((q, b) => data.set(q.hooks!.feeds[name]!.data, b * per));
    return { data, dims: [seqs.length, ...f.dims.slice(1)] };
  };
  const feeds: StepHooks['feeds'] = {};
  for (const point of first.selection.edit) {
    const projection = differs(HOOK_IO.dir(point)) || differs(HOOK_IO.value(point));
    for (const name of [HOOK_IO.keep(point), HOOK_IO.set(point), HOOK_IO.dir(point), HOOK_IO.value(point)]) {
      const perRow = name === HOOK_IO.dir(point) || name === HOOK_IO.value(point) ? projection : differs(name);
      feeds[name] = perRow ? stacked(name) : first.feeds[name]!;
    }
  }
  return { selection: first.selection, feeds };
}

/** row `row` ([BT, width] flat row index) of each captured hook point's output of a step */
function hookRow(out: StepOutput, names: readonly string[], row: number): Record<string, Float32Array> {
  return Object.fromEntries(names.map((name) => {
    const o = out.hooks?.[HOOK_IO.output(name)];
    if (!o) throw new Error(`scheduler: the step returned no ${name}`);
    const w = o.dims[o.dims.length - 1]!;
    return [name, o.data.slice(row * w, (row + 1) * w)];
  }));
}

/** OpenAI's bound on `top_logprobs` */
export const MAX_TOP_LOGPROBS = 20;

/**
 * The chosen token's log probability (log-softmax of the row, in float64) and the k most likely tokens' (ties by
 * lower id), one pass over the row keeping the k best in order.
 */
export function tokenLogprob(row: Float32Array, token: number, k: number): TokenLogprob {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i]! > max) max = row[i]!;
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i]! - max);
  const lse = max + Math.log(sum);
  const best: number[] = [];
  for (let i = 0; i < row.length && k > 0; i++) {
    const x = row[i]!;
    if (best.length === k && !(x > row[best[k - 1]!]!)) continue;
    let j = best.length;
    while (j > 0 && row[best[j - 1]!]! < x) j--;
    best.splice(j, 0, i);
    if (best.length > k) best.pop();
  }
  return { token, logprob: row[token]! - lse, top: best.map((t) => ({ token: t, logprob: row[t]! - lse })) };
}

function positive(x: number, what: string): number {
  if (!Number.isInteger(x) || x < 1) throw new SafekeepError(`${what} must be a positive integer, got ${x}`);
  return x;
}
