/**
 * What the S³ checks that ask an LLM share: the YES/NO call as the S³ protocols make it (`askCheckVerdict`: the
 * verdict on the first line so EVIDENCE lines may follow, a cut-off reply read as it stands, fail closed unless
 * `--unparseable safe`) and the check result a verdict gives (`verdictResult`: risky on YES or on an unclear answer
 * counted unsafe, the skill's description as the reason).
 */
import type { VerdictAnswer } from '../../guard/verdict-call.ts';
import { askVerdict } from '../../guard/verdict-call.ts';
import type { CheckEnv, CheckResult } from '../check.ts';
import type { Skill } from '../skill.ts';

/** One guard call: `system` and `user` as its messages, answered within `maxTokens`; latency counted from `startedAt`. */
export function askCheckVerdict(env: CheckEnv, system: string, user: string, maxTokens: number, startedAt: number): Promise<VerdictAnswer> {
  return askVerdict(env.backend, {
    messages: [{ role: 'system', content: system }, { role: 'user', content: user }],
    maxTokens,
    purpose: 'judge',
    model: env.model,
    authorization: env.authorization,
  }, { onUnparseable: env.onUnparseable, readFrom: 'first-line', onCancelled: 'parse', startedAt });
}

/**
 * A verdict as a check's result. `unclear` says who answered unclearly (kept in the reason so a log shows that the
 * risk is the fail-closed policy's, not the model's); `evidence` counts only when the check is risky.
 */
export function verdictResult(skill: Skill, v: VerdictAnswer, unclear: string, safeReason: string, evidence: readonly string[] = []): CheckResult {
  return {
    risky: v.unsafe,
    reason: v.unsafe ? (v.verdict === 'yes' ? skill.description : `${skill.description} (${unclear})`) : safeReason,
    evidence: v.unsafe ? [...evidence] : [],
    verdict: v.verdict,
    score: null,
    raw: v.raw,
    tokens: v.tokens,
    latencyMs: v.latencyMs,
  };
}
