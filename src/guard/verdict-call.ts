/**
 * `askVerdict(backend, call, policy)`: one YES/NO call to a guard LLM — the chat call, the strict parse of its answer
 * (`verdict.ts`), unsafe or not under the policy for unparseable answers (fail closed unless 'safe'), and the call's
 * latency and tokens. The SafeKeep judge (`judge.ts`) and the S³ checks that ask an LLM (`s3/checks/llm.ts`,
 * `s3/checks/skill-text.ts`) all go through it, so a verdict means the same thing in each of them.
 *
 * A backend error propagates as it is: none of the callers turns a failed call into a verdict.
 */
import { SafekeepError } from '../util/errors.ts';
import type { ChatBackend, ChatCall, JudgeResult, UnparseablePolicy } from './types.ts';
import { isUnsafe, parseVerdict } from './verdict.ts';

export interface VerdictPolicy {
  /** an answer neither YES nor NO: 'unsafe' (default, fail closed) or 'safe' */
  onUnparseable?: UnparseablePolicy;
  /**
   * Where the verdict is read: 'answer' = the whole answer (the SafeKeep judge answers one word), 'first-line' = its
   * first line only (the S³ protocols put EVIDENCE lines after the verdict, and those must not make it unclear).
   */
  readFrom?: 'answer' | 'first-line';
  /**
   * A reply cut off by its caller's signal: 'throw' = it judged nothing, so no verdict (the SafeKeep judge, whose
   * unparseable verdict would go on to a refusal); 'parse' (default) = its text so far is the answer, which an S³
   * check reads like any other (an unclear one then fails closed).
   */
  onCancelled?: 'throw' | 'parse';
  /**
   * When the latency clock started (`performance.now()`); default just before the call. The callers start it
   * before building their prompt, so the latency they report includes that work, as it always has.
   */
  startedAt?: number;
}

/** The verdict of one guard call. Same shape as the judge's public result. */
export type VerdictAnswer = JudgeResult;

export async function askVerdict(backend: ChatBackend, call: ChatCall, policy: VerdictPolicy = {}): Promise<VerdictAnswer> {
  const t0 = policy.startedAt ?? performance.now();
  const reply = await backend.chat(call);
  if (reply.finish === 'cancelled' && policy.onCancelled === 'throw') throw new SafekeepError('the judge call was cancelled');
  // a cached reply carries the latency of the call that produced it, not the lookup's
  const latencyMs = reply.cached ? reply.latencyMs : performance.now() - t0;
  const answer = policy.readFrom === 'first-line' ? reply.content.split('\n')[0] ?? '' : reply.content;
  const verdict = parseVerdict(answer);
  return {
    unsafe: isUnsafe(verdict, policy.onUnparseable ?? 'unsafe'),
    verdict,
    raw: reply.content,
    latencyMs,
    tokens: reply.promptTokens + reply.completionTokens,
  };
}
