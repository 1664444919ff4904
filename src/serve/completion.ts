/**
 * A chat completion a server writes itself (the proxy's refusal and S³'s recovered answer, the local server's reply):
 * a normal `chat.completion`, or with `stream: true` the same content as SSE, usage included when the client asked.
 */
import { sendJson } from '../http/errors.ts';
import type { Exchange } from '../http/server.ts';
import { sendSse, usageOf } from '../http/sse.ts';
import type { ChatRequest } from '../chat/body.ts';
import type { WireToolCall } from '../chat/types.ts';

export interface CompletionTurn {
  content: string | null;
  toolCalls: WireToolCall[];
  finish: string;
  promptTokens: number;
  completionTokens: number;
  /** OpenAI's choice `logprobs` object of this choice (the local server's `n` choices each carry their own) */
  logprobs?: unknown;
}

/** What the local research server adds to a completion; the proxy adds nothing. */
export interface CompletionExtras {
  /** OpenAI's choice `logprobs` object, when the client asked for it (streamed: on the content chunk) */
  logprobs?: unknown;
  /** top-level fields of the response, e.g. the captured activations (streamed: of the finish-reason chunk) */
  body?: Record<string, unknown>;
  /** streamed: `body` as a data event of its own just before [DONE] (where vllm-lens sends its activations) */
  ownChunk?: boolean;
}

/**
 * One completion with one choice, or (the local server's `n`) several: each its own message, finish and logprobs;
 * usage counts the prompt once and every choice's tokens. Streamed: one choice only.
 */
export function sendCompletion(x: Exchange, c: ChatRequest, model: string, turn: CompletionTurn | readonly CompletionTurn[], headers: Record<string, string>, extras: CompletionExtras = {}): void {
  const turns = Array.isArray(turn) ? turn as readonly CompletionTurn[] : [turn as CompletionTurn];
  const t = turns[0]!;
  const usage = usageOf(t.promptTokens, turns.reduce((k, u) => k + u.completionTokens, 0));
  const logprobsOf = (u: CompletionTurn, i: number) => {
    const lp = u.logprobs ?? (i === 0 ? extras.logprobs : undefined);
    return lp !== undefined ? { logprobs: lp } : {};
  };
  if (c.stream) {
    if (turns.length !== 1) throw new Error('sendCompletion: a stream carries one choice');
    sendSse(x.res, {
      id: x.id, model, content: t.content ?? '', toolCalls: t.toolCalls, finish: t.finish, usage: c.includeUsage ? usage : undefined,
      ...logprobsOf(t, 0), ...(extras.body ? (extras.ownChunk ? { tailEvent: extras.body } : { finishExtra: extras.body }) : {}),
    }, headers);
  } else {
    const choices = turns.map((u, i) => {
      const message: Record<string, unknown> = { role: 'assistant', content: u.content };
      if (u.toolCalls.length) message.tool_calls = u.toolCalls;
      return { index: i, message, ...logprobsOf(u, i), finish_reason: u.finish };
    });
    sendJson(x.res, 200, {
      id: x.id, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model,
      choices, usage, ...extras.body,
    }, headers);
  }
  x.entry.status = 200;
}
