/**
 * `safekeep serve --model DIR`: an OpenAI-compatible chat-completions server (node:http) whose agent is the local
 * engine, guarded by `guardedRespond` — base, safekeep (judge with the same model), refusal-probe (the probe reads
 * the agent call's own prefill: no extra model call) or safekeep+probe.
 *
 * - `POST …/chat/completions` with tools: guarded; without tools: the plain agent call (nothing to judge, as the
 *   proxy passes such requests through). The reply is a `chat.completion`; calls the model wrote in its native
 *   syntax are also returned as `tool_calls` (the content keeps the raw text). `stream: true` gets the finished
 *   content as SSE chunks ending in `data: [DONE]`.
 * - `GET …/models` lists the one model. Anything else → 404 JSON.
 * - Headers: `x-safekeep-action: forward|refuse`, `x-safekeep-verdict` (judge, when one ran), `x-safekeep-probe-score`
 *   (when the probe ran). One JSON log line per request (method, verdict, probe score, latencies).
 * - Errors are JSON: malformed body → 400, too large → 413, a failure inside the model → 500. Requests run one at a
 *   time (the engine is not re-entrant; LocalBackend queues them).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { parseToolCalls } from '../outcome/parse-calls.ts';
import { isSafekeepError } from '../util/errors.ts';
import { completionToSse, parseChatBody } from './proxy.ts';
import { guardedRespond, type GuardOptions } from './respond.ts';
import type { ChatBackend, GuardMethod } from './types.ts';

export interface LocalServerOptions extends GuardOptions {
  backend: ChatBackend;
  method: GuardMethod;
  /** the model id reported to clients */
  modelName: string;
  /** default agent answer budget when the client gives none (default 256) */
  defaultMaxTokens?: number;
  log?: (line: string) => void;
  /** default 16 MiB */
  maxBodyBytes?: number;
}

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= limit) chunks.push(c);
    });
    req.on('end', () => resolve(size > limit ? null : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

export function createLocalServer(o: LocalServerOptions): Server {
  const log = o.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const maxBody = o.maxBodyBytes ?? 16 * 1024 * 1024;
  let counter = 0;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const t0 = performance.now();
    const id = `sk-${Date.now().toString(36)}-${(++counter).toString(36)}`;
    const entry: Record<string, unknown> = { ts: new Date().toISOString(), id, path: req.url, method: req.method };
    const path = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '');
    try {
      if (req.method === 'GET' && /(^|\/)models$/.test(path)) {
        entry.status = 200;
        send(res, 200, { object: 'list', data: [{ id: o.modelName, object: 'model', owned_by: 'safekeep' }] });
        return;
      }
      if (req.method !== 'POST' || !/\/chat\/completions$/.test(path)) {
        entry.status = 404;
        send(res, 404, { error: { message: `no route ${req.method} ${req.url}`, type: 'invalid_request_error' } });
        return;
      }
      const raw = await readBody(req, maxBody);
      if (raw === null) {
        entry.status = 413;
        send(res, 413, { error: { message: `request body exceeds ${maxBody} bytes`, type: 'invalid_request_error' } });
        return;
      }
      let parsed: ReturnType<typeof parseChatBody>;
      try {
        parsed = parseChatBody(raw);
      } catch (e) {
        const err = e as Error & { status?: number };
        entry.status = err.status ?? 400;
        send(res, err.status ?? 400, { error: { message: err.message, type: 'invalid_request_error' } });
        return;
      }
      const { body, messages, tools } = parsed;
      const maxTokens = Number(body.max_completion_tokens ?? body.max_tokens ?? o.defaultMaxTokens ?? 256) || 256;
      const method: GuardMethod = tools.length ? o.method : 'base';
      const r = await guardedRespond({ messages, tools }, method, o.backend, { ...o, maxTokens });
      const action = r.blocked ? 'refuse' : 'forward';
      const headers: Record<string, string> = { 'x-safekeep-action': action, 'x-safekeep-method': method };
      if (r.judge) headers['x-safekeep-verdict'] = r.judge.verdict;
      if (r.probe) headers['x-safekeep-probe-score'] = r.probe.score.toFixed(6);
      Object.assign(entry, {
        guard: method, tools: tools.length, action, verdict: r.judge?.verdict ?? null, judgeMs: r.judge ? Math.round(r.judge.latencyMs) : null,
        probeScore: r.probe?.score ?? null, probeUnsafe: r.probe?.unsafe ?? null, probeMs: r.probe?.latencyMs ?? null,
      });
      const content = r.reply.content;
      const calls = r.blocked || tools.length === 0 ? [] : parseToolCalls(content, o.backend.callFormat).calls;
      const toolCalls = calls.map((c, i) => ({ id: `call_${i}`, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments) } }));
      entry.status = 200;
      if (body.stream === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...headers });
        res.end(completionToSse(id, o.modelName, content));
        return;
      }
      send(res, 200, {
        id, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model: o.modelName,
        choices: [{ index: 0, message: { role: 'assistant', content, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) }, finish_reason: toolCalls.length ? 'tool_calls' : 'stop' }],
        usage: { prompt_tokens: r.reply.promptTokens, completion_tokens: r.reply.completionTokens, total_tokens: r.reply.promptTokens + r.reply.completionTokens },
      }, headers);
    } catch (e) {
      entry.status = 500;
      entry.error = (e as Error).message;
      if (!res.headersSent) send(res, isSafekeepError(e) ? 400 : 500, { error: { message: `safekeep serve: ${(e as Error).message}`, type: isSafekeepError(e) ? 'invalid_request_error' : 'internal_error' } });
      else res.end();
    } finally {
      entry.ms = Math.round(performance.now() - t0);
      log(JSON.stringify(entry));
    }
  }

  const server = createServer((req, res) => {
    res.on('error', () => undefined);
    void handle(req, res);
  });
  return server;
}
