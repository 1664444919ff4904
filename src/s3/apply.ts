/**
 * Applying a stage decision (S³), the one place where `pass` / `recover` / `block` become what happens next and
 * what the record says was changed — shared by the agent loop of `s3 eval` (`loop.ts`) and the proxy
 * (`proxy-flow.ts`), so the evaluation measures exactly what the proxy does.
 *
 * - input: any risk (or a part of the request no check read, guard.ts) ends the task with the refusal prefill; the agent loop first tries input recovery (the request
 *   rewritten without its harmful part, rewrite.ts) and falls back to this refusal.
 * - tool_observation: recover = the risky spans cut out (or the whole result replaced) + guidance; block = refusal
 *   (also when no check read the result: it is never shown unchecked).
 * - tool_selection / tool_execution: recover = each risky call replaced by a tool result saying it was blocked and
 *   why; block = refusal. (`respond`, incident response after a call has run, exists only in the agent loop: the
 *   proxy executes no tools.)
 * - output: recover = the risky spans redacted (or the whole answer replaced); block = refusal.
 * - planning: recover = re-plan (the agent writes a new plan without the flagged steps, checked again, plan.ts);
 *   block = refusal.
 * - memory: recover = the poisoned entries dropped before the model reads them, a flagged write not stored
 *   (memory-entries.ts); block = refusal (also when no check read the entries).
 */
import type { CallView, MemoryEntry } from './event.ts';
import { recoverMemory } from './memory-entries.ts';
import { riskyRuns, type StageDecision } from './guard.ts';
import { guidanceMessage, recoverAnswer, recoverCalls, recoverObservation, type RecoveryOptions } from './recovery.ts';
import type { Skill } from './skill.ts';

export interface Applied {
  /** 'refuse' = end with the refusal prefill */
  next: 'go' | 'refuse';
  /** what was changed, for the record and the log */
  changed: string[];
  /** recovery replaced the whole text instead of cutting spans (counted in the tables as lost utility) */
  fallback?: boolean;
}

/** why a block came from coverage (guard.ts): the parts of the event no check read */
const unread = (d: StageDecision) => (d.uncovered.length ? ` (no check read its ${d.uncovered.join(', ')})` : '');

export function applyInput(d: StageDecision): Applied {
  return d.action === 'pass' ? { next: 'go', changed: [] } : { next: 'refuse', changed: [`request refused (refusal prefill)${unread(d)}`] };
}

export function applyObservation(d: StageDecision, skills: readonly Skill[], content: string, tool: string, opts: RecoveryOptions = {}): Applied & { content: string } {
  if (d.action === 'pass') return { next: 'go', changed: [], content };
  if (d.action === 'block') return { next: 'refuse', changed: [`observation of ${tool} withheld${unread(d)}`], content };
  const r = recoverObservation(content, riskyRuns(d, skills), tool, opts);
  return { next: 'go', changed: r.removed.length ? r.removed.map((s) => `removed: ${s}`) : [`observation of ${tool} replaced`], content: r.content, fallback: r.fallback };
}

export function applyCalls(d: StageDecision, skills: readonly Skill[], calls: readonly CallView[], opts: RecoveryOptions = {}): Applied & { allowed: CallView[]; blocked: { call: CallView; result: string }[] } {
  if (d.action === 'pass') return { next: 'go', changed: [], allowed: [...calls], blocked: [] };
  if (d.action === 'block') return { next: 'refuse', changed: calls.map((c) => `call not executed: ${c.name}`), allowed: [], blocked: [] };
  const r = recoverCalls(calls, riskyRuns(d, skills), opts);
  return { next: 'go', changed: r.blocked.map((b) => `call replaced by a tool result: ${b.call.name}`), allowed: r.allowed, blocked: r.blocked };
}

export function applyAnswer(d: StageDecision, skills: readonly Skill[], text: string): Applied & { content: string } {
  if (d.action === 'pass') return { next: 'go', changed: [], content: text };
  if (d.action === 'block') return { next: 'refuse', changed: ['answer withheld (refusal)'], content: text };
  const r = recoverAnswer(text, riskyRuns(d, skills));
  return { next: 'go', changed: r.removed.length ? r.removed.map((s) => `redacted: ${s}`) : ['answer replaced'], content: r.content, fallback: r.fallback };
}

/** planning: 'replan' = ask for a new plan without the flagged steps (`why`: the risky skills' guidance, else their reasons). */
export function applyPlan(d: StageDecision, skills: readonly Skill[], steps: readonly CallView[]): Applied & { replan: boolean; rejected: CallView[]; why: string } {
  if (d.action === 'pass') return { next: 'go', changed: [], replan: false, rejected: [], why: '' };
  if (d.action === 'block') return { next: 'refuse', changed: ['plan rejected (refusal)'], replan: false, rejected: [], why: '' };
  const runs = riskyRuns(d, skills);
  const ids = new Set(runs.flatMap((r) => r.result.callIds ?? []));
  const rejected = ids.size ? steps.filter((s) => ids.has(s.id)) : [...steps];
  const why = runs.map((r) => (r.skill.guidance ? guidanceMessage(r, rejected.map((c) => c.name).join(', ')) : r.result.reason)).join(' ');
  return { next: 'go', changed: [`plan rejected, re-plan without: ${rejected.map((c) => c.name).join(', ') || 'the flagged steps'}`], replan: true, rejected, why };
}

/** memory: the entries the model may read (read) or the store may take (write). */
export function applyMemory(d: StageDecision, skills: readonly Skill[], entries: readonly MemoryEntry[]): Applied & { kept: MemoryEntry[]; dropped: MemoryEntry[] } {
  if (d.action === 'pass') return { next: 'go', changed: [], kept: [...entries], dropped: [] };
  if (d.action === 'block') return { next: 'refuse', changed: [`memory withheld${unread(d)}`], kept: [], dropped: [...entries] };
  const r = recoverMemory(entries, riskyRuns(d, skills));
  return { next: 'go', changed: r.dropped.map((x) => `memory entry dropped: ${x.id}`), kept: r.kept, dropped: r.dropped, fallback: r.fallback };
}
