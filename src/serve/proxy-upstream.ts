/**
 * The proxy's side of its upstreams: who gets which credentials, forwarding a request and piping the answer back,
 * one non-streamed turn for S³, the refusal call, and how an upstream's failure becomes the client's JSON error.
 *
 * Time: `timeoutMs` (`--timeout-ms`) bounds the wait for an answer's headers and, after them, every wait between two
 * chunks of its body; the request's deadline (`--request-timeout-ms`, the server's `deadlineMs`, reaching here as
 * `x.signal`) bounds the whole answer, a stream's last chunk included. An upstream that sends headers and one chunk
 * and then nothing holds a client for `timeoutMs` at most.
 *
 * Credentials: clients authenticate with `clientKey` when one is set (their header is then never forwarded). The
 * agent upstream gets `apiKey` when configured, else (no client key) the client's own Authorization header, else
 * none. The judge upstream gets `judgeApiKey`; when it is the agent upstream itself it is treated like it; a
 * different judge host never receives the client's header.
 */
import type { IncomingMessage } from 'node:http';
import { jsonDepth, MAX_JSON_DEPTH } from '../util/json-bounded.ts';
import { HttpError } from '../http/errors.ts';
import type { Exchange } from '../http/server.ts';
import { failureDetail, MAX_UPSTREAM_ANSWER, readChunk, readUpstreamJson, readUpstreamText, redactSecrets, upstreamFetch, UpstreamError } from '../http/upstream.ts';
import { sseErrorEvent } from '../http/sse.ts';
import { OpenAIBackend, type PrefillMode } from '../chat/openai.ts';
import type { ChatMessage, WireToolCall } from '../chat/types.ts';
import type { UpstreamTurn } from '../s3/flow.ts';

export interface UpstreamConfig {
  /** agent upstream base URL, no trailing slash */
  upstream: string;
  judgeUpstream?: string;
  judgeModel: string;
  apiKey?: string;
  judgeApiKey?: string;
  clientKey?: string;
  timeoutMs: number;
  retries: number;
  prefill?: PrefillMode;
  /** the refusal prefix the refusal call continues (and the bare answer when that call fails) */
  refusalPrefix: string;
}

const normBase = (u: string) => u.replace(/\/+$/, '').replace(/\/chat\/completions$/, '');

/** UpstreamError → the client's error. */
export function upstreamHttpError(e: UpstreamError): HttpError {
  switch (e.kind) {
    case 'timeout': return new HttpError(504, 'upstream_timeout', `upstream: ${e.message}`);
    case 'cancelled': return new HttpError(499, 'client_closed', e.message);
    case 'network': return new HttpError(502, 'upstream_unreachable', `upstream ${e.message}`);
    case 'redirect': return new HttpError(502, 'upstream_redirect', `upstream ${e.message}`, { upstream_status: e.upstreamStatus });
    default: return new HttpError(502, 'upstream_error', `upstream: ${e.message}`);
  }
}

/** A non-2xx answer → the client's error: 5xx → 502 without the body; 4xx → same status, the upstream's message only. */
async function failedAnswer(up: Response, url: string, secrets: readonly (string | undefined)[]): Promise<HttpError> {
  const text = await readUpstreamText(up, 1024 * 1024, url, 10_000).catch(() => '');
  const detail = redactSecrets(failureDetail(up.status, text), secrets);
  const status = up.status >= 500 || up.status < 400 ? 502 : up.status;
  return new HttpError(status, 'upstream_error', `upstream returned HTTP ${up.status}${detail ? `: ${detail}` : ''}`, { upstream_status: up.status });
}

