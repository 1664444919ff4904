/**
 * The one HTTP core of `safekeep serve` (the SafeKeep proxy, the S³ proxy, the local engine): every request goes
 * access policy → canonical path → allow-listed route and method → the route's handler, and every failure is one
 * JSON error. Anything not in the route table is 404; a listed path with another method is 405 with `Allow`.
 *
 * Bounds (a slow or hostile client holds nothing for long): the request's headers must arrive within
 * `headersTimeoutMs`, the whole request (headers and body) within `requestTimeoutMs` (checked every second), an idle
 * keep-alive connection is closed after `idleTimeoutMs`, at most `maxConnections` sockets are open at once (more
 * are dropped on accept), bodies are capped at `maxBodyBytes`. A handler gets an AbortSignal that fires when the
 * client goes away before its answer is complete, so upstream calls and generation stop with it.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { isSafekeepError } from '../util/errors.ts';
import { readBody } from './body.ts';
import { HttpError, capMessage, sendError } from './errors.ts';
import { apiPath, canonicalPath } from './path.ts';
import { checkAccess, checkJsonContentType, type AccessPolicy } from './policy.ts';

export interface ServerLimits {
  /** default 16 MiB */
  maxBodyBytes?: number;
  /** default 10 s */
  headersTimeoutMs?: number;
  /** headers + body, default 60 s */
  requestTimeoutMs?: number;
  /** keep-alive idle, default 5 s */
  idleTimeoutMs?: number;
  /** open sockets at once, default 256 */
  maxConnections?: number;
}

/** One request as a handler sees it. */
export interface Exchange {
  id: string;
  req: IncomingMessage;
  res: ServerResponse;
  /** the canonical path without `/v1`, e.g. `chat/completions` */
  route: string;
  /** fields of this request's log line (the handler adds its own) */
  entry: Record<string, unknown>;
  /** aborted when the client leaves before the answer is complete */
  signal: AbortSignal;
  /** the body, size-capped; a POST route's body is checked to be declared JSON first */
  body(): Promise<Buffer>;
}

export interface Route {
  methods: readonly string[];
  handle(x: Exchange): Promise<void>;
}

export interface HttpServerOptions {
  /** canonical path without `/v1` → route */
  routes: Readonly<Record<string, Route>>;
  policy?: AccessPolicy;
  limits?: ServerLimits;
  /** one JSON line per request (default: stderr) */
  log?: (line: string) => void;
}

export const DEFAULT_LIMITS: Required<ServerLimits> = {
  maxBodyBytes: 16 * 1024 * 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  idleTimeoutMs: 5_000,
  maxConnections: 256,
};

/** What the client is told about an error the handler did not classify: nothing internal beyond one line. */
function asHttpError(e: unknown, id: string): HttpError {
  if (e instanceof HttpError) return e;
  if (isSafekeepError(e)) return new HttpError(400, 'invalid_request_error', e.message);
  return new HttpError(500, 'internal_error', `internal error (request ${id}); the server log has the details`);
}

function rawError(socket: Duplex, status: number, reason: string, message: string): void {
  // a kept-alive socket that already answered is idle, not slow: an unsolicited 408 on it would be read by the
  // client's next request (node's own handler also answers only sockets that never wrote)
  if (!socket.writable || (socket as Duplex & { bytesWritten?: number }).bytesWritten) { socket.destroy(); return; }
  const body = JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: status } });
  // end() alone half-closes: a client that keeps sending would keep the socket (and its slot) forever
  socket.end(`HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`, () => socket.destroy());
  setTimeout(() => socket.destroy(), 1000).unref();
}

export function createHttpServer(o: HttpServerOptions): Server {
  const limits = { ...DEFAULT_LIMITS, ...o.limits };
  const log = o.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const policy = o.policy ?? {};
  let counter = 0;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const t0 = performance.now();
    const id = `sk-${Date.now().toString(36)}-${(++counter).toString(36)}`;
    const path = canonicalPath(req.url ?? '');
    const entry: Record<string, unknown> = { ts: new Date().toISOString(), id, method: req.method, path: path ?? capMessage(String(req.url), 200) };
    const ac = new AbortController();
    res.on('close', () => { if (!res.writableFinished) ac.abort(); });
    try {
      const cors = checkAccess(req, policy);
      for (const [k, v] of Object.entries(cors)) res.setHeader(k, v);
      if (path === null) throw new HttpError(400, 'invalid_request_error', 'malformed request path (a bad percent-escape or a control character)');
      const name = apiPath(path);
      const route = Object.hasOwn(o.routes, name) ? o.routes[name] : undefined;
      if (!route) throw new HttpError(404, 'not_found_error', `no route ${String(req.method).slice(0, 16)} ${capMessage(path, 200)}`);
      if (req.method === 'OPTIONS' && Object.keys(cors).length > 0) {
        res.writeHead(204, { allow: [...route.methods, 'OPTIONS'].join(', ') });
        res.end();
        entry.status = 204;
        return;
      }
      if (!route.methods.includes(req.method ?? '')) {
        throw new HttpError(405, 'invalid_request_error', `method ${String(req.method).slice(0, 16)} not allowed on ${path}`, {}, { allow: route.methods.join(', ') });
      }
      entry.route = name;
      const x: Exchange = {
        id, req, res, route: name, entry, signal: ac.signal,
        body: () => {
          checkJsonContentType(req);
          return readBody(req, limits.maxBodyBytes);
        },
      };
      await route.handle(x);
      entry.status ??= res.statusCode;
    } catch (e) {
      const err = asHttpError(e, id);
      entry.status = err.status;
      entry.action ??= 'error';
      entry.error = capMessage(err.message, 300);
      if (!(e instanceof HttpError) && !isSafekeepError(e)) entry.internal = capMessage(String((e as Error)?.message ?? e), 300);
      if (res.headersSent) res.end();
      else sendError(res, err, { 'x-safekeep-action': 'error' });
    } finally {
      entry.ms = Math.round(performance.now() - t0);
      log(JSON.stringify(entry));
    }
  }

  const server = createServer({
    headersTimeout: Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs),
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.idleTimeoutMs,
    connectionsCheckingInterval: Math.min(1000, limits.headersTimeoutMs),
  }, (req, res) => {
    res.on('error', () => undefined);
    void handle(req, res);
  });
  server.maxConnections = limits.maxConnections;
  // a socket that never sends a full request line is timed out by headersTimeout; one that opens and sends nothing at
  // all too (node starts the headers clock at connect)
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') rawError(socket, 408, 'Request Timeout', 'the request did not arrive in time');
    else if (err.code === 'HPE_HEADER_OVERFLOW') rawError(socket, 431, 'Request Header Fields Too Large', 'request headers too large');
    else if (err.code === 'ECONNRESET' || err.code === 'EPIPE') socket.destroy();
    else rawError(socket, 400, 'Bad Request', 'malformed HTTP request');
  });
  return server;
}

