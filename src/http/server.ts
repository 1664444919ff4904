/**
 * The one HTTP core of `safekeep serve` (the SafeKeep proxy, the S³ proxy, the local engine): every request goes
 * access policy → canonical path → allow-listed route and method → the route's handler, and every failure is one
 * JSON error. Anything not in the route table is 404; a listed path with another method is 405 with `Allow`.
 *
 * Bounds (a slow or hostile client holds nothing for long): the request's headers must arrive within
 * `headersTimeoutMs`, the whole request (headers and body) within `requestTimeoutMs` (checked every second), an idle
 * keep-alive connection is closed after `idleTimeoutMs`, bodies are capped at `maxBodyBytes`. A handler gets an
 * AbortSignal that fires when the client goes away before its answer is complete, so upstream calls and generation
 * stop with it; with `deadlineMs` it also fires (reason: a `TimeoutError`) when the answer is not complete by then —
 * the deadline is for the whole answer, a stream's last byte included. A handler that does not stop within a second
 * of it is answered for: 504 when nothing was sent yet, else the connection is closed mid-answer (a begun answer is
 * ended by its handler, which can say why: the proxy's stream ends with an SSE error event).
 *
 * Over the cap (`maxConnections` sockets served at once) the longest-idle keep-alive connection is closed to make
 * room; when none is idle, the new connection's request is answered 503 with `Retry-After` and the connection closed
 * — a client is never just reset (a reset leaves a pooled client holding sockets it thinks are fine). Past twice the
 * cap, connections are dropped on accept (a flood).
 *
 * An answer that closes the connection while the request body is still arriving (a 413, a 503) is written whole,
 * then the rest of the body is read and discarded — at most `DRAIN_MAX_BYTES`, within `requestTimeoutMs` — and only
 * then is the connection closed: closing on unread data resets it, and a client still writing (Node's fetch) gets
 * EPIPE instead of the answer.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { isSafekeepError } from '../util/errors.ts';
import { readBody } from './body.ts';
import { HttpError, capMessage, errorBody, sendError } from './errors.ts';
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
  /** connections served at once, default 256 (over it: an idle one is closed, else 503) */
  maxConnections?: number;
  /**
   * from a request's arrival until its answer is complete — every upstream call and retry, and a streamed answer's
   * piping, included; past it the handler's signal fires and the client gets a 504 (or, once the answer has begun,
   * the end its handler writes). Default none (the handler keeps its own).
   */
  deadlineMs?: number;
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
  /**
   * aborted when the client leaves before the answer is complete, or (reason: a `TimeoutError` DOMException) when the
   * server's deadline passes before the answer is complete (begun or not: `res.headersSent` tells)
   */
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

export const DEFAULT_LIMITS: Required<Omit<ServerLimits, 'deadlineMs'>> = {
  maxBodyBytes: 16 * 1024 * 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  idleTimeoutMs: 5_000,
  maxConnections: 256,
};

/** the most of a refused body read before its connection is closed (beyond: closed on unread data, a reset) */
export const DRAIN_MAX_BYTES = 64 * 1024 * 1024;
/** how long a handler may take to stop after the deadline before the server answers for it */
const DEADLINE_GRACE_MS = 1000;
/** what a client refused at the connection cap is told to wait, in seconds */
const RETRY_AFTER_S = 1;

/** The deadline's abort reason: a TimeoutError, which the upstream client reports as a timeout, not a cancellation. */
const deadlineReason = (ms: number) => new DOMException(`the request's deadline (${ms} ms) passed`, 'TimeoutError');

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

/**
 * The error answer, then the connection closed — after the rest of the request body has been read (to a bound), so
 * that a client still sending it reads the answer instead of a reset.
 */
