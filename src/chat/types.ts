/**
 * One chat call to a model and its reply, whoever serves it (an endpoint, the local engine): the shape every user of
 * a model shares — the guard's judge and agent, the evaluation harness's records and logs — so it lives below all of
 * them.
 */
import type { ToolSpec } from '../data/types.ts';
import type { ChatMessage } from '../prompts/tokenizer.ts';
import type { CallFormat } from '../outcome/types.ts';
import type { WireToolCall } from '../outcome/classify.ts';
import type { GenerationEdits, SamplingSettings } from '../engine/types.ts';

export type { ChatMessage, WireToolCall };

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
   * Activation backends only: this generation's edits, in the engine's one contract (GenerationEdits: an 'add' is
   * h + alpha·r̂) — probe-steer's steered answer, a research request's steering and interventions; endpoints cannot
   * edit. A call with edits is cached under them.
   */
  edits?: GenerationEdits;
  /** aborted when the caller no longer wants the reply (a client that disconnected): a backend stops at its next step */
  signal?: AbortSignal;
  /** the reply ends before the first of these strings in the model's own text (OpenAI's `stop`; finish 'stop') */
  stop?: readonly string[];
  /**
   * Local engine: called with each new piece of the reply's text as it is generated (the prefix first), before the
   * reply resolves; the pieces join to the reply's `content`. Not called for a cached reply or by an endpoint backend.
   * With `research.topLogprobs`, `logprobs` are the entries of the tokens generated since the last piece (those of
   * tokens held back to the end, an end-of-turn token, are only in the reply's `research.logprobs`).
   */
  onText?: (delta: string, logprobs?: readonly OpenAiLogprob[]) => void;
  /**
   * Local engine: the prompt's ids as given (a raw completion: no chat template; `messages` is then empty). Never
   * under a guard: a judge reads messages.
   */
  promptIds?: readonly number[];
  /**
   * Local engine, `serve --model` without a guard (method base) only: this call's activation capture and log
   * probabilities (src/serve/research.ts). A call with it is never served from or stored in the response cache.
   */
  research?: ResearchCall;
  /**
   * how this call's answer is decoded (engine/sample/settings.ts): absent = greedy (`temperature: 0` at an
   * endpoint); the local engine samples it itself, an endpoint gets the OpenAI / vLLM body fields (chat/sampling.ts)
   */
  sampling?: SamplingSettings;
}

/** What a research request asks of its one generation besides edits (src/serve/ parses it from the request). */
export interface ResearchCall {
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
