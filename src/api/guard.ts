/**
 * The SafeKeep guard as a library: judge, execution control with the baselines, backends, metrics, evaluation and
 * the proxy. See each module's doc comment for the rules it implements.
 */
export type { AgentRequest, ChatBackend, ChatCall, ChatReply, Flattener, GuardMethod, JudgeResult, UnparseablePolicy, Verdict } from '../guard/types.ts';
export { GUARD_METHODS } from '../guard/types.ts';
export { judge, type JudgeOptions } from '../guard/judge.ts';
export { judgeMessages, judgePromptOf, renderMessagesText, type ToolView } from '../guard/judge-context.ts';
export { judgeView, viewText, type JudgeView } from '../guard/view.ts';
export { METHOD_TABLE, ENDPOINT_JUDGE_METHODS, type MethodRow } from '../guard/methods.ts';
export { parseVerdict, isUnsafe } from '../guard/verdict.ts';
export { guardedRespond, withSafetyPrompt, type GuardCost, type GuardOptions, type GuardedResponse } from '../guard/respond.ts';
export { REFUSAL_PREFIX, SAFEPROMPT_SYSTEM, SAFETY_ASSESSOR_ROLE } from '../guard/prompts.ts';
export { LocalBackend, type LocalBackendOptions } from '../chat/local.ts';
export { OpenAIBackend, BackendError, type OpenAIBackendOptions, type PrefillMode } from '../chat/openai.ts';
export { createGuardProxy, type ProxyOptions } from '../serve/proxy.ts';
export { wilson, agentHarmMetrics, injecAgentMetrics, type Rate } from '../eval/metrics.ts';
export { injecAgentScore, injecStep, simulatedToolResponse, type InjecAgentScore, type InjecCaseEval, type StepEval } from '../eval/table4/injecagent-score.ts';
export { runGuardEval, summarizeEval, type EvalRow, type MethodSummary } from '../eval/table4/eval.ts';
export * as s3 from './s3.ts';
export { PROBE_METHODS, ALL_GUARD_METHODS } from '../guard/types.ts';
export { ProbeGuard, cascadeBand, type CascadeBand, type ProbeVerdict, type ProbeParams } from '../guard/probe.ts';
export { compareGuards, comparedMethods, evaluationCases, COMPARED_METHODS, type CompareOptions, type CompareResult } from '../eval/table4/probe-compare.ts';
export { createLocalServer, type LocalServerOptions } from '../serve/local.ts';
