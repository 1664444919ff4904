/**
 * The S³ guard at one stage (the layered trigger, then the checks, then the decision):
 *
 * 1. stage trigger: the skills whose `stage` is this stage;
 * 2. filter: each skill's cheap filter drops candidates (no model call);
 * 3. guard agent: one LLM call picks which remaining skills run (`guardDecision: false` runs all of them);
 * 4. the picked skills' checks run; any risk → the stage's action: `block` when a risky skill's mitigation is
 *    block or the configuration says `mitigation: 'block'` (S³ without recovery), else `recover`.
 *
 * Mandatory skills skip layers 2 and 3: they run on every event of their stage, so neither a pattern nor the guard
 * agent's NONE decides that the stage goes unjudged; the guard agent is asked only about the other candidates.
 *
 * Coverage: the stages where outside text enters the agent (input: the request; tool_observation: a tool result;
 * memory: entries read from a store or written to it — there, the entries are the part that must be read) fail
 * closed. When such a stage has skills and no check that ran read a part the event holds (its request, its
 * history, the result), the decision is `block` (`uncovered` names the parts): a request is not forwarded, a result
 * is not shown, without a check that read it.
 *
 * The guard is invoked (counts towards GIC) when at least one skill passed the filter (a mandatory skill always
 * does). What the caller does with a `recover`/`block` decision per stage is in `recovery.ts`.
 */
import { SafekeepError } from '../util/errors.ts';
import type { CheckEnv, CheckRegistry, CheckResult } from './check.ts';
import { builtinChecks } from './checks/index.ts';
import type { StageEvent } from './event.ts';
import { filterReason } from './filter.ts';
import { guardPick } from './guard-agent.ts';
import { eventParts, limitEvent, type InspectionPart } from './inspection.ts';
import type { CheckKind, Skill } from './skill.ts';
import type { Stage } from './stages.ts';

export interface S3Config {
  skills: readonly Skill[];
  /** layer 3 of the trigger (the guard agent's pick); false = run every skill that passes its filter */
  guardDecision: boolean;
  /** 'skill' = each skill's own mitigation; 'block' = S³ without recovery */
  mitigation: 'skill' | 'block';
  /** checks beyond the built-in llm/rules (e.g. `probe`), or replacements */
  checks?: CheckRegistry;
  /** layer 2 of the trigger (each skill's cheap filter); false = every skill of the stage passes (ablation) */
  filter?: boolean;
  /** post-recovery guidance shown to the next model turn; false = recovery without it (ablation) */
  guidance?: boolean;
  /** input-stage recovery: the guard rewrites the request without its harmful part (default), or refuses */
  inputRecovery?: 'rewrite' | 'refuse';
  /** guard agent answer budget (default 32) */
  guardMaxTokens?: number;
}

export interface SkillRun {
  skill: string;
  check: CheckKind;
  result: CheckResult;
}

export interface StageDecision {
  stage: Stage;
  /** layer 1: skills of this stage */
  triggered: string[];
  /** layer 2: those that passed their filter (a mandatory skill always passes) */
  filtered: string[];
  /** layer 3: those that run: the mandatory ones and those the guard agent picked (all of `filtered` without a guard decision) */
  picked: string[];
  /** input / tool_observation: parts of the event that no check which ran read (the action is then block) */
  uncovered: InspectionPart[];
  /** the guard agent's call, when made */
  guardAgent: { raw: string; unparseable: boolean; tokens: number; latencyMs: number } | null;
  /** the guard was invoked at this stage (≥ 1 skill passed the filter) */
  invoked: boolean;
  runs: SkillRun[];
  /** skills that found a risk */
  risky: string[];
  /** respond: incident response at tool_execution (a risky skill's mitigation is respond) */
  action: 'pass' | 'recover' | 'block' | 'respond';
  /** guard LLM tokens spent at this stage (guard agent + checks) */
  tokens: number;
  latencyMs: number;
}

/** Every skill's check kind has an implementation (built in, or given), else one clear error before any run. */
export function requireChecks(skills: readonly Skill[], checks: CheckRegistry = {}): void {
  for (const s of skills) {
    if (!{ ...builtinChecks, ...checks }[s.check]) {
      throw new SafekeepError(`${s.file}: field "check": no implementation of "check: ${s.check}" is available to this command — fix: remove the skill from --skills, or run with a ${s.check} check supplied`);
    }
  }
}

export async function runStage(event: StageEvent, config: S3Config, env: CheckEnv): Promise<StageDecision> {
  const t0 = performance.now();
  const triggered = config.skills.filter((s) => s.stage === event.stage);
  const passed = triggered.filter((s) => s.mandatory || config.filter === false || filterReason(s.filter, event) === null);
  const d: StageDecision = {
    stage: event.stage,
    triggered: triggered.map((s) => s.name),
    filtered: passed.map((s) => s.name),
    picked: [],
    uncovered: [],
    guardAgent: null,
    invoked: passed.length > 0,
    runs: [],
    risky: [],
    action: 'pass',
    tokens: 0,
    latencyMs: 0,
  };
  let picked = passed;
  const optional = passed.filter((s) => !s.mandatory);
  if (config.guardDecision && optional.length > 0) {
    const p = await guardPick(event, optional, env.backend, { model: env.model, authorization: env.authorization, maxTokens: config.guardMaxTokens });
    d.guardAgent = { raw: p.raw, unparseable: p.unparseable, tokens: p.tokens, latencyMs: p.latencyMs };
    d.tokens += p.tokens;
    picked = passed.filter((s) => s.mandatory || p.picked.includes(s.name));
  }
  d.picked = picked.map((s) => s.name);
  const checks: CheckRegistry = { ...builtinChecks, ...config.checks };
  for (const skill of picked) {
    const fn = checks[skill.check];
    if (!fn) throw new Error(`skill ${skill.name}: no implementation for "check: ${skill.check}" was given to the guard`);
    // the check sees only the parts of the event its skill declares it inspects
    const result = await fn(skill, limitEvent(event, skill.inspection), env);
    d.runs.push({ skill: skill.name, check: skill.check, result });
    d.tokens += result.tokens;
    if (result.risky) d.risky.push(skill.name);
  }
  if (d.risky.length > 0) {
    const risky = picked.filter((s) => d.risky.includes(s.name));
    const block = config.mitigation === 'block' || risky.some((s) => s.mitigation === 'block');
    d.action = block ? 'block' : risky.some((s) => s.mitigation === 'recover') ? 'recover' : risky.every((s) => s.mitigation === 'respond') ? 'respond' : 'recover';
  }
  if (triggered.length > 0 && (event.stage === 'input' || event.stage === 'tool_observation' || event.stage === 'memory')) {
    const read = new Set(picked.flatMap((s) => s.inspection));
    // at memory the outside text is the entries (the conversation before them was checked where it entered)
    d.uncovered = eventParts(event).filter((p) => (event.stage !== 'memory' || p === 'entries') && !read.has(p));
    if (d.uncovered.length > 0) d.action = 'block';
  }
  d.latencyMs = performance.now() - t0;
  return d;
}

/** The runs of a decision that found a risk, with their skills. */
export function riskyRuns(d: StageDecision, skills: readonly Skill[]): { skill: Skill; result: CheckResult }[] {
  return d.runs.filter((r) => r.result.risky).map((r) => ({ skill: skills.find((s) => s.name === r.skill)!, result: r.result }));
}
