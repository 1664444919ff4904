/**
 * S³ (multi-stage defense) on the SafeKeep guard: stages, skills (SKILL.md), the guard with its layered trigger,
 * checks, recovery. See src/guard/README.md.
 */
export { STAGES, isStage, type Stage } from './stages.ts';
export { CHECK_KINDS, MITIGATIONS, BUILTIN_PROMPTS, PROMPT_VARS, TEMPLATE_VARS, fillTemplate, type CheckKind, type Mitigation, type ProbeSpec, type Skill, type SkillFilter } from './skill.ts';
export { parseSkill, loadSkill, loadSkills, SkillFileError, DEFAULT_GUIDANCE } from './skill-file.ts';
export { parseFrontMatter, splitFrontMatter } from './front-matter.ts';
export { stageText, stageTools, stageRoles, callsSoFar, observationsSoFar, userRequestText, parseArguments, type CallView, type StageEvent } from './event.ts';
export type { CheckEnv, CheckFn, CheckRegistry, CheckResult, HiddenStateProvider } from './check.ts';
export { builtinChecks } from './checks/index.ts';
export { filterReason, globMatch } from './filter.ts';
export { guardPick, guardAgentMessages, parsePick, GUARD_AGENT_ROLE } from './guard-agent.ts';
export { runStage, riskyRuns, requireChecks, type S3Config, type SkillRun, type StageDecision } from './guard.ts';
export { recoverObservation, recoverCalls, recoverAnswer, recoveryMessage, guidanceMessage, cutSpans, cutOptionsFor, MIN_QUOTE_WORDS, type CutOptions, type CutResult, type RecoveryOptions, type RiskyRun } from './recovery.ts';
export { INSPECTION_PARTS, STAGE_PARTS, limitEvent, type InspectionPart } from './inspection.ts';
export { rewriteRequest, parseRewrite, withRewrittenRequest, S3_REWRITE_ROLE, type Rewrite } from './rewrite.ts';
export { respondToIncident, inverseTool, inverseArguments, INVERSE_VERBS, type Incident } from './incident.ts';
export { airTasks } from './air-tasks.ts';
export { skillTextCheck, skillTextPrompt, S3_SKILL_TEXT_ROLE } from './checks/skill-text.ts';
export { rulesFpReport, rulesFpMarkdown, loadRuleCases, ruleFireRates, type RulesFpReport, type RuleCase, type RuleRate } from './rules-fp.ts';
export { parseRules, PREDICATES, type Rule } from './rules-lang.ts';
export { readRuleMemory, retrieveRules, validateRuleMemory, RULE_MEMORY_FORMAT, type MemoryRule, type RuleMemory } from './memory.ts';
export { engineHiddenStates } from './hidden.ts';
export { probeCheck, loadSkillProbe, probeGuardFromSkill, SharedPrefill, type SkillProbe } from './checks/probe.ts';
export { transformSkill, parseJsonAnswer, parseCases, splitHeldOut, runCases, SKILL_FORMAT, TRANSFORM_ROLE, type TransformOptions, type TransformResult, type RoundRecord, type TestCase } from './transform.ts';
export { runFidelity, readInstances, fidelityMarkdown, fidelityTable3, ORIGINALS, type FidelityInstance, type FidelityResult, type OriginalName, type SkillRun as FidelitySkillRun } from './fidelity.ts';
