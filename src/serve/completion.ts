/**
 * A chat completion the proxy writes itself (a refusal, S³'s recovered answer): a normal `chat.completion`, or with
 * `stream: true` the same content as SSE, usage included when the client asked for it.
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

export function sendCompletion(x: Exchange, c: ChatRequest, model: string, t: CompletionTurn, headers: Record<string, string>): void {
  const usage = usageOf(t.promptTokens, t.completionTokens);
  if (c.stream) {
    sendSse(x.res, { id: x.id, model, content: t.content ?? '', toolCalls: t.toolCalls, finish: t.finish, usage: c.includeUsage ? usage : undefined }, headers);
  } else {
    const message: Record<string, unknown> = { role: 'assistant', content: t.content };
    if (t.toolCalls.length) message.tool_calls = t.toolCalls;
    sendJson(x.res, 200, { id: x.id, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model, choices: [{ index: 0, message, finish_reason: t.finish }], usage }, headers);
  }
  x.entry.status = 200;
}