/** A well-formed tool call of an upstream answer (an S³ check walks its fields). */
function isWireCall(c: unknown): c is WireToolCall {
  const f = (c as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
  return !!f && typeof f.name === 'string' && (typeof f.arguments === 'string' || (typeof f.arguments === 'object' && f.arguments !== null));
}

/** Wait until the client has taken what was written, left, or the request's deadline passed. */
function drained(res: Exchange['res'], signal: AbortSignal): Promise<void> {
  return new Promise<void>((r) => {
    const go = () => { res.off('drain', go); res.off('close', go); signal.removeEventListener('abort', go); r(); };
    res.once('drain', go);
    res.once('close', go);
    if (signal.aborted) go();
    else signal.addEventListener('abort', go, { once: true });
  });
}

/**
 * Pipe a streamed (SSE) answer to the client as it arrives. Each chunk must come within `idleMs` of the one before
 * (a wait on a slow client does not count) and all of it before the request's deadline (`x.signal`); when either
 * passes, or the upstream breaks off, the upstream read is cancelled and the stream ends with an SSE error event —
 * no `[DONE]`, so no client takes the text so far for a whole answer — and the failure is thrown for the log. A
 * client that leaves cancels the upstream read.
 */
async function pipeStream(up: Response, x: Exchange, idleMs: number, url: string): Promise<void> {
  const res = x.res;
  if (!up.body) { res.end(); return; }
  const reader = up.body.getReader();
  // the last bytes sent: the error event must start on an event boundary, not inside a half-sent one
  let tail = '\n\n';
  try {
    for (;;) {
      const value = await readChunk(reader, idleMs, url, x.signal);
      if (value === null || res.destroyed) break;
      if (value.byteLength) tail = (tail + Buffer.from(value.subarray(-2)).toString('latin1')).slice(-2);
      if (!res.write(value)) await drained(res, x.signal);
    }
  } catch (e) {
    if (res.destroyed || (e instanceof UpstreamError && e.kind === 'cancelled')) { res.end(); return; }
    const err = e instanceof UpstreamError ? upstreamHttpError(e) : new HttpError(502, 'upstream_error', 'upstream: the answer was cut off');
    res.end(`${tail === '\n\n' ? '' : '\n\n'}${sseErrorEvent(err.message, err.type, { param: null, code: err.status })}`);
    // a client that does not read what was sent holds the connection no longer than a second more
    const cut = setTimeout(() => res.destroy(), 1000).unref();
    res.once('finish', () => clearTimeout(cut));
    res.once('close', () => clearTimeout(cut));
    throw err;
  }
  res.end();
}

/**
 * A non-streamed answer, read whole before anything is sent (at most MAX_UPSTREAM_ANSWER, each chunk within
 * `idleMs`, all of it before the request's deadline): an answer that stalls or breaks off is then the client's JSON
 * error (504, 502) rather than a cut-off body behind a 200.
 */
async function readWhole(up: Response, x: Exchange, idleMs: number, url: string): Promise<Buffer> {
  if (!up.body) return Buffer.alloc(0);
  const reader = up.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const value = await readChunk(reader, idleMs, url, x.signal);
      if (value === null) break;
      size += value.byteLength;
      if (size > MAX_UPSTREAM_ANSWER) {
        void reader.cancel().catch(() => undefined);
        throw new HttpError(502, 'upstream_error', `upstream: answer larger than ${MAX_UPSTREAM_ANSWER} bytes; not passed on`);
      }
      chunks.push(value);
    }
  } catch (e) {
    throw e instanceof UpstreamError ? upstreamHttpError(e) : e;
  }
  return Buffer.concat(chunks);
}

/** The parsed first choice of a non-streamed upstream answer, its tool calls checked and bounded. */
function upstreamTurnOf(j: { choices?: { message?: { content?: unknown; tool_calls?: unknown }; finish_reason?: unknown }[]; usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } }): UpstreamTurn {
  const msg = j?.choices?.[0]?.message;
  if (!msg || typeof msg !== 'object') throw new HttpError(502, 'upstream_error', 'upstream answer has no choices[0].message');
  const calls = msg.tool_calls ?? [];
  if (!Array.isArray(calls) || !calls.every(isWireCall)) throw new HttpError(502, 'upstream_error', 'upstream answer has malformed tool_calls');
  for (const c of calls) {
    const depth = typeof c.function.arguments === 'string' ? jsonDepth(c.function.arguments) : 0;
    if (depth > MAX_JSON_DEPTH) throw new HttpError(502, 'upstream_error', `upstream answer: tool call arguments nested ${depth} levels deep (at most ${MAX_JSON_DEPTH}); not passed on`);
  }
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  return {
    content: typeof msg.content === 'string' ? msg.content : null,
    toolCalls: calls.map((c) => (typeof c.function.arguments === 'string' ? c : { ...c, function: { ...c.function, arguments: JSON.stringify(c.function.arguments) } })),
    finish: typeof j.choices![0]!.finish_reason === 'string' ? j.choices![0]!.finish_reason : 'stop',
    promptTokens: num(j.usage?.prompt_tokens),
    completionTokens: num(j.usage?.completion_tokens),
  };
}

/** The proxy's upstreams: the agent's (forwarding, S³ turns, refusals) and the judge's (a chat backend). */
export class ProxyUpstreams {
  readonly judgeBackend: OpenAIBackend;
  private readonly agentBackend: OpenAIBackend;
  private readonly judgeIsUpstream: boolean;

  constructor(private readonly cfg: UpstreamConfig) {
    const backendOpts = { timeoutMs: cfg.timeoutMs, retries: cfg.retries, backoffBaseMs: 200, concurrency: 64, prefill: cfg.prefill };
    // one client per upstream, each with its own credentials (see the module comment)
    this.judgeIsUpstream = cfg.judgeUpstream === undefined || normBase(cfg.judgeUpstream) === normBase(cfg.upstream);
    this.judgeBackend = new OpenAIBackend({
      ...backendOpts, baseUrl: cfg.judgeUpstream ?? cfg.upstream, model: cfg.judgeModel,
      apiKey: cfg.judgeApiKey ?? (this.judgeIsUpstream ? cfg.apiKey : undefined),
    });
    this.agentBackend = new OpenAIBackend({ ...backendOpts, baseUrl: cfg.upstream, model: '', apiKey: cfg.apiKey });
  }

