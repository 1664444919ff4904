/**
 * Recovery (S³): remove the risk at the stage where it was found and let the benign part of the task go on.
 *
 * - tool_observation: the risky spans (the checks' evidence) are cut out of the observation and replaced by the
 *   skill's recovery message: only spans found verbatim (whitespace runs may differ), a model's quote once at its
 *   place and only when it has at least MIN_QUOTE_WORDS words. When a risky check's evidence cannot all be cut, the
 *   whole observation is replaced (fail closed) and the recovery reports a fallback, which the tables count.
 *   Post-recovery guidance (what was removed) is appended for the next model turn unless disabled (ablation).
 * - tool_selection / tool_execution: each risky call (the checks' `callIds`, else every call of the stage) is not
 *   executed; its tool result is the recovery message (it was blocked, and why) plus the guidance, so the model can
 *   finish the rest of the task. Other calls run as usual.
 * - output: risky spans of the answer are replaced by the recovery message (redaction), by the same rules; else
 *   the whole answer is (a fallback).
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

/**
 * The fewest words a span quoted by a model must have to be cut: shorter quotes ("the", "Please") would cut the same
 * word everywhere it occurs in benign text. Values matched by a rule or probe are exact matches of the text itself,
 * so any length is taken.
 */
export const MIN_QUOTE_WORDS = 3;

export interface CutOptions {
  /** spans with fewer words are refused (default MIN_QUOTE_WORDS) */
  minWords?: number;
  /** cut every occurrence (values: a leaked key must go wherever it is) instead of the first one (quotes) */
  everyOccurrence?: boolean;
}

export interface CutResult {
  text: string;
  /** spans cut (each at least once) */
  found: string[];
  /** spans refused as too short to cut safely */
  refused: string[];
  /** spans not found verbatim (up to whitespace runs) */
  missing: string[];
}

/** A regex that finds `span` verbatim up to whitespace runs (case kept: a quote that changes case is not the text). */
function spanRegex(span: string): RegExp {
  const parts = span.trim().split(/\s+/).map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(parts.join('\\s+'), 'gu');
}

const words = (s: string) => s.trim().split(/\s+/).filter(Boolean).length;

/**
 * Replace the spans by `replacement`: each span found verbatim (whitespace runs may differ), at the first place it
 * occurs that no longer span already covers (or at every such place with `everyOccurrence`); longer spans first, so
 * a span inside another is not cut in two. Spans shorter than `minWords` words are refused, never cut.
 */
export function cutSpans(text: string, spans: readonly string[], replacement: string, opts: CutOptions = {}): CutResult {
  const minWords = opts.minWords ?? MIN_QUOTE_WORDS;
  const found: string[] = [];
  const refused: string[] = [];
  const missing: string[] = [];
  const cuts: [number, number][] = [];
  const free = (a: number, b: number) => cuts.every(([x, y]) => b <= x || a >= y);
  for (const s of [...new Set(spans.map((x) => x.trim()).filter(Boolean))].sort((a, b) => b.length - a.length)) {
    if (words(s) < minWords) { refused.push(s); continue; }
    let hit = false;
    for (const m of text.matchAll(spanRegex(s))) {
      const a = m.index, b = m.index + m[0].length;
      if (!free(a, b)) continue;
      cuts.push([a, b]);
      hit = true;
      if (!opts.everyOccurrence) break;
    }
    (hit ? found : missing).push(s);
  }
  let out = text;
  for (const [a, b] of [...cuts].sort((x, y) => y[0] - x[0])) out = out.slice(0, a) + replacement + out.slice(b);
  return { text: out, found, refused, missing };
}

/** How a check's evidence may be cut: model quotes need a few words and go once; rule/probe values go everywhere. */
export function cutOptionsFor(r: RiskyRun): CutOptions {
  return r.skill.check === 'llm' ? { minWords: MIN_QUOTE_WORDS } : { minWords: 1, everyOccurrence: true };
}

const note = (g: string) => `\n\n[guard: ${g}]`;

export interface RecoveryOptions {
  /** append the post-recovery guidance for the next model turn (default true; false = the paper's ablation) */
  guidance?: boolean;
}

interface TextRecovery {
  content: string;
  /** spans removed ([] = the whole text was replaced) */
  removed: string[];
  /**
   * the whole text was replaced: a risky run gave no span that could be cut (none quoted, a quote not found
   * verbatim, or too short). Counted in the tables, so a flaky checker shows up as lost utility.
   */
  fallback: boolean;
}

/** Cut every risky run's evidence out of `text`; any run whose evidence cannot all be cut → the whole text goes. */
function recoverText(text: string, runs: readonly RiskyRun[], tool: string): TextRecovery {
  let out = text;
  const removed: string[] = [];
  let whole = false;
  for (const r of runs) {
    const c = cutSpans(out, r.result.evidence, recoveryMessage(r, tool), cutOptionsFor(r));
    if (c.found.length === 0 || c.missing.length > 0 || c.refused.length > 0) whole = true;
    out = c.text;
    removed.push(...c.found);
  }
  if (whole) return { content: runs.map((r) => recoveryMessage(r, tool)).join('\n'), removed: [], fallback: true };
  return { content: out, removed, fallback: false };
}

interface ObservationRecovery extends TextRecovery {
  guidance: string;
}

export function recoverObservation(content: string, runs: readonly RiskyRun[], tool: string, opts: RecoveryOptions = {}): ObservationRecovery {
  const r = recoverText(content, runs, tool);
  const guidance = opts.guidance === false ? '' : runs.map((x) => guidanceMessage(x, tool)).join(' ');
  return { ...r, content: r.content + (guidance ? note(guidance) : ''), guidance };
}

interface CallRecovery {
  /** calls that may run */
  allowed: CallView[];
  /** calls replaced by a tool result */
  blocked: { call: CallView; result: string }[];
}

export function recoverCalls(calls: readonly CallView[], runs: readonly RiskyRun[], opts: RecoveryOptions = {}): CallRecovery {
  const blocked: { call: CallView; result: string }[] = [];
  const allowed: CallView[] = [];
  for (const c of calls) {
    const hits = runs.filter((r) => !r.result.callIds || r.result.callIds.includes(c.id));
    if (hits.length === 0) { allowed.push(c); continue; }
    const msg = hits.map((r) => recoveryMessage(r, c.name)).join(' ');
    const guidance = opts.guidance === false ? '' : hits.map((r) => guidanceMessage(r, c.name)).join(' ');
    blocked.push({ call: c, result: msg + (guidance ? note(guidance) : '') });
  }
  return { allowed, blocked };
}

export function recoverAnswer(answer: string, runs: readonly RiskyRun[]): TextRecovery {
  return recoverText(answer, runs, '');
}
