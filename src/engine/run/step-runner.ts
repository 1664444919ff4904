/**
 * The scheduler's step runner: it executes what the planner (scheduler.ts) decided — one decode step for a group's
 * rows, one prefill chunk of a sequence, one packed prefill of several prompts' rests — on the engine's `step`, with
 * the past the KV manager (kv-manager.ts) gives it and the present handed back to it; and it turns the outputs into
 * each row's results: hidden states and captures (capture-recorder.ts), and the next token, chosen per row from that
 * row's logits (`chooseNext`: the row's `NextToken`, greedy today; a sampler plugs in there, next-token.ts).
 */
import { KV_CHUNK } from '../runtime/kv.ts';
import type { KvManager } from './kv-manager.ts';
import type { PackLayout } from './prefill-pack.ts';
import { decodeSets, prefillSets } from './row-edits.ts';
import { timed, timedAsync, type SchedulerStats } from './scheduler-stats.ts';
import { awaitsFirstHidden, type Group, type Seq } from './sequence.ts';
import { hiddenRows, type StepInput, type StepOutput, type Stepper } from './step.ts';

/** what a sequence's last prefill step left for `firstToken`: the prompt's last hidden state and its logits */
interface PrefillOut {
  hidden: Float32Array;
  logits: Float32Array;
}

/** slots a group's buffer should have room for when it is re-laid out: the decode steps its rows still want */
export function aheadOf(seqs: readonly Seq[]): number {
  let most = 1;
  for (const q of seqs) most = Math.max(most, q.maxNew - q.result.generatedIds.length + 1);
  return Math.min(most, KV_CHUNK);
}

export class StepRunner {
  /** the last prefill step's outputs, until `firstToken` reads them */
  private readonly prefillOut = new WeakMap<Seq, PrefillOut>();

  constructor(private readonly s: Stepper, private readonly kv: KvManager, private readonly stats: SchedulerStats) {}

  /** a model step, its wall time added to stats.seconds.steps */
  private run(f: () => Promise<StepOutput>): Promise<StepOutput> {
    return timedAsync(this.stats, 'steps', f);
  }

  /**
   * The seam where a row's next token is chosen: row `logits` [V] of a step is handed to the row's own `NextToken`
   * (greedy today; a sampler per row, with its own seed, is given to the row instead), which records it and marks
   * the row finished at a stop.
   */
  chooseNext(q: Seq, logits: Float32Array): void {
    timed(this.stats, 'choose', () => q.next.accept(q.result, logits));
  }

  /** one new token for every row of a group (finished rows only for the first token's hidden state) */
  async decode(g: Group): Promise<void> {
    await this.kv.reserve(g.key, aheadOf(g.seqs));
    const B = g.seqs.length;
    const fed = BigInt64Array.from(g.seqs, (q) => BigInt(q.result.generatedIds.at(-1)!));
    const hiddenRowsWanted: number[] = [];
    const logitRows: number[] = [];
    g.seqs.forEach((q, b) => {
      if (awaitsFirstHidden(q) || q.capture.wantsGeneratedHidden) hiddenRowsWanted.push(b);
      if (!q.next.finished) logitRows.push(b);
    });
    const past = this.kv.view(g.key);
    const { steer, project, hooks } = this.decodeSets(g);
    const out = await this.run(() => this.s.step({
      ids: fed, batch: B, width: 1, starts: past.starts, past, steer, project, ...(hooks ? { hooks } : {}),
      hiddenIndex: hiddenRowsWanted, logitsIndex: logitRows, reserve: 0, ...(this.s.kvOnDevice ? { keepOnDevice: true } : {}),
    }));
    this.kv.advance(g.key, out.present!);
    this.stats.decodeSteps++;
    this.stats.decodeRows += B;
    this.stats.peakBatch = Math.max(this.stats.peakBatch, B);
    const L1 = this.s.numLayers + 1;
    const d = this.s.dModel;
    const V = this.s.vocabSize;
    hiddenRowsWanted.forEach((b, i) => {
      const q = g.seqs[b]!;
      const h = hiddenRows(out.hidden, L1, hiddenRowsWanted.length, d, i, 1);
      if (awaitsFirstHidden(q)) q.result.firstTokenHidden = h;
      if (q.capture.wantsGeneratedHidden) q.capture.generatedHidden(q.result, h, d);
    });
    g.seqs.forEach((q, b) => q.capture.generatedHooks(out, b));
    logitRows.forEach((b, i) => this.chooseNext(g.seqs[b]!, out.logits.subarray(i * V, (i + 1) * V)));
  }

  /** the group's decode sets, built again only when its rows changed since the last step */
  private decodeSets(g: Group) {
    const seqs = g.seqs;
    const c = g.rowSets;
    const same = c !== null && c.seqs.length === seqs.length && c.seqs.every((q, b) => q === seqs[b]);
    if (!same) g.rowSets = { seqs: [...seqs], sets: decodeSets(seqs.map((q) => q.edits), this.s.numLayers, this.s.dModel) };
    return g.rowSets!.sets;
  }

