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
 * within it the rows' edit values are per row too (keep/set/dir/value one row each). Sparse autoencoders
 * (GenerateOptions.saes, sae-rows.ts) are part of the selection: rows splicing the same dictionaries the same way decode
 * together, each with its own feature edits (the SAE's keep/set/add one row each).
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
 *
 * Roles (as vLLM splits them): this file is the planner — the queues, admission, which rows decode and which prefill
 * chunks or packs run within the step budget, and when a sequence completes; kv-manager.ts owns every slot of K/V
 * (prompt KV, the decode buffers, the prefix cache) and the copies between them; step-runner.ts executes the steps
 * and turns their outputs into results, choosing each row's next token through the row's own `NextToken`
 * (next-token.ts). A row is a `Seq` (sequence.ts): its request, its edits (row-edits.ts), its capture recorder
 * (capture-recorder.ts), its token choice and its prefill's KV state.
 */
import { SafekeepError } from '../../util/errors.ts';
import type { GenerateOptions, GenerateResult } from './types.ts';
import type { InterventionInputs } from './batch.ts';
import { CaptureRecorder } from './capture-recorder.ts';
import { generationInputs } from './generation-inputs.ts';
import { KvManager } from './kv-manager.ts';
import { NextToken } from './next-token.ts';
import { tokenChooser } from './choose-token.ts';
import { isGreedy } from '../sample/settings.ts';
import { choosePack, packLayout, type PackLayout } from './prefill-pack.ts';
import { RowEdits } from './row-edits.ts';
import { emptyStats, type SchedulerStats } from './scheduler-stats.ts';
import { awaitsFirstHidden, type Group, type Seq } from './sequence.ts';
import { aheadOf, StepRunner } from './step-runner.ts';
import type { StepHooks, Stepper } from './step.ts';

export type { SchedulerStats } from './scheduler-stats.ts';
export { MAX_TOP_LOGPROBS, tokenLogprob } from './next-token.ts';

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
   * prompts that must ask for a prefix-cache block before it is stored (default 2: only prefixes another prompt shares
   * are copied into the cache; 1 stores every prompt's blocks — runtime/kv-blocks.ts, admission)
   */
  prefixAdmitAfter?: number;
  /**
   * most tokens per row of a packed prefill step (run/prefill-pack.ts: the last chunks of several prompts as the rows
   * of one step; default 128, 0 = every prefill chunk its own step)
   */
  packTokens?: number;
}

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

export class Scheduler {
  readonly stats: SchedulerStats = emptyStats();
  stepTokens: number;
  maxRunning: number;
  packTokens: number;
  private readonly kv: KvManager;
  private readonly runner: StepRunner;
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
    const prefixCacheBytes = o.prefixCacheBytes ?? s.memoryPlan?.prefixCacheBytes ?? DEFAULT_PREFIX_BYTES;
    const blockTokens = () => positive(o.blockTokens ?? 16, 'blockTokens');
    this.kv = new KvManager(s.config, s.kvDType ?? 'f32', this.stats, { prefixCacheBytes, blockTokens, prefixAdmitAfter: positive(o.prefixAdmitAfter ?? 2, 'prefixAdmitAfter'), maxRows: () => this.maxRunning }, s.deviceKv && ((ts) => s.deviceKv!.readback(ts)));
    this.runner = new StepRunner(s, this.kv, this.stats);
  }

  /** the prefix cache (null when off: a dynamic-NTK RoPE makes a prefix's KV depend on the whole prompt's length) */
  get prefixStore() {
    return this.kv.prefixStore;
  }

  /** the host bytes of K/V the scheduler holds now (decode buffers, prefix-cache blocks, prompt KV of prefilling rows) */
  heldKvBytes(): { decodeKv: number; prefixStore: number; prefillKv: number } {
    return this.kv.heldBytes(this.prefilling);
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
    const { prefillIv, decodeIv, hooks, sampling } = generationInputs(this.s, [ids], opts);
    return this.enqueue(ids, sampling === opts.sampling ? opts : { ...opts, sampling }, prefillIv, decodeIv, undefined, hooks);
  }

  /** `submit` with the interventions already resolved (generate() resolves a call's once for all its rows) */
  enqueue(ids: number[], opts: GenerateOptions, prefillIv: InterventionInputs, decodeIv: InterventionInputs, halt?: (h: Float32Array) => boolean, hooks?: StepHooks): Promise<GenerateResult> {
    const capture = new CaptureRecorder(opts.capture, ids.length, this.s.numLayers);
    // captured hook points are outputs of the sequence's graph: they join its selection (its edits kept)
    if (capture.hooks.length > 0) hooks = { selection: { ...hooks?.selection, capture: [...capture.hooks], edit: hooks?.selection.edit ?? [] }, feeds: hooks?.feeds ?? {} };
    // the row's own choice: greedy, or its sampling with its seed (choose-token.ts)
    const next = new NextToken(opts, this.s.eosIds, opts.maxNewTokens, tokenChooser(opts.sampling, ids));
    return new Promise<GenerateResult>((resolve, reject) => {
      const seq: Seq = {
        ids, maxNew: opts.maxNewTokens,
        wantFirstHidden: !!opts.returnFirstTokenHidden && opts.maxNewTokens > 0,
        wantPromptHidden: !!opts.returnPromptLastHidden || !!opts.haltAfterPrefill,
        keepPromptHidden: !!opts.returnPromptLastHidden,
        halt: halt ?? (opts.haltAfterPrefill ? (h) => opts.haltAfterPrefill!(0, h) : undefined),
        signal: opts.signal,
        edits: new RowEdits(prefillIv, decodeIv, hooks),
        capture, next,
        prefill: { kv: null, filled: 0, chain: null, keys: null, stored: 0 },
        result: {
          generatedIds: [], finish: 'length', ...(capture.generated ? { capturedGenerated: [] } : {}), ...(next.topK >= 0 ? { logprobs: [] } : {}),
          ...(opts.sampling && !isGreedy(opts.sampling) ? { seed: opts.sampling.seed } : {}),
        },
        resolve, reject,
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

  /** one scheduling round: reap cancelled, admit, one decode step (one per hook-edit group), prefill chunks within the budget */
  private async iteration(): Promise<void> {
    await this.reapCancelled();
    this.admit();
    let decodeTokens = 0;
    for (const g of [...this.groups.values()]) {
      if (g.seqs.length === 0) { this.dropGroup(g); continue; }
      decodeTokens += g.seqs.length;
      try {
        await this.runner.decode(g);
        await this.dropRows(g, (q) => q.next.finished && !awaitsFirstHidden(q), null);
      } catch (e) {
        this.dropGroup(g);
        for (const q of g.seqs) q.reject(e);
      }
    }
    // prefill: chunks of the prefilling sequences in order while they fit the budget left (the first always runs);
    // a sequence whose prompt is not done after its chunk waits for the next iteration, so decode steps interleave
    const full = Math.max(1, this.stepTokens - decodeTokens);
    let budget = full;
    while (this.prefilling.length) {
      const q = this.prefilling[0]!;
      if (q.prefill.chain === null && q.prefill.filled === 0) this.kv.startPrefill(q); // a prefix hit shortens what is left
      const T = this.chunkTokens(q, full);
      if (budget < full && T > budget) break;
      const pack = T === q.ids.length - q.prefill.filled ? this.packWith(q, budget) : null;
      if (pack) {
        budget -= pack.seqs.length * pack.layout.width;
        await this.runPack(pack.seqs, pack.layout);
        continue;
      }
      try {
        await this.runner.prefillChunk(q, T);
        budget -= T;
        if (q.prefill.filled < q.ids.length) break;
        this.prefilling.shift();
        await this.endPrefill(q); // may throw: a caller's haltAfterPrefill
      } catch (e) {
        if (this.prefilling[0] === q) this.prefilling.shift();
        this.kv.release(q);
        q.reject(e);
      }
    }
  }

  /** a failure outside any one sequence's step: every sequence in flight is rejected with it */
  private failAll(e: unknown): void {
    const all = [...this.waiting.splice(0), ...this.prefilling.splice(0), ...[...this.groups.values()].flatMap((g) => g.seqs)];
    for (const g of [...this.groups.values()]) this.dropGroup(g);
    for (const q of all) q.reject(e);
  }

  private async reapCancelled(): Promise<void> {
    const cancelled = (q: Seq) => q.signal?.aborted === true;
    for (const list of [this.waiting, this.prefilling]) {
      for (let i = list.length - 1; i >= 0; i--) {
        if (cancelled(list[i]!)) { const [q] = list.splice(i, 1); this.kv.release(q!); this.complete(q!, 'cancelled'); }
      }
    }
    for (const g of [...this.groups.values()]) await this.dropRows(g, (q) => !q.next.finished && cancelled(q), 'cancelled');
  }

  /** waiting → prefilling while fewer than maxRunning are in flight and (under a memory plan) the decode batch fits */
  private admit(): void {
    if (this.waiting.length === 0) return;
    // rows whose decode sets differ are fed one set each (stacked per row): counted in the step when any differ
    const keys = new Set<string>();
    for (const q of [...this.waiting, ...this.prefilling, ...[...this.groups.values()].flatMap((g) => g.seqs)]) keys.add(`${q.edits.steerKey}|${q.edits.projectKey}`);
    const perRow = keys.size > 1;
    const fits = this.s.memoryFits((B, P) => [{ batch: B, width: 1, past: P, hidden: B, logits: B, present: true, sets: perRow ? B : 0 }]);
    let running = this.prefilling.length;
    let rows = 0;
    let span = 0;
    for (const g of this.groups.values()) { running += g.seqs.length; rows += g.seqs.length; span = Math.max(span, this.kv.slotCapacity(g.key)); }
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

  /**
   * The prefilling sequences whose whole rest joins q's in one packed step (prefill-pack.ts), or null for q alone.
   * Candidates: no hook edits (their captures and per-step feeds stay one sequence per step), no captured prompt
   * positions, any prefill interventions (different ones fed per token row, within PACK_MAX_SET_BYTES), and not
   * waiting for a prefix a pack member is about to compute — a prompt whose first uncached block is one of a
   * member's computes it once, in a later step, from the member's stored blocks instead of twice.
   */
  private packWith(q: Seq, budget: number): { seqs: Seq[]; layout: PackLayout } | null {
    const alone = (y: Seq) => !!y.edits.hooks || !!y.capture.promptPositions;
    if (this.packTokens === 0 || alone(q) || this.prefilling.length < 2 || q.ids.length - q.prefill.filled > this.packTokens) return null;
    const claimed = new Set(this.kv.keysOf(q));
    const seqs = [q];
    const limits = { maxWidth: this.packTokens, budget, maxWaste: PACK_MAX_WASTE, maxMaskedPast: PACK_MAX_MASKED_PAST };
    const chunkOf = (y: Seq) => ({ filled: y.prefill.filled, end: y.ids.length });
    for (const x of this.prefilling.slice(1)) {
      if (alone(x)) continue;
      // a sequence not started is looked at by what its prefix lookup would give now, and started only when it joins
      // (one left out stays unstarted: its lookup, later, finds what this pack stores)
      let chunk = chunkOf(x);
      const fresh = x.prefill.chain === null && x.prefill.filled === 0;
      if (fresh) {
        const ahead = this.kv.lookAhead(x);
        if (ahead.firstMissing !== undefined && claimed.has(ahead.firstMissing)) continue;
        chunk = { filled: ahead.filled, end: x.ids.length };
      }
      const chunks = [...seqs.map(chunkOf), chunk];
      const lay = packLayout(chunks);
      // rows whose prefill interventions differ feed one set per token row (the step expands a row's set over its slots)
      const perRow = [...seqs, x].some((y) => y.edits.prefillSalt !== q.edits.prefillSalt);
      if (perRow && chunks.length * lay.width * this.setBytes > PACK_MAX_SET_BYTES) continue;
      const fits = this.s.memoryFits((B, W) => [{ batch: B, width: W, past: lay.past, hidden: B, logits: B, present: true, sets: perRow ? B * W : 0 }]);
      if (choosePack(chunks, limits, fits ? (l) => fits(chunks.length, l.width) : undefined).length < chunks.length) continue;
      if (fresh) this.kv.startPrefill(x);
      seqs.push(x);
      for (const k of this.kv.keysOf(x)) claimed.add(k);
    }
    return seqs.length > 1 ? { seqs, layout: packLayout(seqs.map(chunkOf)) } : null;
  }

  /**
   * A pack's step, then each sequence joins its decode group. A failed step rejects the pack's sequences; a caller's
   * haltAfterPrefill throwing rejects only its own.
   */
  private async runPack(seqs: Seq[], lay: PackLayout): Promise<void> {
    for (const q of seqs) this.prefilling.splice(this.prefilling.indexOf(q), 1);
    try {
      await this.runner.pack(seqs, lay);
    } catch (e) {
      for (const q of seqs) q.reject(e);
      return;
    }
    for (const q of seqs) {
      try {
        await this.endPrefill(q);
      } catch (e) {
        this.kv.release(q);
        q.reject(e);
      }
    }
  }

  /**
   * The next chunk of q's prompt under a per-iteration budget: the rest when it fits, else even chunks (700 tokens in
   * a 512 budget: 350 + 350, not 512 + 188, so no chunk is a short tail; causalChunk in chunked.ts measured why).
   */
  private chunkTokens(q: Seq, budget: number): number {
    const rest = q.ids.length - q.prefill.filled;
    return rest <= budget ? rest : Math.ceil(rest / Math.ceil(rest / budget));
  }

  /** after the last chunk: the first token (runner), then the sequence joins its decode group or completes */
  private async endPrefill(q: Seq): Promise<void> {
    const next = this.runner.firstToken(q);
    if (next !== 'decode') { this.kv.release(q); this.complete(q, next); return; }
    const key = q.edits.groupKey;
    let g = this.groups.get(key);
    if (!g) {
      g = { key, seqs: [], rowSets: null };
      this.groups.set(key, g);
    }
    // the admitted sequences still prefilling for this group are about to join: one re-layout makes room for them too
    const coming = this.prefilling.filter((x) => x.edits.groupKey === key);
    // and the decode steps until the last of them joins: at most one per prefill chunk they still need (an iteration
    // runs one decode step and at least one chunk), so the buffer is not re-laid out mid-decode when they have
    const chunk = Math.max(1, this.stepTokens - g.seqs.length - 1 - coming.length);
    const steps = coming.reduce((a, x) => a + Math.ceil((x.ids.length - x.prefill.filled) / chunk), 0);
    const expect = { rows: coming.length, length: Math.max(0, ...coming.map((x) => x.ids.length)), steps };
    g.seqs.push(q);
    try {
      await this.kv.join(key, q, aheadOf(g.seqs), expect);
    } catch (e) {
      g.seqs.pop();
      throw e;
    }
  }

  /** remove the rows whose sequence `leaves` (finish as given, or its own), completing them */
  private async dropRows(g: Group, leaves: (q: Seq) => boolean, finish: GenerateResult['finish'] | null): Promise<void> {
    for (let b = g.seqs.length - 1; b >= 0; b--) {
      const q = g.seqs[b]!;
      if (!leaves(q)) continue;
      const moved = await this.kv.removeRow(g.key, b);
      if (moved >= 0) g.seqs[b] = g.seqs[moved]!;
      g.seqs.pop();
      this.complete(q, finish ?? q.result.finish);
    }
    if (g.seqs.length === 0) this.dropGroup(g);
  }

  private dropGroup(g: Group): void {
    this.groups.delete(g.key);
    this.kv.dropGroup(g.key);
  }

  private complete(q: Seq, finish: GenerateResult['finish']): void {
    q.result.finish = finish;
    q.capture.finish(q.result, this.s.numLayers + 1, this.s.dModel);
    q.next.finish(q.result, this.s.vocabSize);
    this.stats.sequences++;
    if (q.next.failed) q.reject(q.next.failed.error);
    else q.resolve(q.result);
  }
}

function positive(x: number, what: string): number {
  if (!Number.isInteger(x) || x < 1) throw new SafekeepError(`${what} must be a positive integer, got ${x}`);
  return x;
}
