/**
 * Backend for any OpenAI-compatible chat-completions endpoint with `tools` (vLLM, llama.cpp server, Ollama,
 * hosted APIs): base URL, key from an environment variable, per-attempt timeout, retries with exponential backoff
 * (network errors, timeouts, 429 and 5xx; `Retry-After` honoured), a concurrency limit, and an on-disk response
 * cache keyed by request hash (temperature 0, so a re-run replays the same answers at no cost).
 *
 * Refusal prefill (`prefill`):
 * - 'continue': vLLM/SGLang — a final assistant message with the prefix + `continue_final_message: true`,
 *   `add_generation_prompt: false`; the reply is the continuation, returned as prefix + continuation.
 * - 'prefix': Mistral/DeepSeek style — a final assistant message `{content: prefix, prefix: true}`.
 * - 'none' (default, works everywhere): documented fallback — no prefill; an instruction to begin the reply with
 *   the prefix and explain the refusal is added to the system message, and the prefix is prepended to the reply
 *   unless the model already began with it. The user sees the same opening either way.
 */
import { samplingBody } from './sampling.ts';
import { SafekeepError } from '../util/errors.ts';
import type { CallFormat } from '../outcome/types.ts';
import type { ChatBackend, ChatCall, ChatMessage, ChatReply, WireToolCall } from './types.ts';
import { ResponseCache, requestHash } from './cache.ts';
import { Limiter, backoffMs } from '../util/limit.ts';
import { abortedByDeadline, failureDetail, MAX_UPSTREAM_ANSWER, readUpstreamJson, readUpstreamText, redactSecrets, redactUrl, upstreamFetch, UpstreamError } from '../http/upstream.ts';

const bearer = (h: string | undefined) => h?.replace(/^bearer\s+/i, '');

export type PrefillMode = 'continue' | 'prefix' | 'none';

export interface OpenAIBackendOptions {
  /** e.g. `http://127.0.0.1:8000/v1` (`/chat/completions` is appended unless already there) */
  baseUrl: string;
  model: string;
  /**
   * the endpoint's API key, sent as a bearer token (the CLI reads it from the variable --api-key-env names, default
   * OPENAI_API_KEY); none = no Authorization header unless a call passes its own `authorization`
   */
  apiKey?: string;
  /** per attempt (default 60 s) */
  timeoutMs?: number;
  /**
   * one call in all — the wait for a slot, every attempt and the backoff between them (default none: up to
   * retries × timeout); past it the call fails as a timeout. A call's own `signal` aborted with a `TimeoutError` (a
   * server's request deadline) ends it the same way.
   */
  deadlineMs?: number;
  /** extra attempts after the first (default 3) */
  retries?: number;
  backoffBaseMs?: number;
  backoffCapMs?: number;
  /** requests in flight at once (default 4) */
  concurrency?: number;
  /** response cache folder (default: none) */
  cacheDir?: string;
  prefill?: PrefillMode;
  /** syntax of tool calls a server leaves in `content` (default llama3) */
  callFormat?: CallFormat;
  /** merged into every request body (e.g. `{"chat_template_kwargs": {"enable_thinking": false}}`) */
  extraBody?: Record<string, unknown>;
}

export class BackendError extends SafekeepError {
  /** HTTP status, 0 = network error, -1 = timeout */
  readonly status: number;
  constructor(message: string, status: number) {
    super(message, 3);
    this.name = 'BackendError';
    this.status = status;
  }
}

export function refusalFallbackInstruction(prefix: string): string {
  return `This request has been judged unsafe. Do not call any tool. Begin your reply with exactly "${prefix}" and then briefly explain, specifically for this request, why you will not help.`;
}

/** The chat-completions URL for a base URL. */
export function completionsUrl(baseUrl: string): string {
  const b = baseUrl.replace(/\/+$/, '');
  return b.endsWith('/chat/completions') ? b : `${b}/chat/completions`;
}

interface WireResponse {
  choices?: { message?: { content?: string | null; tool_calls?: WireToolCall[] }; finish_reason?: string }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number };
}

const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((r) => {
  if (signal?.aborted) { r(); return; }
  const t = setTimeout(r, ms);
  signal?.addEventListener('abort', () => { clearTimeout(t); r(); }, { once: true });
});

export class OpenAIBackend implements ChatBackend {
  readonly name: string;
  readonly callFormat: CallFormat;
  readonly url: string;
  private readonly limiter: Limiter;
  private readonly cache: ResponseCache | null;

  constructor(readonly opts: OpenAIBackendOptions) {
    this.url = completionsUrl(opts.baseUrl);
    this.name = `${redactUrl(this.url)}#${opts.model}`;
    this.callFormat = opts.callFormat ?? 'llama3';
    this.limiter = new Limiter(opts.concurrency ?? 4);
    this.cache = opts.cacheDir ? new ResponseCache(opts.cacheDir) : null;
  }

