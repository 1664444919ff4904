/**
 * How a skill's check is invoked and what it returns. The guard calls `checks[skill.check](skill, event, env)`;
 * `llm` and `rules` are built in (`checks/`); `probe` is supplied by the caller (it needs activations), e.g.
 * `{ probe: myProbeCheck }` with `env.hidden` set to a hidden-state provider over a local engine.
 */
import type { ToolSpec } from '../data/types.ts';
import type { ChatBackend, ChatMessage, UnparseablePolicy, Verdict } from '../guard/types.ts';
import type { StageEvent } from './event.ts';
import type { CheckKind, Skill } from './skill.ts';

/** Hidden states for `probe` checks (a local engine; endpoints have none). */
export interface HiddenStateProvider {
  /**
   * The residual stream at the last prompt position of `messages` (+ `tools`) rendered by the model's chat template
   * with a generation prompt: hidden[l], l = 0..L (hidden[0] = embeddings, hidden[l] = output of block l-1).
   * `hidden` is [L+1, dModel], row-major.
   */
  lastTokenHidden(messages: readonly ChatMessage[], tools: readonly ToolSpec[]): Promise<{ numLayers: number; dModel: number; hidden: Float32Array }>;
}

export interface CheckEnv {
  /** the guard's LLM: guard agent and `llm` checks */
  backend: ChatBackend;
  /** endpoint model override and Authorization for the guard's calls (the proxy) */
  model?: string;
  authorization?: string;
  /** policy for an `llm` answer that is neither YES nor NO (default 'unsafe') */
  onUnparseable?: UnparseablePolicy;
  /** for `probe` checks */
  hidden?: HiddenStateProvider;
}

export interface CheckResult {
  risky: boolean;
  /** one sentence: why (used in recovery and guidance messages) */
  reason: string;
  /** spans to remove or redact (injected text, leaked values), or the rules that fired */
  evidence: string[];
  /** tool_selection / tool_execution: ids of the calls found risky (absent = all of the stage's calls) */
  callIds?: string[];
  /** llm checks: the parsed verdict; else null */
  verdict: Verdict | null;
  /** probe checks: the projection; else null */
  score: number | null;
  /** the LLM's raw answer ('' for rules/probe) */
  raw: string;
  /** LLM prompt + completion tokens (0 for rules/probe) */
  tokens: number;
  latencyMs: number;
}

export type CheckFn = (skill: Skill, event: StageEvent, env: CheckEnv) => Promise<CheckResult>;
export type CheckRegistry = Partial<Record<CheckKind, CheckFn>>;
