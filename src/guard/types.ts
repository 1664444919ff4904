/**
 * The SafeKeep guard (Pan et al. 2026, §6): judge a tool-bearing request in a context that shows the tools as
 * flattened prose; if safe, run the untouched agent with its JSON schemas; if unsafe, withhold the tools and
 * prefill a refusal prefix that the model continues. Baselines share the interface (`GuardMethod`).
 */
import type { ToolSpec } from '../data/types.ts';
import type { ChatMessage } from '../prompts/tokenizer.ts';
import type { WireToolCall } from '../outcome/classify.ts';

export type { ChatMessage, WireToolCall };
// the chat call and its reply live below every user of a model (src/chat); the guard's API keeps their names
export type { ChatBackend, ChatCall, ChatReply, OpenAiLogprob, ResearchCall, ResearchReply } from '../chat/types.ts';

/**
 * - base: no guard, the agent sees its tools as JSON schemas.
 * - safejudge: two stages like safekeep, but the judge sees the JSON schemas (the paper's control).
 * - safeprompt: no judge; a safety system prompt (harm categories + an instruction to refuse) is prepended.
 * - safekeep: the judge sees the flattened tools.
 */
export type GuardMethod = 'base' | 'safejudge' | 'safeprompt' | 'safekeep' | 'refusal-probe' | 'safekeep+probe' | 'probe-cascade' | 'probe-steer';
/** Table 4's methods (the default of `guard eval`) */
export const GUARD_METHODS: readonly GuardMethod[] = ['base', 'safejudge', 'safeprompt', 'safekeep'];
/**
 * Activation-probe guards (local engine only): refusal-probe = a probe on the agent's own prefill hidden state, no
 * extra model call; safekeep+probe = both, the request is refused if either flags it; probe-cascade = the probe decides
 * outside its calibrated band (run below it, refuse above it) and SafeKeep's judge inside it; probe-steer = a flagged
 * request is answered by the agent's own generation steered by +α·r̂ at the probe's layer instead of a refusal text.
 */
export const PROBE_METHODS: readonly GuardMethod[] = ['refusal-probe', 'safekeep+probe', 'probe-cascade', 'probe-steer'];
export const ALL_GUARD_METHODS: readonly GuardMethod[] = [...GUARD_METHODS, ...PROBE_METHODS];

/** Turns tool specs into prose (the prompts module's `flattenTools`). */
export type Flattener = (tools: readonly ToolSpec[]) => string;

/** What an agent is asked to do. */
export interface AgentRequest {
  /**
   * The agent conversation: system message(s) = the agent's role and instructions, user message(s) = the request;
   * for injection benchmarks also the assistant's earlier tool call and the `tool` observation.
   */
  messages: ChatMessage[];
  /** the tools the agent may call (JSON schemas) */
  tools: ToolSpec[];
  /**
   * a server's request settings that carry client text besides messages and tools (`stop`, `user`, a named
   * `tool_choice`, a JSON-schema `response_format`): the judge is shown them too
   */
  settings?: Readonly<Record<string, unknown>>;
}


export type Verdict = 'yes' | 'no' | 'unparseable';

/** What to do when the judge's answer is neither YES nor NO. Default 'unsafe' (fail closed). */
export type UnparseablePolicy = 'unsafe' | 'safe';

export interface JudgeResult {
  unsafe: boolean;
  verdict: Verdict;
  /** the judge's raw answer */
  raw: string;
  latencyMs: number;
  /** prompt + completion tokens of the judge call */
  tokens: number;
}
