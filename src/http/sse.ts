/**
 * The SSE writers: OpenAI's `chat.completion.chunk` events (role, content, tool calls, finish reason) — or, for
 * /v1/completions, its `text_completion` events (text, finish reason) — the usage chunk (`choices: []`) when the client
 * asked with `stream_options.include_usage`, then `data: [DONE]` — for a finished completion (`sendSse`) or as the
 * text is generated (`SseStream`), each piece with the log probabilities of its tokens when asked.
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
  /** OpenAI's `logprobs` object ({content: [...]}), on the content chunk, when asked */
  logprobs?: unknown;
  /** top-level fields of the finish-reason chunk (the research server's `safekeep` activations) */
  finishExtra?: Record<string, unknown>;
  /** a data event of its own, just before [DONE] (vllm-lens's activations) */
  tailEvent?: Record<string, unknown>;
}

export const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' } as const;

/** which API's chunks: chat completions' or (legacy) completions' */
export type SseKind = 'chat' | 'text';

/** one completion's chunk events: the same id, model and creation time on every chunk */
function chunks(id: string, model: string, kind: SseKind = 'chat') {
  const created = Math.floor(Date.now() / 1000);
  if (kind === 'text') return textChunks(id, model, created);
  const event = (o: Record<string, unknown>) => `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, ...o })}\n\n`;
  const chunk = (delta: Record<string, unknown>, finishReason: string | null) => event({ choices: [{ index: 0, delta, finish_reason: finishReason }] });
  return {
    start: () => chunk({ role: 'assistant', content: '' }, null),
    content: (text: string, logprobs?: unknown) => (text || logprobs !== undefined ? (logprobs !== undefined
      ? event({ choices: [{ index: 0, delta: { content: text }, logprobs, finish_reason: null }] })
      : chunk({ content: text }, null)) : ''),
    /** tool calls, the finish reason, the usage chunk when asked, [DONE] */
    end: (c: Omit<SseCompletion, 'id' | 'model' | 'content'>) => {
      const calls = c.toolCalls ?? [];
      let out = calls.length ? chunk({ tool_calls: calls.map((t, index) => ({ index, id: t.id, type: 'function', function: t.function })) }, null) : '';
      out += c.finishExtra ? event({ choices: [{ index: 0, delta: {}, finish_reason: c.finish ?? 'stop' }], ...c.finishExtra }) : chunk({}, c.finish ?? 'stop');
      if (c.usage) out += event({ choices: [], usage: c.usage });
      if (c.tailEvent) out += `data: ${JSON.stringify(c.tailEvent)}\n\n`;
      return `${out}data: [DONE]\n\n`;
    },
  };
}

/** /v1/completions: `{choices: [{index, text, logprobs, finish_reason}]}` events, no role or tool-call chunks */
function textChunks(id: string, model: string, created: number) {
  const event = (o: Record<string, unknown>) => `data: ${JSON.stringify({ id, object: 'text_completion', created, model, ...o })}\n\n`;
  const choice = (text: string, logprobs: unknown, finishReason: string | null) => ({ choices: [{ index: 0, text, logprobs: logprobs ?? null, finish_reason: finishReason }] });
  return {
    start: () => '',
    content: (text: string, logprobs?: unknown) => (text || logprobs !== undefined ? event(choice(text, logprobs, null)) : ''),
    end: (c: Omit<SseCompletion, 'id' | 'model' | 'content'>) => {
      let out = event({ ...choice('', null, c.finish ?? 'stop'), ...c.finishExtra });
      if (c.usage) out += event({ choices: [], usage: c.usage });
      if (c.tailEvent) out += `data: ${JSON.stringify(c.tailEvent)}\n\n`;
      return `${out}data: [DONE]\n\n`;
    },
  };
}

export function completionToSse(c: SseCompletion): string {
  const k = chunks(c.id, c.model);
  return k.start() + k.content(c.content, c.logprobs) + k.end(c);
}

/**
 * A completion streamed as it is generated: the headers and the role chunk go out with the first piece of text, each
 * piece as a content chunk, then `finish` sends what the finished completion holds beyond the pieces sent (its
 * content must start with them), its tool calls, finish reason, usage and [DONE]. `fail` ends a stream that broke
 * after its headers were sent: an `error` event and no [DONE], so a client cannot take the text for a whole answer.
 */
export class SseStream {
  private readonly k: ReturnType<typeof chunks>;
  private sent = '';

  constructor(private readonly res: ServerResponse, id: string, model: string, private readonly headers: Record<string, string> = {}, kind: SseKind = 'chat') {
    this.k = chunks(id, model, kind);
  }

  /** true once the headers went out: errors can no longer be a status code */
  get started(): boolean {
    return this.res.headersSent;
  }

  /** a piece of text, with its tokens' log probabilities (in the API's shape) when asked */
  write(text: string, logprobs?: unknown): void {
    // a client that left: nothing to write to
    if (!text || this.res.writableEnded || this.res.destroyed) return;
    if (!this.started) {
      this.res.writeHead(200, { ...this.headers, ...SSE_HEADERS });
      this.res.write(this.k.start());
    }
    this.res.write(this.k.content(text, logprobs));
    this.sent += text;
  }

  /** false (and the stream failed) when the finished content does not start with the text already sent */
  finish(c: Omit<SseCompletion, 'id' | 'model'>, headers: Record<string, string> = {}): boolean {
    if (!c.content.startsWith(this.sent)) {
      this.fail('the streamed text is not the start of the finished answer');
      return false;
    }
    if (!this.started) {
      this.res.writeHead(200, { ...this.headers, ...headers, ...SSE_HEADERS });
      this.res.write(this.k.start());
    }
    // the rest of the text, and the log probabilities of the tokens not yet sent (`c.logprobs`: those only)
    this.res.end(this.k.content(c.content.slice(this.sent.length), c.logprobs) + this.k.end(c));
    return true;
  }

  fail(message: string, type = 'internal_error'): void {
    if (this.res.writableEnded || this.res.destroyed) return;
    this.res.end(sseErrorEvent(message, type));
  }
}

/**
 * The event that ends a stream which broke after its headers went out: `data: {"error": {...}}` in OpenAI's error
 * shape (what its clients raise on), never followed by `data: [DONE]`.
 */
export function sseErrorEvent(message: string, type: string, extra: Record<string, unknown> = {}): string {
  return `data: ${JSON.stringify({ error: { message, type, ...extra } })}\n\n`;
}

export function sendSse(res: ServerResponse, c: SseCompletion, headers: Record<string, string> = {}): void {
  res.writeHead(200, { ...headers, ...SSE_HEADERS });
  res.end(completionToSse(c));
}

export const usageOf = (promptTokens: number, completionTokens: number): Usage => ({ prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens });
