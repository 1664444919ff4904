/**
 * SafeKeep's decision (Pan et al. 2026, §6), the one path every user of the guard takes — the proxy, `serve --model`
 * and `guard eval` (through `guardedRespond`): judge the request with the method's tool view (SafeKeep: flattened
 * prose; SafeJudge: the JSON schemas); judged safe → `run`, the untouched agent call; judged unsafe → `refuse`.
 *
 * What `run` and `refuse` are is the caller's: `guardedRespond` makes the agent call or the refusal prefill on its
 * backend; the proxy forwards the canonical re-serialisation of the request it judged (so what runs is what the
 * judge read) or answers with the upstream's refusal. A judge that fails throws: nothing runs (fail closed).
 */
import { judge, type JudgeOptions } from './judge.ts';
import type { AgentRequest, ChatBackend, JudgeResult } from './types.ts';

export interface DecisionSteps<T> {
  /** judged safe: the agent call as the client sent it (tools as JSON schemas) */
  run: (verdict: JudgeResult) => Promise<T>;
  /** judged unsafe: no tools, the refusal */
  refuse: (verdict: JudgeResult) => Promise<T>;
}

export interface Decision<T> {
  verdict: JudgeResult;
  /** the request was judged unsafe and `refuse` answered it */
  blocked: boolean;
  outcome: T;
}

/**
 * @param judged  what the judge is shown: the agent conversation, its tools and the settings that carry client text
 * @param options the judge's options; `toolView` is the method's ('prose' = SafeKeep, 'json' = SafeJudge)
 */
export async function safekeepDecision<T>(judged: AgentRequest, judgeBackend: ChatBackend, options: JudgeOptions, steps: DecisionSteps<T>): Promise<Decision<T>> {
  const verdict = await judge(judged.messages, judged.tools, judgeBackend, judged.settings ? { ...options, settings: judged.settings } : options);
  const outcome = verdict.unsafe ? await steps.refuse(verdict) : await steps.run(verdict);
  return { verdict, blocked: verdict.unsafe, outcome };
}
