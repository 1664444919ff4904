/**
 * A row's next token: how the step runner turns the row of logits [V] that a step returned for a sequence into the
 * token it feeds back, and what the sequence records of that choice (step logits, log probabilities) and when it
 * stops. `choose` is per row, so rows of one decode step may choose differently: a row is greedy
 * (`greedy`: torch.argmax's first maximum) unless the row samples: then its `TokenChooser` (run/choose-token.ts: its
 * settings, its seed, its own history) is the `ChooseNext` given when it is enqueued.
 */
import { SafekeepError } from '../../util/errors.ts';
import type { GenerateOptions, GenerateResult, TokenLogprob } from './types.ts';
import { argmax } from './argmax.ts';

/** the token a row feeds back, from its row of logits [V] (called once per generated token, in order) */
export type ChooseNext = (logits: Float32Array) => number;

/** greedy decoding: the first index of the maximum */
export const greedy: ChooseNext = (logits) => argmax(logits);

/** OpenAI's bound on `top_logprobs` */
export const MAX_TOP_LOGPROBS = 20;

/** A row's token choice and the bookkeeping around it. */
export class NextToken {
  /** the row's choice: `greedy`, or its sampler (run/choose-token.ts) */
  readonly choose: ChooseNext;
  /** ids that end the sequence */
  private readonly stop: Set<number>;
  private readonly stopWhen: GenerateOptions['stopWhen'];
  /** top log probabilities per chosen token (-1 = no log probabilities) */
  readonly topK: number;
  private readonly wantStepLogits: boolean;
  private stepLogits: Float32Array[] = [];
  /** what the caller's stopWhen threw: the sequence ends rejected with it */
  failed: { error: unknown } | null = null;
  /** no more tokens wanted */
  finished = false;

  constructor(opts: GenerateOptions, eosIds: readonly number[], private readonly maxNew: number, choose?: ChooseNext) {
    this.choose = choose ?? greedy;
    const topK = opts.topLogprobs ?? -1;
    if (opts.topLogprobs !== undefined && (!Number.isInteger(topK) || topK < 0 || topK > MAX_TOP_LOGPROBS)) throw new SafekeepError(`topLogprobs must be an integer 0..${MAX_TOP_LOGPROBS}, got ${opts.topLogprobs}`);
    this.topK = topK;
    this.stop = new Set(opts.stopIds ?? eosIds);
    this.stopWhen = opts.stopWhen;
    this.wantStepLogits = !!opts.returnStepLogits;
  }

  /** choose from one row of logits into `result`; marks the row finished at a stop id, its stopWhen or maxNewTokens */
  accept(result: GenerateResult, row: Float32Array): void {
    const tok = this.choose(row);
    result.generatedIds.push(tok);
    if (this.wantStepLogits) this.stepLogits.push(row.slice());
    if (this.topK >= 0) result.logprobs!.push(tokenLogprob(row, tok, this.topK));
    if (this.stop.has(tok) || (this.stopWhen && this.stopsHere(result.generatedIds, result.logprobs))) { this.finished = true; result.finish = 'stop'; } else if (result.generatedIds.length >= this.maxNew) { this.finished = true; result.finish = 'length'; }
  }

  /** the caller's stopWhen; one that throws ends its own sequence (rejected at completion), not the step's batch */
  private stopsHere(ids: readonly number[], logprobs: readonly TokenLogprob[] | undefined): boolean {
    try {
      return this.stopWhen!(ids, logprobs);
    } catch (e) {
      this.failed = { error: e };
      return true;
    }
  }

  /** the step logits kept ([k, V]) into the result */
  finish(result: GenerateResult, V: number): void {
    if (!this.wantStepLogits) return;
    const m = new Float32Array(this.stepLogits.length * V);
    this.stepLogits.forEach((row, k) => m.set(row, k * V));
    result.stepLogits = m;
    this.stepLogits = [];
  }
}

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
