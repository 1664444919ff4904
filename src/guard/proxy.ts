/**
 * `safekeep serve`: an OpenAI-compatible HTTP proxy (node:http) that applies the guard in front of any upstream.
 *
 * - `POST …/chat/completions` with a non-empty `tools` array is judged (SafeKeep: prose tool view; or SafeJudge).
 *   Judged safe → the client's body is forwarded byte for byte (streaming responses are piped as they arrive).
 *   Judged unsafe → the upstream is asked for a refusal (no tools, refusal prefix prefilled or the documented
 *   fallback, see `backends/openai.ts`) and the client gets a normal `chat.completion` — or, when it asked for
 *   `stream: true`, the same content as SSE chunks ending in `data: [DONE]`.
 * - Everything else (no tools, other paths such as `GET /v1/models`) passes through untouched.
 * - Errors are JSON `{"error": {"message", "type", ...}}`, never a crash: malformed body → 400, body too large → 413,
 *   upstream unreachable → 502, upstream 5xx → 502 (with `upstream_status`), upstream 4xx → same status,
 *   upstream or judge timeout → 504, judge failure → 502 (fail closed: nothing is executed).
 * - One JSON log line per request (`log`): id, model, number of tools, verdict, action, judge latency/tokens,
 *   status, total latency. Responses carry `x-safekeep-verdict` and `x-safekeep-action`.
 *
 * Paths: the client path minus a leading `/v1` is appended to the upstream base URL (`http://up:8000/v1`).
 *
 * With `skills` (S³, `safekeep serve --skills DIR`): every chat completion goes through `s3/proxy-flow.ts` — input,
 * new tool observations, the upstream's tool calls and its final answer are each checked by the skills of that
 * stage and recovered (or blocked). The upstream is then called without streaming; a streaming client gets the
 * checked answer as SSE. Headers: `x-safekeep-action` (forward | recover | refuse), `x-safekeep-stages`
 * (`stage=action` for each stage that has skills, in order), `x-safekeep-risky` (skills that found a risk). One JSON
 * log line per stage decision (`event: "stage"`), then the request line.
 *
 * Credentials: each upstream has its own client and key. The agent upstream gets `apiKey` when configured, else the
 * client's own Authorization header, else none (never a server key the operator did not configure). The
 * judge/guard upstream gets `judgeApiKey` when configured; when it is the agent upstream itself (same base URL) it is
 * treated like it; a different judge host never receives the client's header. The keys come resolved from the CLI
 * (`--api-key-env VAR` names the variable), so this file never reads the environment.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { flattenTools } from '../prompts/flatten.ts';
import type { ToolSpec } from '../data/types.ts';
import { BackendError, OpenAIBackend, type PrefillMode } from './backends/openai.ts';
import { judge } from './judge.ts';
import { REFUSAL_PREFIX } from './prompts.ts';
import type { ChatMessage, Flattener, JudgeResult, UnparseablePolicy, WireToolCall } from './types.ts';
import type { CheckRegistry } from './s3/check.ts';
import { s3ProxyFlow, type UpstreamTurn } from './s3/proxy-flow.ts';
import type { Skill } from './s3/skill.ts';

export interface ProxyOptions {
  /** upstream base URL, e.g. http://127.0.0.1:8000/v1 */
  upstream: string;
  /** judge endpoint base URL (default: the upstream) */
  judgeUpstream?: string;
  /** judge model (default: the client's model) */
  judgeModel?: string;
  method?: 'safekeep' | 'safejudge';
  flatten?: Flattener;
  /** the upstream's key; when unset, the client's Authorization header is forwarded */
  apiKey?: string;
  /** the judge/guard upstream's key (default: none for a separate judge host) */
  judgeApiKey?: string;
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
  /** upstream timeout until response headers (default 60 s) */
  timeoutMs?: number;
  /** retries of judge/refusal calls (default 2) */
  retries?: number;
  prefill?: PrefillMode;
  onUnparseable?: UnparseablePolicy;
  judgeMaxTokens?: number;
  refusalPrefix?: string;
  /** one JSON line per request (default: stderr) */
  log?: (line: string) => void;
  /** default 16 MiB */
  maxBodyBytes?: number;
}