function answerThenClose(req: IncomingMessage, res: ServerResponse, err: HttpError, headers: Record<string, string>, drainMs: number): void {
  const text = JSON.stringify(errorBody(err));
  res.writeHead(err.status, { ...headers, ...err.headers, connection: 'close', 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  if (req.complete) {
    res.end(text);
    return;
  }
  // the answer goes out now (its length is declared, so the client has it whole); ending the response closes the
  // socket, which waits until nothing more of the request is coming
  res.write(text);
  let read = 0;
  let ended = false;
  const done = () => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    req.off('data', count);
    res.end();
  };
  const count = (c: Buffer) => { read += c.length; if (read > DRAIN_MAX_BYTES) done(); };
  const timer = setTimeout(done, drainMs);
  req.on('data', count);
  req.once('end', done);
  req.once('close', done);
  req.once('error', done);
  req.resume();
}

interface Conn {
  /** requests of this connection whose answer is not complete */
  inFlight: number;
  /** it has answered a request (a kept-alive connection, not one whose first request is still arriving) */
  served: boolean;
  idleSince: number;
  /** bytes read when it went idle: more since then means a new request is arriving */
  bytesAtIdle: number;
}

/** The connections being served (at most `limits.maxConnections`), each with its requests in flight. */
class ConnectionTable {
  private readonly conns = new Map<Socket, Conn>();
  constructor(private readonly max: number) {}

  get size(): number { return this.conns.size; }
  get(s: Socket): Conn | undefined { return this.conns.get(s); }

  admit(s: Socket): Conn {
    const c: Conn = { inFlight: 0, served: false, idleSince: 0, bytesAtIdle: 0 };
    this.conns.set(s, c);
    s.once('close', () => this.conns.delete(s));
    return c;
  }

  /** Close the longest-idle kept-alive connection to make room; false when none is idle. */
  closeIdle(): boolean {
    let oldest: [Socket, Conn] | undefined;
    for (const e of this.conns) {
      const [s, c] = e;
      if (c.served && c.inFlight === 0 && s.bytesRead === c.bytesAtIdle && (!oldest || c.idleSince < oldest[1].idleSince)) oldest = e;
    }
    if (!oldest) return false;
    this.conns.delete(oldest[0]);
    oldest[0].destroy();
    return true;
  }

  /** The request's connection, admitted now if there is room (one refused at accept may be let in later); undefined = over the cap. */
  forRequest(socket: Socket): Conn | undefined {
    return this.conns.get(socket) ?? (this.conns.size < this.max || this.closeIdle() ? this.admit(socket) : undefined);
  }
}

/**
 * The route for this request — access policy first (CORS headers set), then the canonical path, the route table and
 * the method: deny by default. null when the request was a CORS preflight, already answered.
 */
function resolveRoute(req: IncomingMessage, res: ServerResponse, path: string | null, routes: Readonly<Record<string, Route>>, policy: AccessPolicy, entry: Record<string, unknown>): { name: string; route: Route } | null {
  const cors = checkAccess(req, policy);
  for (const [k, v] of Object.entries(cors)) res.setHeader(k, v);
  if (path === null) throw new HttpError(400, 'invalid_request_error', 'malformed request path (a bad percent-escape or a control character)');
  const name = apiPath(path);
  const route = Object.hasOwn(routes, name) ? routes[name] : undefined;
  if (!route) throw new HttpError(404, 'not_found_error', `no route ${String(req.method).slice(0, 16)} ${capMessage(path, 200)}`);
  if (req.method === 'OPTIONS' && Object.keys(cors).length > 0) {
    res.writeHead(204, { allow: [...route.methods, 'OPTIONS'].join(', ') });
    res.end();
    entry.status = 204;
    return null;
  }
  if (!route.methods.includes(req.method ?? '')) {
    throw new HttpError(405, 'invalid_request_error', `method ${String(req.method).slice(0, 16)} not allowed on ${path}`, {}, { allow: route.methods.join(', ') });
  }
  return { name, route };
}

/**
 * One request's deadline, for the whole answer: past it the handler's signal is aborted and, after a grace period for
 * it to stop, the request fails with 504 — or, when the answer has begun (a stream), its connection is closed.
 */
class Deadline {
  passed = false;
  private timer: NodeJS.Timeout | undefined;
  constructor(readonly ms: number | undefined) {}

  timedOut(): HttpError {
    return new HttpError(504, 'timeout', `the request did not finish within its deadline of ${this.ms} ms; nothing further was done`);
  }

  async race(handled: Promise<void>, res: ServerResponse, ac: AbortController): Promise<void> {
    const ms = this.ms;
    if (ms === undefined) return handled;
    // a handler that has lost the race below may still fail later: nobody is waiting for it then
    handled.catch(() => undefined);
    await Promise.race([handled, new Promise<never>((_, reject) => {
      this.timer = setTimeout(() => {
        if (res.writableEnded) return;
        this.passed = true;
        ac.abort(deadlineReason(ms));
        this.timer = setTimeout(() => reject(this.timedOut()), DEADLINE_GRACE_MS);
      }, ms);
    })]);
  }

  clear(): void { clearTimeout(this.timer); }
}

/** A failed request's answer: its JSON error (or the end of a begun answer), and the log fields that say why. */
function answerFailure(e: unknown, req: IncomingMessage, res: ServerResponse, id: string, entry: Record<string, unknown>, deadline: Deadline, requestTimeoutMs: number): void {
  let err = asHttpError(e, id);
  // whatever the abort made the handler throw (a cancelled call, a cut-off answer), the client is told the cause
  if (deadline.passed && err.status !== 504) err = deadline.timedOut();
  entry.status = err.status;
  entry.action ??= 'error';
  entry.error = capMessage(err.message, 300);
  if (!(e instanceof HttpError) && !isSafekeepError(e)) entry.internal = capMessage(String((e as Error)?.message ?? e), 300);
  // a begun answer its handler did not end within the grace period: cut, so that it is not taken for a whole one
  if (res.headersSent) { if (deadline.passed && !res.writableEnded) res.destroy(); else res.end(); }
  else if (err.headers.connection === 'close') answerThenClose(req, res, err, { 'x-safekeep-action': 'error' }, requestTimeoutMs);
  else sendError(res, err, { 'x-safekeep-action': 'error' });
}

export function createHttpServer(o: HttpServerOptions): Server {
  const limits = { ...DEFAULT_LIMITS, ...o.limits };
  const log = o.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const policy = o.policy ?? {};
  let counter = 0;
  const conns = new ConnectionTable(limits.maxConnections);

  async function handle(req: IncomingMessage, res: ServerResponse, overCap: boolean): Promise<void> {
    const t0 = performance.now();
    const id = `sk-${Date.now().toString(36)}-${(++counter).toString(36)}`;
    const path = canonicalPath(req.url ?? '');
    const entry: Record<string, unknown> = { ts: new Date().toISOString(), id, method: req.method, path: path ?? capMessage(String(req.url), 200) };
    const ac = new AbortController();
    res.on('close', () => { if (!res.writableFinished) ac.abort(); });
    const deadline = new Deadline(limits.deadlineMs);
    try {
      if (overCap) {
        throw new HttpError(503, 'server_overloaded', `server busy: all ${limits.maxConnections} connections are in use; retry after ${RETRY_AFTER_S} s`, {}, { 'retry-after': String(RETRY_AFTER_S), connection: 'close' });
      }
      const found = resolveRoute(req, res, path, o.routes, policy, entry);
      if (!found) return;
      entry.route = found.name;
      const x: Exchange = {
        id, req, res, route: found.name, entry, signal: ac.signal,
        body: () => {
          checkJsonContentType(req);
          return readBody(req, limits.maxBodyBytes);
        },
      };
      await deadline.race(found.route.handle(x), res, ac);
      entry.status ??= res.statusCode;
    } catch (e) {
      answerFailure(e, req, res, id, entry, deadline, limits.requestTimeoutMs);
    } finally {
      deadline.clear();
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
    const socket = req.socket;
    const c = conns.forRequest(socket);
    if (c) {
      c.inFlight++;
      res.once('close', () => {
        c.inFlight--;
        c.served = true;
        c.idleSince = performance.now();
        c.bytesAtIdle = socket.bytesRead;
      });
    }
    void handle(req, res, c === undefined);
  });
  // room for the cap's worth of connections that are only told 503; beyond that a flood is dropped on accept
  server.maxConnections = 2 * limits.maxConnections;
  server.on('connection', (socket: Socket) => {
    if (conns.size >= limits.maxConnections) conns.closeIdle();
    if (conns.size < limits.maxConnections) conns.admit(socket);
  });
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

