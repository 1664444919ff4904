/**
 * A scripted OpenAI-compatible upstream on 127.0.0.1 for the guard tests and bench: every POST body is recorded
 * and answered by `script` (status, JSON, delay, or an SSE stream; either may stall part-way).
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface MockAnswer {
  status?: number;
  json?: unknown;
  /** raw SSE `data:` payloads (each sent as `data: <payload>\n\n`) */
  sse?: string[];
  /** pause between SSE events */
  sseDelayMs?: number;
  delayMs?: number;
  headers?: Record<string, string>;
  /** a JSON answer's body as these bytes exactly (instead of `json`), e.g. a cut-off one */
  raw?: string;
  /** after the SSE events or the `raw` body, send nothing more and never end (until the connection is closed) */
  stall?: boolean;
}

export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown> | null;
  /** set when the connection of this request's answer closed (the answer done, or the client gone) */
  closed?: boolean;
}

export interface MockUpstream {
  url: string;
  requests: RecordedRequest[];
  close(): Promise<void>;
}

export function completion(content: string | null, extra: { toolCalls?: unknown[]; promptTokens?: number; completionTokens?: number } = {}): unknown {
  return {
    id: 'cmpl-mock',
    object: 'chat.completion',
    created: 0,
    model: 'mock',
    choices: [{ index: 0, message: { role: 'assistant', content, ...(extra.toolCalls ? { tool_calls: extra.toolCalls } : {}) }, finish_reason: extra.toolCalls ? 'tool_calls' : 'stop' }],
    usage: { prompt_tokens: extra.promptTokens ?? 10, completion_tokens: extra.completionTokens ?? 2, total_tokens: (extra.promptTokens ?? 10) + (extra.completionTokens ?? 2) },
  };
}

export async function startMockUpstream(script: (body: Record<string, unknown> | null, req: RecordedRequest) => MockAnswer | Promise<MockAnswer>): Promise<MockUpstream> {
  const requests: RecordedRequest[] = [];
  const sockets = new Set<import('node:net').Socket>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let body: Record<string, unknown> | null = null;
      try { body = text ? (JSON.parse(text) as Record<string, unknown>) : null; } catch { body = null; }
      const rec: RecordedRequest = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body };
      requests.push(rec);
      res.on('close', () => { rec.closed = true; });
      const a = await script(body, rec);
      if (a.delayMs) await new Promise((r) => setTimeout(r, a.delayMs));
      if (res.destroyed) return;
      if (a.sse) {
        res.writeHead(a.status ?? 200, { 'content-type': 'text/event-stream', ...a.headers });
        for (const d of a.sse) {
          if (res.destroyed) return;
          res.write(`data: ${d}\n\n`);
          if (a.sseDelayMs) await new Promise((r) => setTimeout(r, a.sseDelayMs));
        }
        if (!a.stall) res.end();
        return;
      }
      res.writeHead(a.status ?? 200, { 'content-type': 'application/json', ...a.headers });
      const out = a.raw ?? JSON.stringify(a.json ?? {});
      if (a.stall) res.write(out);
      else res.end(out);
    });
  });
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise<void>((r) => { for (const s of sockets) s.destroy(); server.close(() => r()); }),
  };
}
