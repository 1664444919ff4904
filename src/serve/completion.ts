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

export function sendCompletion(x: Exchange, c: ChatRequest, model: string, t: CompletionTurn, headers: Record<string, string>, extras: CompletionExtras = {}): void {
  const usage = usageOf(t.promptTokens, t.completionTokens);
  const logprobs = extras.logprobs !== undefined ? { logprobs: extras.logprobs } : {};
  if (c.stream) {
    sendSse(x.res, {
      id: x.id, model, content: t.content ?? '', toolCalls: t.toolCalls, finish: t.finish, usage: c.includeUsage ? usage : undefined,
      ...logprobs, ...(extras.body ? (extras.ownChunk ? { tailEvent: extras.body } : { finishExtra: extras.body }) : {}),
    }, headers);
  } else {
    const message: Record<string, unknown> = { role: 'assistant', content: t.content };
    if (t.toolCalls.length) message.tool_calls = t.toolCalls;
    sendJson(x.res, 200, {
      id: x.id, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model,
      choices: [{ index: 0, message, ...logprobs, finish_reason: t.finish }], usage, ...extras.body,
    }, headers);
  }
  x.entry.status = 200;
}