  /** the client's own Authorization header, when it may be passed on (no client key of ours in it) */
  private clientAuth(req: IncomingMessage): string | undefined {
    if (this.cfg.clientKey !== undefined) return undefined;
    const h = req.headers.authorization;
    return typeof h === 'string' ? h : undefined;
  }

  /** Per-call Authorization override for the judge: the client's header only when the judge is its upstream. */
  judgeAuthFor(req: IncomingMessage): string | undefined {
    return this.cfg.judgeApiKey || this.cfg.apiKey || !this.judgeIsUpstream ? undefined : this.clientAuth(req);
  }

  /** what an upstream's error message must not echo */
  private secretsOf(x: Exchange): (string | undefined)[] {
    return [this.cfg.apiKey, this.cfg.judgeApiKey, this.cfg.clientKey, x.req.headers.authorization?.replace(/^bearer\s+/i, '')];
  }

  private async fetchUp(x: Exchange, path: string, method: string, body?: Buffer): Promise<Response> {
    const headers: Record<string, string> = {};
    if (body) headers['content-type'] = 'application/json';
    const accept = x.req.headers.accept;
    if (typeof accept === 'string') headers.accept = accept;
    // the agent upstream: the configured key, else the client's own header
    const auth = this.cfg.apiKey ? `Bearer ${this.cfg.apiKey}` : this.clientAuth(x.req);
    if (auth) headers.authorization = auth;
    try {
      return await upstreamFetch({ url: `${this.cfg.upstream}${path}`, method, headers, body, timeoutMs: this.cfg.timeoutMs, signal: x.signal });
    } catch (e) {
      throw e instanceof UpstreamError ? upstreamHttpError(e) : e;
    }
  }

  /**
   * Forward to the upstream's `path` and pass the answer back: a stream (SSE) piped as it comes, anything else read
   * whole first. `timeoutMs` bounds the wait for the headers and then each wait between two chunks; the request's
   * deadline (`x.signal`, `--request-timeout-ms`) the whole answer. Failures before anything was sent are JSON
   * errors; a stream that fails after its headers ends with an SSE error event.
   */
  async forward(x: Exchange, path: string, method: 'GET' | 'POST', body: Buffer | undefined, extraHeaders: Record<string, string>): Promise<void> {
    const up = await this.fetchUp(x, path, method, body);
    if (!up.ok) throw await failedAnswer(up, `${this.cfg.upstream}${path}`, this.secretsOf(x));
    const outHeaders: Record<string, string> = { ...extraHeaders };
    for (const h of ['content-type', 'cache-control']) {
      const v = up.headers.get(h);
      if (v) outHeaders[h] = v;
    }
    const url = `${this.cfg.upstream}${path}`;
    if (/^text\/event-stream\b/i.test(up.headers.get('content-type') ?? '')) {
      x.res.writeHead(up.status, outHeaders);
      x.entry.status = up.status;
      await pipeStream(up, x, this.cfg.timeoutMs, url);
      return;
    }
    const whole = await readWhole(up, x, this.cfg.timeoutMs, url);
    x.res.writeHead(up.status, { ...outHeaders, 'content-length': String(whole.byteLength) });
    x.entry.status = up.status;
    x.res.end(whole);
  }

  /** One upstream chat call with the client's body (messages replaced, not streamed). */
  async turn(x: Exchange, body: Record<string, unknown>, messages: ChatMessage[]): Promise<UpstreamTurn> {
    const { stream: _s, stream_options: _so, ...rest } = body;
    const url = `${this.cfg.upstream}/chat/completions`;
    const up = await this.fetchUp(x, '/chat/completions', 'POST', Buffer.from(JSON.stringify({ ...rest, messages })));
    if (!up.ok) throw await failedAnswer(up, url, this.secretsOf(x));
    try {
      // within timeoutMs for the whole body, and no longer than the request's deadline or its client
      return upstreamTurnOf((await readUpstreamJson(up, MAX_UPSTREAM_ANSWER, url, this.cfg.timeoutMs, x.signal)) as Parameters<typeof upstreamTurnOf>[0]);
    } catch (e) {
      throw e instanceof UpstreamError ? upstreamHttpError(e) : e;
    }
  }

  /** The upstream's refusal: no tools, the refusal prefix continued; a failed call leaves the request blocked with the bare prefix. */
  async refusal(x: Exchange, messages: ChatMessage[], model: string, maxTokens: number): Promise<UpstreamTurn> {
    const prefix = this.cfg.refusalPrefix;
    try {
      const r = await this.agentBackend.chat({ messages, prefix, maxTokens, purpose: 'refusal', model, authorization: this.cfg.apiKey ? undefined : this.clientAuth(x.req), signal: x.signal });
      return { content: r.content, toolCalls: [], finish: r.finish === 'length' ? 'length' : 'stop', promptTokens: r.promptTokens, completionTokens: r.completionTokens };
    } catch (e) {
      x.entry.refusalError = (e as Error).message;
      return { content: prefix, toolCalls: [], finish: 'stop', promptTokens: 0, completionTokens: 0 };
    }
  }
}