class HttpError extends Error {
  constructor(readonly status: number, readonly type: string, message: string, readonly extra: Record<string, unknown> = {}) {
    super(message);
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= limit) chunks.push(c); // past the limit: drain the rest so the client can read our 413
    });
    req.on('end', () => {
      if (size > limit) reject(new HttpError(413, 'invalid_request_error', `request body exceeds ${limit} bytes`));
      else resolve(Buffer.concat(chunks));
    });
    req.on('error', reject);
  });
}

/** Validate a chat-completions body; returns it typed or throws a 400. */
export function parseChatBody(raw: Buffer): { body: Record<string, unknown>; messages: ChatMessage[]; tools: ToolSpec[] } {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch (e) {
    throw new HttpError(400, 'invalid_request_error', `request body is not valid JSON (${(e as Error).message})`);
  }
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw new HttpError(400, 'invalid_request_error', 'request body must be a JSON object');
  const b = body as Record<string, unknown>;
  if (!Array.isArray(b.messages) || b.messages.length === 0) throw new HttpError(400, 'invalid_request_error', '"messages" must be a non-empty array');
  b.messages.forEach((m, i) => {
    if (!m || typeof m !== 'object' || typeof (m as { role?: unknown }).role !== 'string') {
      throw new HttpError(400, 'invalid_request_error', `messages[${i}] must be an object with a string "role"`);
    }
  });
  if (b.tools !== undefined && b.tools !== null && !Array.isArray(b.tools)) throw new HttpError(400, 'invalid_request_error', '"tools" must be an array');
  const tools = ((b.tools as unknown[] | null | undefined) ?? []) as ToolSpec[];
  tools.forEach((t, i) => {
    if (!t || typeof t !== 'object' || typeof t.function?.name !== 'string') {
      throw new HttpError(400, 'invalid_request_error', `tools[${i}] must be {"type": "function", "function": {"name", ...}}`);
    }
  });
  return { body: b, messages: b.messages as ChatMessage[], tools };
}

