/**
 * `safekeep serve --upstream URL`: an OpenAI-compatible proxy that applies the guard in front of any upstream, as
 * handlers on the one HTTP core (`src/http/server.ts`: access policy, canonical paths, limits, JSON errors).
 *
 * Routes (everything else is 404, another method 405 — deny by default):
 * - `POST /v1/chat/completions`: with `tools` (or the legacy `functions`) it is judged (SafeKeep: prose tool view;
 *   or SafeJudge). Judged safe → the client's body is forwarded byte for byte to the upstream's
 *   `/chat/completions` (streaming answers are piped as they arrive). Judged unsafe → the upstream is asked for a
 *   refusal (no tools, refusal prefix prefilled or the documented fallback, see `backends/openai.ts`) and the
 *   client gets a normal `chat.completion` — or, with `stream: true`, the same content as SSE. Without tools there
 *   is nothing to judge: forwarded as is.
 * - `GET /v1/models`: forwarded.
 * - `POST /v1/completions`, `POST /v1/responses`: 404 unless the operator names them in `unguarded` (then forwarded
 *   unjudged: the guard cannot read those formats' tool use, so opening them is a deliberate choice).
 * The upstream path is always the route's own (`/chat/completions`, `/models` …), never the client's spelling.
 *
 * Errors are JSON `{"error": {"message", "type", "param", "code", ...}}`: malformed body → 400, body too large →
 * 413, upstream unreachable or redirecting → 502, upstream 5xx → 502 (with `upstream_status`; its body is never
 * relayed), upstream 4xx → same status (its `error.message` only), upstream or judge timeout → 504, judge failure
 * → 502 (fail closed: nothing is executed).
 *
 * With `skills` (S³, `safekeep serve --skills DIR`): every chat completion goes through `s3/proxy-flow.ts` — the
 * request, every tool result in the history, the upstream's tool calls and its final answer are each checked by
 * the skills of that stage and recovered (or blocked); decisions are cached by content, so a resent raw tool result
 * is rewritten again without a new check. Headers: `x-safekeep-action` (forward | recover | refuse),
 * `x-safekeep-stages` (`stage=action` per stage decision that had skills, in order), `x-safekeep-risky`. One JSON
 * log line per stage decision (`event: "stage"`), then the request line.
 *
 * Credentials: clients authenticate with `clientKey` when one is set (their header is then never forwarded). The
 * agent upstream gets `apiKey` when configured, else (no client key) the client's own Authorization header, else
 * none. The judge upstream gets `judgeApiKey`; when it is the agent upstream itself it is treated like it; a
 * different judge host never receives the client's header. Keys come resolved from the CLI, never from the
 * environment here.
 */
import type { IncomingMessage, Server } from 'node:http';
import { flattenTools } from '../prompts/flatten.ts';
import type { ToolSpec } from '../data/types.ts';
import { SafekeepError } from '../util/errors.ts';
import { jsonDepth, MAX_JSON_DEPTH } from '../util/json-bounded.ts';
import { HttpError, badRequest, sendJson } from '../http/errors.ts';
import type { AccessPolicy } from '../http/policy.ts';
import { createHttpServer, type Exchange, type Route, type ServerLimits } from '../http/server.ts';
import { sendSse, usageOf } from '../http/sse.ts';
import { failureDetail, hasCredentials, MAX_UPSTREAM_ANSWER, readUpstreamJson, readUpstreamText, redactSecrets, redactUrl, upstreamFetch, UpstreamError } from '../http/upstream.ts';
import { canonicalBytes, parseChatRequest, type ChatRequest } from '../chat/body.ts';
import { SchemaBoundError } from '../prompts/flatten.ts';
import { BackendError, OpenAIBackend, type PrefillMode } from '../chat/openai.ts';
import { judge } from '../guard/judge.ts';
import { REFUSAL_PREFIX } from '../guard/prompts.ts';
import type { ChatMessage, Flattener, JudgeResult, UnparseablePolicy, WireToolCall } from '../guard/types.ts';
import type { CheckRegistry } from '../s3/check.ts';
import { s3ProxyFlow, StageCache, type UpstreamTurn } from '../s3/flow.ts';
import type { Skill } from '../s3/skill.ts';

/** endpoints the guard cannot judge, served only when named (forwarded unjudged) */
export const UNGUARDED_ENDPOINTS = ['completions', 'responses'] as const;
export type UnguardedEndpoint = (typeof UNGUARDED_ENDPOINTS)[number];

export interface ProxyOptions {
  /** upstream base URL, e.g. http://127.0.0.1:8000/v1 */
  upstream: string;
  /** judge endpoint base URL (default: the upstream) */
  judgeUpstream?: string;
  /**
   * the judge's model: the server's choice, never the client's (a client naming a weak model would pick its own
   * judge)
   */
  judgeModel: string;
  method?: 'safekeep' | 'safejudge';
  flatten?: Flattener;
  /** the upstream's key; when unset, the client's Authorization header is forwarded (unless `clientKey` is set) */
  apiKey?: string;
  /** the judge/guard upstream's key (default: none for a separate judge host) */
  judgeApiKey?: string;
  /** clients must send `Authorization: Bearer <clientKey>` */
  clientKey?: string;
  /** browser origins allowed (CORS); none = cross-origin requests refused */
  corsOrigins?: readonly string[];
  /** Host names served besides loopback names while bound to loopback */
  allowedHosts?: readonly string[];
  /** endpoints forwarded unjudged (default none: 404) */
  unguarded?: readonly UnguardedEndpoint[];
  /** S³: skills of every stage (replaces `method`) */
  skills?: readonly Skill[];
  /** S³: the guard agent picks among filtered skills (default true) */
  guardDecision?: boolean;
  /** S³: 'block' = no recovery (default 'skill': each skill's own mitigation) */
  mitigation?: 'skill' | 'block';
  /** S³: extra check implementations (e.g. probe) */
  checks?: CheckRegistry;
  /** S³: upstream rounds after replaced tool calls (default 3) */
  maxRounds?: number;
  /** S³: guard checks of not-yet-seen tool results one request may cost (default 64; more → 400) */
  maxFreshObservations?: number;
  /** upstream timeout until response headers (default 60 s) */
  timeoutMs?: number;
  /**
   * one request from its arrival until its answer begins — the judge or guard calls with all their retries, and the
   * upstream call (default 2 × timeoutMs); past it → 504, nothing executed
   */
  requestTimeoutMs?: number;
  /** retries of judge/refusal calls (default 2) */
  retries?: number;
  prefill?: PrefillMode;
  onUnparseable?: UnparseablePolicy;
  judgeMaxTokens?: number;
  refusalPrefix?: string;
  /** one JSON line per request (default: stderr) */
  log?: (line: string) => void;
  /** default 16 MiB (also `limits.maxBodyBytes`) */
  maxBodyBytes?: number;
  limits?: ServerLimits;
}

const normBase = (u: string) => u.replace(/\/+$/, '').replace(/\/chat\/completions$/, '');

/** An upstream base URL the proxy can use without leaking anything: http(s), no credentials. */
export function checkUpstreamUrl(u: string, what: string): void {
  if (!/^https?:\/\/[^/]+/i.test(u)) throw new SafekeepError(`${what} must be an http(s) URL, got '${redactUrl(u)}'`);
  if (hasCredentials(u)) throw new SafekeepError(`${what}: credentials in the URL (user:password@) are not accepted — they would be sent and printed; put the key in an environment variable and name it with --api-key-env / --judge-api-key-env`);
}

