/**
 * The SafeKeep guard (Pan et al. 2026, §6): judge a tool-bearing request in a context that shows the tools as
 * flattened prose; if safe, run the untouched agent with its JSON schemas; if unsafe, withhold the tools and
 * prefill a refusal prefix that the model continues. Baselines share the interface (`GuardMethod`).
 */
import type { ToolSpec } from '../data/types.ts';
import type { ChatMessage } from '../prompts/tokenizer.ts';
import type { CallFormat } from '../outcome/types.ts';
import type { WireToolCall } from '../outcome/classify.ts';
import type { HookIntervention, Intervention, Steering } from '../engine/types.ts';

export type { ChatMessage, WireToolCall };

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

/** One chat call to a backend. */
export interface ChatCall {
  messages: ChatMessage[];
  /** tools offered to the model (absent or empty = none) */
  tools?: readonly ToolSpec[];
  /** assistant prefix the reply must start with and continue */
  prefix?: string;
  maxTokens: number;
  /** for logs and per-purpose accounting */
  purpose: 'judge' | 'agent' | 'refusal';
  /** endpoint model override (the proxy uses the client's model) */
  model?: string;
  /** Authorization header value to use instead of the backend's own key (the proxy forwards the client's) */
  authorization?: string;
  /**
   * Activation backends only: called with the last-prompt-token hidden states [L+1, d_model] of this call's own
   * prefill, before any token is generated; `true` stops the call there (reply `finish: 'halted'`, no content).
   */
  inspect?: (promptLastHidden: Float32Array) => boolean;
  /**
   * Activation backends only: hidden[layer] += alpha·vector/|vector| at every prompt position and every generated
   * token (the engine's 'add' intervention); endpoints cannot steer.
   */
  steer?: { layer: number; vector: Float32Array; alpha: number };
  /** aborted when the caller no longer wants the reply (a client that disconnected): a backend stops at its next step */
  signal?: AbortSignal;
  /** the reply ends before the first of these strings in the model's own text (OpenAI's `stop`; finish 'stop') */
  stop?: readonly string[];
  /**
   * Local engine: called with each new piece of the reply's text as it is generated (the prefix first), before the
   * reply resolves; the pieces join to the reply's `content`. Not called for a cached reply or by an endpoint backend.
   */
  onText?: (delta: string) => void;
  /**
   * Local engine, `serve --model --allow-interventions` only (never under a guard): this call's own steering,
   * interventions, hook edits, activation capture and log probabilities (research.ts). A call with it is never
   * served from or stored in the response cache.
   */
  research?: ResearchCall;
}

/** What a research request asks of its one generation (src/guard/research.ts parses it from the `safekeep` field). */
export interface ResearchCall {
  steer?: Steering;
  interventions?: Intervention[];
  hooks?: HookIntervention[];
  /** prompt positions (resolved against the prompt's tokens) and whether generated tokens' states are kept too */
  capture?: { promptPositions: number[]; generated: boolean; hooks?: string[]; layers?: number[] };
  /** log probabilities of the chosen tokens and the k most likely (0..20) */
  topLogprobs?: number;
}

/** What a research call returns besides the text. */
export interface ResearchReply {
  promptIds: number[];
  generatedIds: number[];
  /** [K, n, d]: the captured prompt positions' hidden states at the K = capture.layers kept */
  capturedPrompt?: Float32Array;
  /** [K, d] per generated token fed back */
  capturedGenerated?: Float32Array[];
  /** hook points besides the residual stream: [n + generated, width] each */
  capturedHooks?: Record<string, Float32Array>;
  /** OpenAI's `choices[0].logprobs.content` entries, one per generated token */
  logprobs?: OpenAiLogprob[];
}

export interface OpenAiLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export interface ChatReply {
  /** the assistant text, prefix included; local engines leave tool calls here in the native format */
  content: string;
  /** structured tool calls (endpoints) */
  toolCalls: WireToolCall[];
  promptTokens: number;
  completionTokens: number;
  latencyMs: number;
  /** served from the response cache */
  cached: boolean;
  finish: string;
  /** with `ChatCall.research` */
  research?: ResearchReply;
}

export interface ChatBackend {
  /** e.g. 'local:llama' or the endpoint URL */
  readonly name: string;
  /** how tool calls appear in `content` */
  readonly callFormat: CallFormat;
  /** the backend runs the model itself and honours `ChatCall.inspect` (the local engine); endpoints do not */
  readonly activations?: boolean;
  chat(call: ChatCall): Promise<ChatReply>;
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