/** SSE chunks of a finished completion (role, content, tool calls, finish), then [DONE]. */
export function completionToSse(id: string, model: string, content: string, toolCalls: readonly WireToolCall[] = [], finish = 'stop'): string {
  const created = Math.floor(Date.now() / 1000);
  const chunk = (delta: Record<string, unknown>, finishReason: string | null) =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason: finishReason }] })}\n\n`;
  let out = chunk({ role: 'assistant', content: '' }, null);
  if (content) out += chunk({ content }, null);
  if (toolCalls.length) out += chunk({ tool_calls: toolCalls.map((c, index) => ({ index, id: c.id, type: 'function', function: c.function })) }, null);
  return out + chunk({}, finish) + 'data: [DONE]\n\n';
}

const normBase = (u: string) => u.replace(/\/+$/, '').replace(/\/chat\/completions$/, '');

export function createGuardProxy(opts: ProxyOptions): Server {
  const upstream = opts.upstream.replace(/\/+$/, '');
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const log = opts.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const maxBody = opts.maxBodyBytes ?? 16 * 1024 * 1024;
  const method = opts.method ?? 'safekeep';
  const backendOpts = { timeoutMs, retries: opts.retries ?? 2, backoffBaseMs: 200, concurrency: 64, prefill: opts.prefill };
  // one client per upstream, each with its own credentials (see the module comment)
  const judgeIsUpstream = opts.judgeUpstream === undefined || normBase(opts.judgeUpstream) === normBase(upstream);
  const judgeBackend = new OpenAIBackend({
    ...backendOpts, baseUrl: opts.judgeUpstream ?? upstream, model: opts.judgeModel ?? '',
    apiKey: opts.judgeApiKey ?? (judgeIsUpstream ? opts.apiKey : undefined),
  });
  const agentBackend = new OpenAIBackend({ ...backendOpts, baseUrl: upstream, model: '', apiKey: opts.apiKey });
  let counter = 0;

  /** Authorization for the agent upstream: the configured key, else the client's own header. */
  function authFor(req: IncomingMessage): string | undefined {
    if (opts.apiKey) return `Bearer ${opts.apiKey}`;
    const h = req.headers.authorization;
    return typeof h === 'string' ? h : undefined;
  }

  /** Per-call Authorization override for the judge: the client's header only when the judge is its upstream. */
  function judgeAuthFor(req: IncomingMessage): string | undefined {
    if (opts.judgeApiKey || opts.apiKey || !judgeIsUpstream) return undefined;
    const h = req.headers.authorization;
    return typeof h === 'string' ? h : undefined;
  }

  /** Forward a request upstream and stream the answer back; upstream failures become JSON errors. */
  async function forward(req: IncomingMessage, res: ServerResponse, body: Buffer | null, extraHeaders: Record<string, string>): Promise<number> {
    const path = (req.url ?? '/').replace(/^\/v1(?=\/|$)/, '');
    const headers: Record<string, string> = {};
    for (const h of ['content-type', 'accept']) {
      const v = req.headers[h];
      if (typeof v === 'string') headers[h] = v;
    }
    const auth = authFor(req);
    if (auth) headers.authorization = auth;
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), timeoutMs);
    let up: Response;
    try {
      up = await fetch(upstream + path, {
        method: req.method,
        headers,
        body: body && req.method !== 'GET' && req.method !== 'HEAD' ? body : undefined,
        signal: ac.signal,
      });
    } catch (e) {
      clearTimeout(timer);
      if (ac.signal.aborted) throw new HttpError(504, 'upstream_timeout', `upstream did not answer within ${timeoutMs} ms`);
      const err = e as Error & { cause?: Error };
      throw new HttpError(502, 'upstream_unreachable', `upstream ${upstream} unreachable: ${err.cause?.message ?? err.message}`);
    }
    clearTimeout(timer);
    if (!up.ok) {
      const text = await up.text().catch(() => '');
      const status = up.status >= 500 ? 502 : up.status;
      throw new HttpError(status, 'upstream_error', `upstream returned HTTP ${up.status}: ${text.slice(0, 500)}`, { upstream_status: up.status });
    }
    const outHeaders: Record<string, string> = { ...extraHeaders };
    for (const h of ['content-type', 'cache-control']) {
      const v = up.headers.get(h);
      if (v) outHeaders[h] = v;
    }
    res.writeHead(up.status, outHeaders);
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
    return up.status;
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const t0 = performance.now();
    const id = `sk-${Date.now().toString(36)}-${(++counter).toString(36)}`;
    const entry: Record<string, unknown> = { ts: new Date().toISOString(), id, path: req.url, method: req.method };
    try {
      const raw = await readBody(req, maxBody);
      const isChat = req.method === 'POST' && /\/chat\/completions\/?$/.test((req.url ?? '').split('?')[0]!);
      if (!isChat) {
        entry.action = 'passthrough';
        entry.status = await forward(req, res, raw, { 'x-safekeep-action': 'passthrough' });
        return;
      }
      const { body, messages, tools } = parseChatBody(raw);
      const model = typeof body.model === 'string' ? body.model : '';
      Object.assign(entry, { model, tools: tools.length, stream: body.stream === true });
      if (opts.skills) {
        await handleS3(req, res, id, body, messages, tools, model, entry);
        return;
      }
      if (tools.length === 0) {
        entry.action = 'passthrough';
        entry.status = await forward(req, res, raw, { 'x-safekeep-action': 'passthrough', 'x-safekeep-verdict': 'skipped' });
        return;
      }
      let verdict: JudgeResult;
      try {
        verdict = await judge(messages, tools, judgeBackend, {
          toolView: method === 'safekeep' ? 'prose' : 'json',
          flatten: opts.flatten ?? flattenTools,
          onUnparseable: opts.onUnparseable,
          maxTokens: opts.judgeMaxTokens,
          model: opts.judgeModel ?? model,
          authorization: judgeAuthFor(req),
        });
      } catch (e) {
        if (e instanceof BackendError) {
          throw new HttpError(e.status === -1 ? 504 : 502, 'judge_error', `guard judge failed, request not executed: ${e.message}`);
        }
        throw e;
      }
      Object.assign(entry, { verdict: verdict.verdict, unsafe: verdict.unsafe, judgeLatencyMs: Math.round(verdict.latencyMs), judgeTokens: verdict.tokens });
      const guardHeaders = { 'x-safekeep-verdict': verdict.verdict };
      if (!verdict.unsafe) {
        entry.action = 'forward';
        entry.status = await forward(req, res, raw, { ...guardHeaders, 'x-safekeep-action': 'forward' });
        return;
      }
      entry.action = 'refuse';
      const prefix = opts.refusalPrefix ?? REFUSAL_PREFIX;
      const maxTokens = Number(body.max_completion_tokens ?? body.max_tokens ?? 256) || 256;
      let content = prefix;
      let usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
      try {
        const r = await agentBackend.chat({ messages, prefix, maxTokens, purpose: 'refusal', model, authorization: opts.apiKey ? undefined : authFor(req) });
        content = r.content;
        usage = { prompt_tokens: r.promptTokens, completion_tokens: r.completionTokens, total_tokens: r.promptTokens + r.completionTokens };
      } catch (e) {
        // the request stays blocked; the client gets the bare prefix
        entry.refusalError = (e as Error).message;
      }
      const headers = { ...guardHeaders, 'x-safekeep-action': 'refuse' };
      if (body.stream === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...headers });
        res.end(completionToSse(id, model, content));
      } else {
        sendJson(res, 200, {
          id, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model,
          choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
          usage,
        }, headers);
      }
      entry.status = 200;
    } catch (e) {
      const err = e instanceof HttpError ? e : new HttpError(500, 'internal_error', `safekeep proxy: ${(e as Error).message}`);
      entry.status = err.status;
      entry.action = entry.action ?? 'error';
      entry.error = err.message;
      sendJson(res, err.status, { error: { message: err.message, type: err.type, ...err.extra } }, { 'x-safekeep-action': 'error' });
    } finally {
      entry.ms = Math.round(performance.now() - t0);
      log(JSON.stringify(entry));
    }
  }

  /** One upstream chat call with the client's body (messages replaced, not streamed). */
  async function upstreamTurn(req: IncomingMessage, body: Record<string, unknown>, messages: ChatMessage[]): Promise<UpstreamTurn> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    const auth = authFor(req);
    if (auth) headers.authorization = auth;
    const { stream: _s, stream_options: _so, ...rest } = body;
    let up: Response;
    try {
      up = await fetch(`${upstream}/chat/completions`, { method: 'POST', headers, body: JSON.stringify({ ...rest, messages }), signal: AbortSignal.timeout(timeoutMs) });
    } catch (e) {
      const err = e as Error & { cause?: Error };
      if (err.name === 'TimeoutError' || err.name === 'AbortError') throw new HttpError(504, 'upstream_timeout', `upstream did not answer within ${timeoutMs} ms`);
      throw new HttpError(502, 'upstream_unreachable', `upstream ${upstream} unreachable: ${err.cause?.message ?? err.message}`);
    }
    const text = await up.text();
    if (!up.ok) throw new HttpError(up.status >= 500 ? 502 : up.status, 'upstream_error', `upstream returned HTTP ${up.status}: ${text.slice(0, 500)}`, { upstream_status: up.status });
    let j: { choices?: { message?: { content?: string | null; tool_calls?: WireToolCall[] }; finish_reason?: string }[]; usage?: { prompt_tokens?: number; completion_tokens?: number } };
    try {
      j = JSON.parse(text) as typeof j;
    } catch {
      throw new HttpError(502, 'upstream_error', `upstream answer is not JSON: ${text.slice(0, 200)}`);
    }
    const msg = j.choices?.[0]?.message;
    if (!msg) throw new HttpError(502, 'upstream_error', `upstream answer has no choices[0].message: ${text.slice(0, 200)}`);
    return { content: msg.content ?? null, toolCalls: msg.tool_calls ?? [], finish: j.choices![0]!.finish_reason ?? 'stop', promptTokens: j.usage?.prompt_tokens ?? 0, completionTokens: j.usage?.completion_tokens ?? 0 };
  }

  async function handleS3(req: IncomingMessage, res: ServerResponse, id: string, body: Record<string, unknown>, messages: ChatMessage[], tools: ToolSpec[], model: string, entry: Record<string, unknown>): Promise<void> {
    const prefix = opts.refusalPrefix ?? REFUSAL_PREFIX;
    const maxTokens = Number(body.max_completion_tokens ?? body.max_tokens ?? 256) || 256;
    let result;
    try {
      result = await s3ProxyFlow(messages, tools, {
        config: { skills: opts.skills!, guardDecision: opts.guardDecision ?? true, mitigation: opts.mitigation ?? 'skill', checks: opts.checks },
        env: { backend: judgeBackend, model: opts.judgeModel ?? model, authorization: judgeAuthFor(req), onUnparseable: opts.onUnparseable },
        upstream: (m) => upstreamTurn(req, body, m),
        refuse: async (m) => {
          try {
            const r = await agentBackend.chat({ messages: m, prefix, maxTokens, purpose: 'refusal', model, authorization: opts.apiKey ? undefined : authFor(req) });
            return { content: r.content, toolCalls: [], finish: 'stop', promptTokens: r.promptTokens, completionTokens: r.completionTokens };
          } catch (e) {
            entry.refusalError = (e as Error).message;
            return { content: prefix, toolCalls: [], finish: 'stop', promptTokens: 0, completionTokens: 0 };
          }
        },
        maxRounds: opts.maxRounds,
      });
    } catch (e) {
      if (e instanceof BackendError) throw new HttpError(e.status === -1 ? 504 : 502, 'judge_error', `S³ guard failed, request not executed: ${e.message}`);
      throw e;
    }
    for (const { decision: d, changed } of result.decisions) {
      log(JSON.stringify({
        ts: new Date().toISOString(), id, event: 'stage', stage: d.stage, triggered: d.triggered, filtered: d.filtered, picked: d.picked,
        guardAgent: d.guardAgent ? { raw: d.guardAgent.raw, unparseable: d.guardAgent.unparseable } : null,
        runs: d.runs.map((r) => ({ skill: r.skill, risky: r.result.risky, reason: r.result.reason, evidence: r.result.evidence })),
        action: d.action, changed, tokens: d.tokens, ms: Math.round(d.latencyMs),
      }));
    }
    const shown = result.decisions.filter((x) => x.decision.triggered.length > 0);
    const risky = [...new Set(result.decisions.flatMap((x) => x.decision.risky))];
    const headers = {
      'x-safekeep-action': result.action,
      'x-safekeep-stages': shown.map((x) => `${x.decision.stage}=${x.decision.action}`).join(',') || 'none',
      'x-safekeep-risky': risky.join(',') || 'none',
    };
    Object.assign(entry, { action: result.action, stages: headers['x-safekeep-stages'], risky });
    const message: Record<string, unknown> = { role: 'assistant', content: result.content };
    if (result.toolCalls.length) message.tool_calls = result.toolCalls;
    const finish = result.toolCalls.length ? 'tool_calls' : result.finish === 'tool_calls' ? 'stop' : result.finish;
    if (body.stream === true) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...headers });
      res.end(completionToSse(id, model, result.content ?? '', result.toolCalls, finish));
    } else {
      sendJson(res, 200, {
        id, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model,
        choices: [{ index: 0, message, finish_reason: finish }],
        usage: { prompt_tokens: result.usage.promptTokens, completion_tokens: result.usage.completionTokens, total_tokens: result.usage.promptTokens + result.usage.completionTokens },
      }, headers);
    }
    entry.status = 200;
  }

  const server = createServer((req, res) => {
    res.on('error', () => undefined);
    void handle(req, res);
  });
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\r\n{"error":{"message":"malformed HTTP request","type":"invalid_request_error"}}');
    else socket.destroy();
  });
  return server;
}
