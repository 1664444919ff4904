/**
 * S³ (multi-stage defense) on the SafeKeep guard: stages, skills (SKILL.md), the guard with its layered trigger,
 * checks, recovery. See src/s3/README.md.
 */
export { STAGES, isStage, type Stage } from '../s3/stages.ts';
export { CHECK_KINDS, MITIGATIONS, BUILTIN_PROMPTS, PROMPT_VARS, TEMPLATE_VARS, fillTemplate, type CheckKind, type Mitigation, type ProbeSpec, type Skill, type SkillFilter } from '../s3/skill.ts';
export { parseSkill, loadSkill, loadSkills, SkillFileError, DEFAULT_GUIDANCE } from '../s3/skill-file.ts';
export { parseFrontMatter, splitFrontMatter } from '../s3/front-matter.ts';
export { stageText, stageTools, stageRoles, callsSoFar, observationsSoFar, userRequestText, parseArguments, type CallView, type StageEvent } from '../s3/event.ts';
export type { CheckEnv, CheckFn, CheckRegistry, CheckResult, HiddenStateProvider } from '../s3/check.ts';
export { builtinChecks } from '../s3/checks/index.ts';
export { filterReason, globMatch } from '../s3/filter.ts';
export { guardPick, guardAgentMessages, parsePick, GUARD_AGENT_ROLE } from '../s3/guard-agent.ts';
export { runStage, riskyRuns, requireChecks, type S3Config, type SkillRun, type StageDecision } from '../s3/guard.ts';
export { recoverObservation, recoverCalls, recoverAnswer, recoveryMessage, guidanceMessage, cutSpans, cutOptionsFor, MIN_QUOTE_WORDS, type CutOptions, type CutResult, type RecoveryOptions, type RiskyRun } from '../s3/recovery.ts';
export { INSPECTION_PARTS, STAGE_PARTS, limitEvent, type InspectionPart } from '../s3/inspection.ts';
export { rewriteRequest, parseRewrite, withRewrittenRequest, S3_REWRITE_ROLE, type Rewrite } from '../s3/rewrite.ts';
export { respondToIncident, inverseTool, inverseArguments, INVERSE_VERBS, type Incident } from '../s3/incident.ts';
export { airTasks } from '../eval/s3/air-tasks.ts';
export { skillTextCheck, skillTextPrompt, S3_SKILL_TEXT_ROLE } from '../s3/checks/skill-text.ts';
export { rulesFpReport, rulesFpMarkdown, loadRuleCases, ruleFireRates, type RulesFpReport, type RuleCase, type RuleRate } from '../eval/s3/rules-fp.ts';
export { parseRules, PREDICATES, type Rule } from '../s3/rules-lang.ts';
export { readRuleMemory, retrieveRules, validateRuleMemory, RULE_MEMORY_FORMAT, type MemoryRule, type RuleMemory } from '../s3/memory.ts';
export { engineHiddenStates } from '../s3/hidden.ts';
export { probeCheck, loadSkillProbe, probeGuardFromSkill, SharedPrefill, type SkillProbe } from '../s3/checks/probe.ts';
export { transformSkill, parseJsonAnswer, parseCases, splitHeldOut, runCases, SKILL_FORMAT, TRANSFORM_ROLE, type TransformOptions, type TransformResult, type RoundRecord, type TestCase } from '../s3/authoring/transform.ts';
export { runFidelity, readInstances, fidelityMarkdown, fidelityTable3, ORIGINALS, type FidelityInstance, type FidelityResult, type OriginalName, type SkillRun as FidelitySkillRun } from '../eval/s3/fidelity.ts';
