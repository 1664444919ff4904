/**
 * Recovery (S³): remove the risk at the stage where it was found and let the benign part of the task go on.
 *
 * - tool_observation: the risky spans (the checks' evidence, matched with whitespace and case tolerance) are cut
 *   out of the observation and replaced by the skill's recovery message; when no span can be located the whole
 *   observation is replaced by it. Post-recovery guidance (what was removed) is appended for the next model turn.
 * - tool_selection / tool_execution: each risky call (the checks' `callIds`, else every call of the stage) is not
 *   executed; its tool result is the recovery message (it was blocked, and why) plus the guidance, so the model can
 *   finish the rest of the task. Other calls run as usual.
 * - output: risky spans of the answer are replaced by the recovery message (redaction); when none can be
 *   located, the whole answer is.
 * - input: the refusal prefill we already have (the caller's job: `REFUSAL_PREFIX` continued by the model).
 *
 * `block` (a skill's mitigation, or the configuration's) ends the task with a refusal instead.
 */
import type { CheckResult } from './check.ts';
import type { CallView } from './event.ts';
import { fillTemplate, type Skill } from './skill.ts';

export interface RiskyRun {
  skill: Skill;
  result: CheckResult;
}

function vars(r: RiskyRun, tool: string): Record<string, string> {
  return { skill: r.skill.name, reason: r.result.reason, evidence: r.result.evidence.join('; '), tool };
}

export function recoveryMessage(r: RiskyRun, tool = ''): string {
  return fillTemplate(r.skill.recovery, vars(r, tool));
}

export function guidanceMessage(r: RiskyRun, tool = ''): string {
  return fillTemplate(r.skill.guidance, vars(r, tool));
}

/** A regex that finds `span` in text up to whitespace runs and case. */
function spanRegex(span: string): RegExp {
  const parts = span.trim().split(/\s+/).map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(parts.join('\\s+'), 'giu');
}

/** Replace every occurrence of the spans by `replacement`; returns the text and the spans found. */
export function cutSpans(text: string, spans: readonly string[], replacement: string): { text: string; found: string[] } {
  let out = text;
  const found: string[] = [];
  // longest first, so a span inside another is not cut in two
  for (const s of [...spans].filter((x) => x.trim()).sort((a, b) => b.length - a.length)) {
    const re = spanRegex(s);
    if (re.test(out)) {
      found.push(s);
      out = out.replace(spanRegex(s), replacement);
    }
  }
  return { text: out, found };
}

const note = (g: string) => `\n\n[guard: ${g}]`;

interface ObservationRecovery {
  content: string;
  /** spans removed ([] = the whole observation was replaced) */
  removed: string[];
  guidance: string;
}

export function recoverObservation(content: string, runs: readonly RiskyRun[], tool: string): ObservationRecovery {
  let text = content;
  const removed: string[] = [];
  let whole = false;
  for (const r of runs) {
    const { text: t, found } = cutSpans(text, r.result.evidence, recoveryMessage(r, tool));
    if (found.length === 0) whole = true;
    text = t;
    removed.push(...found);
  }
  if (whole) text = runs.map((r) => recoveryMessage(r, tool)).join('\n');
  const guidance = runs.map((r) => guidanceMessage(r, tool)).join(' ');
  return { content: text + note(guidance), removed: whole ? [] : removed, guidance };
}

interface CallRecovery {
  /** calls that may run */
  allowed: CallView[];
  /** calls replaced by a tool result */
  blocked: { call: CallView; result: string }[];
}

export function recoverCalls(calls: readonly CallView[], runs: readonly RiskyRun[]): CallRecovery {
  const blocked: { call: CallView; result: string }[] = [];
  const allowed: CallView[] = [];
  for (const c of calls) {
    const hits = runs.filter((r) => !r.result.callIds || r.result.callIds.includes(c.id));
    if (hits.length === 0) { allowed.push(c); continue; }
    const msg = hits.map((r) => recoveryMessage(r, c.name)).join(' ');
    const guidance = hits.map((r) => guidanceMessage(r, c.name)).join(' ');
    blocked.push({ call: c, result: msg + note(guidance) });
  }
  return { allowed, blocked };
}

export function recoverAnswer(answer: string, runs: readonly RiskyRun[]): { content: string; removed: string[] } {
  let text = answer;
  const removed: string[] = [];
  let whole = false;
  for (const r of runs) {
    const { text: t, found } = cutSpans(text, r.result.evidence, recoveryMessage(r));
    if (found.length === 0) whole = true;
    text = t;
    removed.push(...found);
  }
  return whole ? { content: runs.map((r) => recoveryMessage(r)).join('\n'), removed: [] } : { content: text, removed };
}
