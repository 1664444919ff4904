/**
 * The SafeKeep guard as a library: judge, execution control with the baselines, backends, metrics, evaluation and
 * the proxy. See each module's doc comment for the rules it implements.
 */
export type { AgentRequest, ChatBackend, ChatCall, ChatReply, Flattener, GuardMethod, JudgeResult, UnparseablePolicy, Verdict } from './types.ts';
export { GUARD_METHODS } from './types.ts';
export { judge, type JudgeOptions } from './judge.ts';
export { judgeMessages, renderMessagesText, type ToolView } from './judge-context.ts';
export { parseVerdict, isUnsafe } from './verdict.ts';
export { guardedRespond, withSafetyPrompt, type GuardCost, type GuardOptions, type GuardedResponse } from './respond.ts';
export { REFUSAL_PREFIX, SAFEPROMPT_SYSTEM, SAFETY_ASSESSOR_ROLE } from './prompts.ts';
export { LocalBackend, type LocalBackendOptions } from './backends/local.ts';
export { OpenAIBackend, BackendError, type OpenAIBackendOptions, type PrefillMode } from './backends/openai.ts';
export { createGuardProxy, type ProxyOptions } from './proxy.ts';
export { wilson, agentHarmMetrics, injecAgentMetrics, type Rate } from './metrics.ts';
export { injecAgentScore, injecStep, simulatedToolResponse, type InjecAgentScore, type InjecCaseEval, type StepEval } from './bench/injecagent-score.ts';
export { runGuardEval, summarizeEval, type EvalRow, type MethodSummary } from './eval.ts';
export * as s3 from './s3/index.ts';
export { PROBE_METHODS, ALL_GUARD_METHODS } from './types.ts';
export { ProbeGuard, cascadeBand, type CascadeBand, type ProbeVerdict, type ProbeParams } from './probe.ts';
export { compareGuards, comparedMethods, evaluationCases, COMPARED_METHODS, type CompareOptions, type CompareResult } from './probe-compare.ts';
export { createLocalServer, type LocalServerOptions } from './local-server.ts';