/** UpstreamError → the client's error. */
function upstreamHttpError(e: UpstreamError): HttpError {
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

export function createGuardProxy(opts: ProxyOptions): Server {
  checkUpstreamUrl(opts.upstream, '--upstream');
  if (opts.judgeUpstream !== undefined) checkUpstreamUrl(opts.judgeUpstream, '--judge-upstream');
  if (typeof opts.judgeModel !== 'string' || opts.judgeModel === '') throw new SafekeepError('the guard proxy needs its judge model (--judge-model): the judge is the server\'s choice, never the client\'s');
  const upstream = opts.upstream.replace(/\/+$/, '');
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const method = opts.method ?? 'safekeep';
  const backendOpts = { timeoutMs, retries: opts.retries ?? 2, backoffBaseMs: 200, concurrency: 64, prefill: opts.prefill };
  // one client per upstream, each with its own credentials (see the module comment)
  const judgeIsUpstream = opts.judgeUpstream === undefined || normBase(opts.judgeUpstream) === normBase(upstream);
  const judgeBackend = new OpenAIBackend({
    ...backendOpts, baseUrl: opts.judgeUpstream ?? upstream, model: opts.judgeModel ?? '',
    apiKey: opts.judgeApiKey ?? (judgeIsUpstream ? opts.apiKey : undefined),
  });
  const agentBackend = new OpenAIBackend({ ...backendOpts, baseUrl: upstream, model: '', apiKey: opts.apiKey });
  const log = opts.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const cache = new StageCache();
  const prefix = opts.refusalPrefix ?? REFUSAL_PREFIX;

  /** the client's own Authorization header, when it may be passed on (no client key of ours in it) */
  const clientAuth = (req: IncomingMessage): string | undefined => {
    if (opts.clientKey !== undefined) return undefined;
    const h = req.headers.authorization;
    return typeof h === 'string' ? h : undefined;
  };
  /** Authorization for the agent upstream: the configured key, else the client's own header. */
  const authFor = (req: IncomingMessage): string | undefined => (opts.apiKey ? `Bearer ${opts.apiKey}` : clientAuth(req));
  /** Per-call Authorization override for the judge: the client's header only when the judge is its upstream. */
  const judgeAuthFor = (req: IncomingMessage): string | undefined => (opts.judgeApiKey || opts.apiKey || !judgeIsUpstream ? undefined : clientAuth(req));

  /** what an upstream's error message must not echo */
  const secretsOf = (x: Exchange) => [opts.apiKey, opts.judgeApiKey, opts.clientKey, x.req.headers.authorization?.replace(/^bearer\s+/i, '')];

  async function fetchUp(x: Exchange, path: string, method: string, body?: Buffer): Promise<Response> {
    const headers: Record<string, string> = {};
    if (body) headers['content-type'] = 'application/json';
    const accept = x.req.headers.accept;
    if (typeof accept === 'string') headers.accept = accept;
    const auth = authFor(x.req);
    if (auth) headers.authorization = auth;
    try {
      return await upstreamFetch({ url: `${upstream}${path}`, method, headers, body, timeoutMs, signal: x.signal });
    } catch (e) {
      throw e instanceof UpstreamError ? upstreamHttpError(e) : e;
    }
  }

  /** Forward to the upstream's `path` and pipe the answer back; failures become JSON errors. */
  async function forward(x: Exchange, path: string, method: 'GET' | 'POST', body: Buffer | undefined, extraHeaders: Record<string, string>): Promise<void> {
    const up = await fetchUp(x, path, method, body);
    if (!up.ok) throw await failedAnswer(up, `${upstream}${path}`, secretsOf(x));
    const outHeaders: Record<string, string> = { ...extraHeaders };
    for (const h of ['content-type', 'cache-control']) {
      const v = up.headers.get(h);
      if (v) outHeaders[h] = v;
    }
    const res = x.res;
    res.writeHead(up.status, outHeaders);
    x.entry.status = up.status;
    if (up.body) {
      const reader = up.body.getReader();
      // a client that goes away cancels the upstream read (no leaked stream, no wait for a drain that never comes)
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

  async function refusal(x: Exchange, messages: ChatMessage[], model: string, maxTokens: number): Promise<UpstreamTurn> {
    try {
      const r = await agentBackend.chat({ messages, prefix, maxTokens, purpose: 'refusal', model, authorization: opts.apiKey ? undefined : clientAuth(x.req), signal: x.signal });
      return { content: r.content, toolCalls: [], finish: r.finish === 'length' ? 'length' : 'stop', promptTokens: r.promptTokens, completionTokens: r.completionTokens };
    } catch (e) {
      // the request stays blocked; the client gets the bare prefix
      x.entry.refusalError = (e as Error).message;
      return { content: prefix, toolCalls: [], finish: 'stop', promptTokens: 0, completionTokens: 0 };
    }
  }

  function answer(x: Exchange, c: ChatRequest, model: string, t: { content: string | null; toolCalls: WireToolCall[]; finish: string; promptTokens: number; completionTokens: number }, headers: Record<string, string>): void {
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

  const guardFailed = (e: unknown, what: string): never => {
    // a tool schema the judge cannot be shown (beyond the flattener's bounds) is the client's error, found before any call
    if (e instanceof SchemaBoundError) throw badRequest(e.message);
    if (e instanceof BackendError) throw new HttpError(e.status === -1 ? 504 : 502, 'judge_error', `${what} failed, request not executed: ${e.message}`);
    throw e;
  };

  async function chat(x: Exchange): Promise<void> {
    const raw = await x.body();
    const c = parseChatRequest(raw);
    const model = typeof c.body.model === 'string' ? c.body.model : '';
    Object.assign(x.entry, { model, tools: c.tools.length, stream: c.stream, ...(c.legacyFunctions ? { functions: true } : {}) });
    const guarded = opts.skills !== undefined || c.tools.length > 0;
    if (guarded && c.nonTextParts.length > 0) throw badRequest(`${c.nonTextParts[0]}: the guard reads text only and cannot judge this content part; send text`);
    if (opts.skills) return chatS3(x, c, model);
    // the upstream gets the parsed request re-serialised, never the client's bytes: what was judged is what runs
    const body = canonicalBytes(c.body);
    if (c.tools.length === 0) {
      x.entry.action = 'passthrough';
      return forward(x, '/chat/completions', 'POST', body, { 'x-safekeep-action': 'passthrough', 'x-safekeep-verdict': 'skipped' });
    }
    const judgeOptions = {
      toolView: method === 'safekeep' ? 'prose' as const : 'json' as const,
      flatten: opts.flatten ?? flattenTools,
      onUnparseable: opts.onUnparseable,
      maxTokens: opts.judgeMaxTokens,
      model: opts.judgeModel,
      authorization: judgeAuthFor(x.req),
      signal: x.signal,
      settings: c.settings,
    };
    let verdict: JudgeResult;
    try {
      verdict = await judge(c.messages, c.tools, judgeBackend, judgeOptions);
    } catch (e) {
      return guardFailed(e, 'guard judge');
    }
    Object.assign(x.entry, { verdict: verdict.verdict, unsafe: verdict.unsafe, judgeLatencyMs: Math.round(verdict.latencyMs), judgeTokens: verdict.tokens });
    const guardHeaders = { 'x-safekeep-verdict': verdict.verdict };
    if (!verdict.unsafe) {
      x.entry.action = 'forward';
      return forward(x, '/chat/completions', 'POST', body, { ...guardHeaders, 'x-safekeep-action': 'forward' });
    }
    x.entry.action = 'refuse';
    const r = await refusal(x, c.messages, model, c.maxTokens ?? 256);
    answer(x, c, model, r, { ...guardHeaders, 'x-safekeep-action': 'refuse' });
  }

  /** One upstream chat call with the client's body (messages replaced, not streamed). */
  async function upstreamTurn(x: Exchange, body: Record<string, unknown>, messages: ChatMessage[]): Promise<UpstreamTurn> {
    const { stream: _s, stream_options: _so, ...rest } = body;
    const url = `${upstream}/chat/completions`;
    const up = await fetchUp(x, '/chat/completions', 'POST', Buffer.from(JSON.stringify({ ...rest, messages })));
    if (!up.ok) throw await failedAnswer(up, url, secretsOf(x));
    let j: { choices?: { message?: { content?: unknown; tool_calls?: unknown }; finish_reason?: unknown }[]; usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } };
    try {
      j = (await readUpstreamJson(up, MAX_UPSTREAM_ANSWER, url, timeoutMs)) as typeof j;
    } catch (e) {
      throw e instanceof UpstreamError ? upstreamHttpError(e) : e;
    }
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

  async function chatS3(x: Exchange, c: ChatRequest, model: string): Promise<void> {
    const maxTokens = c.maxTokens ?? 256;
    let result;
    try {
      result = await s3ProxyFlow(c.messages, c.tools as ToolSpec[], {
        config: { skills: opts.skills!, guardDecision: opts.guardDecision ?? true, mitigation: opts.mitigation ?? 'skill', checks: opts.checks },
        settings: c.settings,
        // the guard's calls stop with the request (its deadline, a client that left)
        env: { backend: { name: judgeBackend.name, callFormat: judgeBackend.callFormat, chat: (call) => judgeBackend.chat({ ...call, signal: call.signal ?? x.signal }) }, model: opts.judgeModel, authorization: judgeAuthFor(x.req), onUnparseable: opts.onUnparseable },
        upstream: (m) => upstreamTurn(x, c.body, m),
        refuse: (m) => refusal(x, m, model, maxTokens),
        maxRounds: opts.maxRounds,
        maxFreshObservations: opts.maxFreshObservations,
        cache,
      });
    } catch (e) {
      return guardFailed(e, 'S³ guard');
    }
    for (const { decision: d, changed, cached } of result.decisions) {
      log(JSON.stringify({
        ts: new Date().toISOString(), id: x.id, event: 'stage', stage: d.stage, triggered: d.triggered, filtered: d.filtered, picked: d.picked,
        guardAgent: d.guardAgent ? { raw: d.guardAgent.raw, unparseable: d.guardAgent.unparseable } : null,
        runs: d.runs.map((r) => ({ skill: r.skill, risky: r.result.risky, reason: r.result.reason, evidence: r.result.evidence })),
        action: d.action, changed, cached, tokens: cached ? 0 : d.tokens, ms: cached ? 0 : Math.round(d.latencyMs),
      }));
    }
    const shown = result.decisions.filter((d) => d.decision.triggered.length > 0).map((d) => `${d.decision.stage}=${d.decision.action}`);
    const risky = [...new Set(result.decisions.flatMap((d) => d.decision.risky))];
    const headers = {
      'x-safekeep-action': result.action,
      // a long history has one observation decision per tool result: the header stays bounded, and ASCII (a header
      // value outside Latin-1 is an exception after the upstream was called)
      'x-safekeep-stages': (shown.length > 64 ? [...shown.slice(0, 64), `... ${shown.length - 64} more`] : shown).join(',') || 'none',
      'x-safekeep-risky': risky.join(',') || 'none',
    };
    Object.assign(x.entry, { action: result.action, stages: headers['x-safekeep-stages'], risky, cachedStages: result.decisions.filter((d) => d.cached).length });
    const finish = result.toolCalls.length ? 'tool_calls' : result.finish === 'tool_calls' ? 'stop' : result.finish;
    answer(x, c, model, { content: result.content, toolCalls: result.toolCalls, finish, promptTokens: result.usage.promptTokens, completionTokens: result.usage.completionTokens }, headers);
  }

  const routes: Record<string, Route> = {
    'chat/completions': { methods: ['POST'], handle: chat },
    models: { methods: ['GET'], handle: (x) => { x.entry.action = 'passthrough'; return forward(x, '/models', 'GET', undefined, { 'x-safekeep-action': 'passthrough' }); } },
  };
  for (const name of opts.unguarded ?? []) {
    routes[name] = {
      methods: ['POST'],
      handle: async (x) => {
        const raw = await x.body();
        x.entry.action = 'passthrough-unguarded';
        return forward(x, `/${name}`, 'POST', raw, { 'x-safekeep-action': 'passthrough-unguarded' });
      },
    };
  }
  const policy: AccessPolicy = { clientKey: opts.clientKey, corsOrigins: opts.corsOrigins, allowedHosts: opts.allowedHosts };
  return createHttpServer({ routes, policy, limits: { deadlineMs: opts.requestTimeoutMs ?? 2 * timeoutMs, ...opts.limits, ...(opts.maxBodyBytes !== undefined ? { maxBodyBytes: opts.maxBodyBytes } : {}) }, log });
}
