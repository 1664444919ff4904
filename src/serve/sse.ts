/**
 * The SSE writer for a finished completion: OpenAI's `chat.completion.chunk` events (role, content, tool calls,
 * finish reason), the usage chunk (`choices: []`) when the client asked with `stream_options.include_usage`, then
 * `data: [DONE]`.
 */
import type { ServerResponse } from 'node:http';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface SseCompletion {
  id: string;
  model: string;
  content: string;
  toolCalls?: readonly { id?: string; type?: string; function: { name: string; arguments: string } }[];
  finish?: string;
  /** sent as the last chunk before [DONE] when given */
  usage?: Usage;
}

export const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' } as const;

export function completionToSse(c: SseCompletion): string {
  const created = Math.floor(Date.now() / 1000);
  const event = (o: Record<string, unknown>) => `data: ${JSON.stringify({ id: c.id, object: 'chat.completion.chunk', created, model: c.model, ...o })}\n\n`;
  const chunk = (delta: Record<string, unknown>, finishReason: string | null) => event({ choices: [{ index: 0, delta, finish_reason: finishReason }] });
  let out = chunk({ role: 'assistant', content: '' }, null);
  if (c.content) out += chunk({ content: c.content }, null);
  const calls = c.toolCalls ?? [];
  if (calls.length) out += chunk({ tool_calls: calls.map((t, index) => ({ index, id: t.id, type: 'function', function: t.function })) }, null);
  out += chunk({}, c.finish ?? 'stop');
  if (c.usage) out += event({ choices: [], usage: c.usage });
  return `${out}data: [DONE]\n\n`;
}

export function sendSse(res: ServerResponse, c: SseCompletion, headers: Record<string, string> = {}): void {
  res.writeHead(200, { ...headers, ...SSE_HEADERS });
  res.end(completionToSse(c));
}

export const usageOf = (promptTokens: number, completionTokens: number): Usage => ({ prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens });
