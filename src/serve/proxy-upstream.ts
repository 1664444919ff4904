/**
 * The proxy's side of its upstreams: who gets which credentials, forwarding a request and piping the answer back,
 * one non-streamed turn for S³, the refusal call, and how an upstream's failure becomes the client's JSON error.
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
import { failureDetail, MAX_UPSTREAM_ANSWER, readUpstreamJson, readUpstreamText, redactSecrets, upstreamFetch, UpstreamError } from '../http/upstream.ts';
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

/** Pipe an upstream answer's body to the client as it arrives; a client that goes away cancels the upstream read. */
async function pipeBody(up: Response, x: Exchange): Promise<void> {
  const res = x.res;
  if (up.body) {
    const reader = up.body.getReader();
    // no leaked stream, no wait for a drain that never comes
    const onClose = () => void reader.cancel().catch(() => undefined);
    res.once('close', onClose);
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done || res.destroyed) break;
        if (!res.write(value)) {
          await new Promise<void>((r) => {
            const go = () => { res.off('drain', go); res.off('close', go); r(); };
            res.once('drain', go);
            res.once('close', go);
          });
        }
      }
    } catch {
      // upstream broke mid-stream or the client left: end what we have (headers are out, no JSON error possible)
    } finally {
      res.off('close', onClose);
    }
  }
  res.end();
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

  /** Forward to the upstream's `path` and pipe the answer back; failures become JSON errors. */
  async forward(x: Exchange, path: string, method: 'GET' | 'POST', body: Buffer | undefined, extraHeaders: Record<string, string>): Promise<void> {
    const up = await this.fetchUp(x, path, method, body);
    if (!up.ok) throw await failedAnswer(up, `${this.cfg.upstream}${path}`, this.secretsOf(x));
    const outHeaders: Record<string, string> = { ...extraHeaders };
    for (const h of ['content-type', 'cache-control']) {
      const v = up.headers.get(h);
      if (v) outHeaders[h] = v;
    }
    x.res.writeHead(up.status, outHeaders);
    x.entry.status = up.status;
    await pipeBody(up, x);
  }

  /** One upstream chat call with the client's body (messages replaced, not streamed). */
  async turn(x: Exchange, body: Record<string, unknown>, messages: ChatMessage[]): Promise<UpstreamTurn> {
    const { stream: _s, stream_options: _so, ...rest } = body;
    const url = `${this.cfg.upstream}/chat/completions`;
    const up = await this.fetchUp(x, '/chat/completions', 'POST', Buffer.from(JSON.stringify({ ...rest, messages })));
    if (!up.ok) throw await failedAnswer(up, url, this.secretsOf(x));
    try {
      return upstreamTurnOf((await readUpstreamJson(up, MAX_UPSTREAM_ANSWER, url, this.cfg.timeoutMs)) as Parameters<typeof upstreamTurnOf>[0]);
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