  /** Run the next T tokens of q's prefill. */
  async prefillChunk(q: Seq, T: number): Promise<void> {
    const n = q.ids.length;
    const p = q.prefill;
    const last = p.filled + T === n;
    const ids = BigInt64Array.from(q.ids.slice(p.filled, p.filled + T), (x) => BigInt(x));
    // captured prompt positions in this chunk come first in the hidden output, the last prompt token's after them
    const from = p.filled;
    const cap = q.capture.promptIn(from, T);
    // the hidden rows only when some layer is kept (a capture of hook points alone reads none)
    const capH = q.capture.wantsHidden ? cap : [];
    const wantLast = last && q.wantPromptHidden;
    const iv = q.edits.prefillIv;
    // a step with captured hook points is one graph run (chunkedStep cannot split its outputs); its T is within the budget
    const run = q.capture.hooks.length > 0 ? (inp: StepInput) => this.s.step(inp) : (inp: StepInput) => this.s.prefill(inp);
    const out = await this.run(() => run({
      ids, batch: 1, width: T, starts: [0], past: p.kv, steer: iv.steer, project: iv, ...(q.edits.hooks ? { hooks: q.edits.hooks } : {}),
      hiddenIndex: [...capH.map((x) => x - from), ...(wantLast ? [T - 1] : [])],
      logitsIndex: last && q.maxNew > 0 ? [T - 1] : [],
      ropeLength: [n], // dynamic-NTK RoPE: the whole prompt's length in every chunk, as one prefill step
      reserve: n - p.filled - T,
    }));
    this.kv.setPrefill(q, out.present);
    this.afterChunk(q, T);
    if (q.capture.hooks.length > 0) for (const x of cap) q.capture.promptHooks(x, out, x - from);
    if (capH.length === 0) {
      if (last) this.prefillOut.set(q, out);
      return;
    }
    const L1 = this.s.numLayers + 1;
    const d = this.s.dModel;
    const N = capH.length + (wantLast ? 1 : 0);
    capH.forEach((x, i) => q.capture.promptHidden(x, hiddenRows(out.hidden, L1, N, d, i, 1), d));
    if (last) this.prefillOut.set(q, { hidden: wantLast ? hiddenRows(out.hidden, L1, N, d, capH.length, 1) : new Float32Array(0), logits: out.logits });
  }

  /** q's KV holds T more prompt tokens */
  private afterChunk(q: Seq, T: number): void {
    this.kv.afterChunk(q, T);
    this.stats.prefillChunks++;
    this.stats.prefillTokens += T;
  }

  /**
   * Prefill the rest of every sequence of a pack in one step (layout: prefill-pack.ts). Throws when the step fails
   * (the caller rejects the pack's sequences).
   */
  async pack(seqs: Seq[], lay: PackLayout): Promise<void> {
    const L = this.s.numLayers;
    const B = seqs.length;
    const W = lay.width;
    try {
      const ids = new BigInt64Array(B * W);
      seqs.forEach((q, b) => {
        const r = lay.rows[b]!;
        const toks = q.ids.slice(r.from, q.ids.length);
        ids.set(BigInt64Array.from(toks, (x) => BigInt(x)), b * W + W - toks.length);
      });
      const starts = lay.rows.map((r) => r.start);
      const past = this.kv.packPast(seqs, lay);
      const hiddenRowsWanted = seqs.flatMap((q, b) => (q.wantPromptHidden ? [b] : []));
      const logitRows = seqs.flatMap((q, b) => (q.maxNew > 0 ? [b] : []));
      const { steer, project } = prefillSets(seqs.map((q) => q.edits));
      const out = await this.run(() => this.s.step({
        ids, batch: B, width: W, starts, past, steer, project,
        hiddenIndex: hiddenRowsWanted.map((b) => b * W + W - 1), logitsIndex: logitRows.map((b) => b * W + W - 1),
        ropeLength: seqs.map((q) => q.ids.length), reserve: 0,
      }));
      const V = this.s.vocabSize;
      const L1 = L + 1;
      const present = out.present!;
      seqs.forEach((q, b) => {
        const kept = lay.rows[b]!.kept;
        this.kv.appendPacked(q, present, b, kept);
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
      for (const q of seqs) { this.kv.release(q); this.prefillOut.delete(q); }
      throw e;
    }
  }

  /**
   * After q's last prefill chunk: its prompt hidden state (and the caller's halt), then its first token. Returns how
   * the sequence goes on: 'decode' (it joins its decode group), or the finish it completes with now.
   */
  firstToken(q: Seq): 'decode' | 'halted' | 'length' | 'stop' {
    const out = this.prefillOut.get(q)!;
    this.prefillOut.delete(q);
    if (q.wantPromptHidden) {
      const h = out.hidden.slice(0, (this.s.numLayers + 1) * this.s.dModel);
      if (q.keepPromptHidden) q.result.promptLastHidden = h;
      if (q.halt?.(h)) return 'halted';
    }
    if (q.maxNew === 0) return 'length';
    this.chooseNext(q, out.logits.subarray(0, this.s.vocabSize));
    if (q.next.finished && !q.wantFirstHidden) return q.result.finish === 'stop' ? 'stop' : 'length';
    return 'decode';
  }
}