  /** The request body a call is sent as (also what the cache key hashes). */
  body(call: ChatCall): Record<string, unknown> {
    const prefill = this.opts.prefill ?? 'none';
    let messages: ChatMessage[] = call.messages;
    const extra: Record<string, unknown> = {};
    if (call.prefix !== undefined) {
      if (prefill === 'continue') {
        messages = [...messages, { role: 'assistant', content: call.prefix }];
        extra.continue_final_message = true;
        extra.add_generation_prompt = false;
      } else if (prefill === 'prefix') {
        messages = [...messages, { role: 'assistant', content: call.prefix, prefix: true }];
      } else {
        const instr = refusalFallbackInstruction(call.prefix);
        const i = messages.findIndex((m) => m.role === 'system');
        messages = messages.map((m) => ({ ...m }));
        if (i >= 0) messages[i]!.content = `${messages[i]!.content}\n\n${instr}`;
        else messages.unshift({ role: 'system', content: instr });
      }
    }
    const body: Record<string, unknown> = {
      ...this.opts.extraBody,
      model: call.model ?? this.opts.model,
      messages,
      max_tokens: call.maxTokens,
      ...samplingBody(call.sampling),
      ...extra,
    };
    if (call.tools && call.tools.length > 0) body.tools = call.tools;
    if (call.stop && call.stop.length > 0) body.stop = call.stop;
    return body;
  }

  async chat(call: ChatCall): Promise<ChatReply> {
    const body = this.body(call);
    const hash = requestHash(this.url, body);
    const hit = this.cache?.get(hash) as { response: WireResponse; latencyMs: number } | undefined;
    if (hit) return this.reply(call, hit.response, hit.latencyMs, true);
    const t0 = performance.now();
    const deadline = this.opts.deadlineMs !== undefined ? AbortSignal.timeout(this.opts.deadlineMs) : undefined;
    const signal = deadline && call.signal ? AbortSignal.any([call.signal, deadline]) : deadline ?? call.signal;
    const response = await this.limiter.run(() => this.post(body, call.authorization, signal));
    const latencyMs = performance.now() - t0;
    // never cache an answer we cannot use
    if (!response?.choices?.[0]?.message) throw new BackendError(`${redactUrl(this.url)}: response has no choices[0].message`, 200);
    this.cache?.set(hash, { response, latencyMs });
    return this.reply(call, response, latencyMs, false);
  }

  private reply(call: ChatCall, r: WireResponse, latencyMs: number, cached: boolean): ChatReply {
    const choice = r.choices?.[0];
    if (!choice?.message) throw new BackendError(`${redactUrl(this.url)}: response has no choices[0].message`, 200);
    let content = choice.message.content ?? '';
    if (call.prefix !== undefined) {
      const prefill = this.opts.prefill ?? 'none';
      if (prefill === 'continue' || !content.startsWith(call.prefix)) {
        content = call.prefix + (prefill === 'none' && content && !/^\s/.test(content) ? ' ' : '') + content;
      }
    }
    return {
      content,
      toolCalls: choice.message.tool_calls ?? [],
      promptTokens: r.usage?.prompt_tokens ?? 0,
      completionTokens: r.usage?.completion_tokens ?? 0,
      latencyMs,
      cached,
      finish: choice.finish_reason ?? 'stop',
    };
  }

  private authHeader(override?: string): string | undefined {
    if (override) return override;
    return this.opts.apiKey ? `Bearer ${this.opts.apiKey}` : undefined;
  }

  private async post(body: unknown, authorization?: string, signal?: AbortSignal): Promise<WireResponse> {
    const retries = this.opts.retries ?? 3;
    const timeoutMs = this.opts.timeoutMs ?? 60_000;
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    const auth = this.authHeader(authorization);
    if (auth) headers.authorization = auth;
    const where = redactUrl(this.url);
    let last: BackendError | null = null;
    /** the caller's signal ended the call: its deadline (a timeout, -1) or a client that left (0) */
    const stopped = (attempts: number) => (abortedByDeadline(signal)
      ? new BackendError(`${where}: no answer before the deadline (${attempts} attempt${attempts === 1 ? '' : 's'})`, -1)
      : new BackendError(`${where}: cancelled`, 0));
    for (let attempt = 0; attempt <= retries; attempt++) {
      if (signal?.aborted) throw stopped(attempt);
      let retryAfter: number | undefined;
      try {
        const res = await upstreamFetch({ url: this.url, method: 'POST', headers, body: JSON.stringify(body), timeoutMs, signal });
        if (res.ok) return (await readUpstreamJson(res, MAX_UPSTREAM_ANSWER, this.url, timeoutMs)) as WireResponse;
        const text = await readUpstreamText(res, 1024 * 1024, this.url, 10_000).catch(() => '');
        const detail = redactSecrets(failureDetail(res.status, text), [this.opts.apiKey, bearer(authorization)]);
        // a 5xx body (tracebacks, keys, internal addresses) is never part of the message
        const httpError = new BackendError(`${where}: HTTP ${res.status}${detail ? `: ${detail}` : ''}`, res.status);
        if (res.status !== 429 && res.status < 500) throw httpError; // not retryable
        last = httpError;
        const ra = res.headers.get('retry-after');
        if (ra !== null) retryAfter = Number(ra);
      } catch (e) {
        if (e instanceof BackendError) throw e;
        if (!(e instanceof UpstreamError)) throw e;
        if (abortedByDeadline(signal)) throw stopped(attempt + 1);
        if (e.kind === 'redirect' || e.kind === 'cancelled' || e.kind === 'too_large' || e.kind === 'bad_answer') throw new BackendError(e.message, e.upstreamStatus ?? 0);
        last = new BackendError(e.message, e.kind === 'timeout' ? -1 : 0);
      }
      if (attempt < retries) await sleep(backoffMs(attempt, this.opts.backoffBaseMs ?? 500, this.opts.backoffCapMs ?? 8000, retryAfter), signal);
      if (signal?.aborted) throw stopped(attempt + 1);
    }
    throw new BackendError(`${last!.message} (after ${retries + 1} attempts)`, last!.status);
  }
}
