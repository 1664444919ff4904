/**
 * The one upstream client of the servers and the endpoint backend: fetch with a deadline (joined to the caller's
 * own signal), no redirects followed (a 3xx is an error that says so: following one would send the key and the body
 * to wherever the upstream points), bounded reads of the answer, and errors that never carry a secret — URLs are
 * printed without `user:password@` or query, and an upstream's 5xx body (tracebacks, keys, internal addresses) is
 * never put in a message; of a 4xx only the upstream's own `error.message`, cut short, is kept.
 */
import { parseJsonBounded } from '../util/json-bounded.ts';

export type UpstreamFailure = 'timeout' | 'network' | 'redirect' | 'cancelled' | 'too_large' | 'bad_answer';

export class UpstreamError extends Error {
  constructor(readonly kind: UpstreamFailure, message: string, readonly upstreamStatus?: number) {
    super(message);
    this.name = 'UpstreamError';
  }
}

/** `scheme://host[:port]/path` — no credentials, no query, no fragment. */
export function redactUrl(u: string): string {
  try {
    const x = new URL(u);
    return `${x.protocol}//${x.host}${x.pathname}`;
  } catch {
    return '(invalid URL)';
  }
}

/** The URL carries `user:password@` (or just a user name). */
export function hasCredentials(u: string): boolean {
  try {
    const x = new URL(u);
    return x.username !== '' || x.password !== '';
  } catch {
    return false;
  }
}

export interface UpstreamCall {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  /** until the answer's headers arrive (a buffered read has its own, `readUpstreamText`) */
  timeoutMs: number;
  /**
   * the caller's own cancellation (a client that left), or its deadline: a signal aborted with a `TimeoutError`
   * (`AbortSignal.timeout`, the server's request deadline) is reported as a timeout
   */
  signal?: AbortSignal;
}

/** The signal was aborted by a deadline (a `TimeoutError` reason), not by a client that left. */
export function abortedByDeadline(signal: AbortSignal | undefined): boolean {
  return !!signal?.aborted && (signal.reason as { name?: unknown } | undefined)?.name === 'TimeoutError';
}

/** The answer's headers (status any), or an UpstreamError for a timeout, a network failure or a redirect. */
export async function upstreamFetch(c: UpstreamCall): Promise<Response> {
  // the deadline is for the answer's headers: a streamed answer may then take as long as the model writes
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(), c.timeoutMs);
  const signal = c.signal ? AbortSignal.any([deadline.signal, c.signal]) : deadline.signal;
  const where = redactUrl(c.url);
  let res: Response;
  try {
    res = await fetch(c.url, { method: c.method ?? 'POST', headers: c.headers, body: c.body, signal, redirect: 'manual' });
  } catch (e) {
    if (abortedByDeadline(c.signal)) throw new UpstreamError('timeout', `${where}: no response before the deadline`);
    if (c.signal?.aborted) throw new UpstreamError('cancelled', `${where}: cancelled (the client left)`);
    if (deadline.signal.aborted) throw new UpstreamError('timeout', `${where}: no response within ${c.timeoutMs} ms`);
    const err = e as Error & { cause?: Error & { code?: string } };
    // the cause names the failure (ECONNREFUSED, ENOTFOUND …); its message may repeat the address, never a secret
    const why = err.cause?.code ?? err.cause?.message ?? err.message;
    throw new UpstreamError('network', `${where} unreachable: ${String(why).slice(0, 200)}`);
  } finally {
    clearTimeout(timer);
  }
  if (res.status >= 300 && res.status < 400) {
    void res.body?.cancel().catch(() => undefined);
    const loc = res.headers.get('location');
    throw new UpstreamError('redirect', `${where} answered HTTP ${res.status} (a redirect${loc ? ` to ${redactUrl(new URL(loc, c.url).href)}` : ''}); redirects are not followed — point the URL at the endpoint itself`, res.status);
  }
  return res;
}

/**
 * The next chunk of an answer's body (null at its end), waiting at most `idleMs` for it and no longer than `signal`
 * allows (the request's deadline, a client that left). On any failure the read is cancelled — the upstream
 * connection is let go — and an UpstreamError says why: `timeout` (idle, or the deadline), `cancelled`, `network`.
 */
export async function readChunk(reader: ReadableStreamDefaultReader<Uint8Array>, idleMs: number, url: string, signal?: AbortSignal): Promise<Uint8Array | null> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const stopped = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new UpstreamError('timeout', `${redactUrl(url)}: no data for ${idleMs} ms in the middle of the answer`)), idleMs);
    onAbort = () => reject(abortedByDeadline(signal)
      ? new UpstreamError('timeout', `${redactUrl(url)}: the answer did not finish within the request's deadline`)
      : new UpstreamError('cancelled', `${redactUrl(url)}: cancelled (the client left)`));
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
  try {
    const r = await Promise.race([reader.read(), stopped]);
    return r.done ? null : r.value;
  } catch (e) {
    void reader.cancel().catch(() => undefined);
    if (e instanceof UpstreamError) throw e;
    throw new UpstreamError('network', `${redactUrl(url)}: the answer was cut off`);
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * The answer's body as text, at most `maxBytes`, within `timeoutMs` in all and no longer than `signal` allows (an
 * UpstreamError beyond).
 */
export async function readUpstreamText(res: Response, maxBytes: number, url: string, timeoutMs = 60_000, signal?: AbortSignal): Promise<string> {
  if (!res.body) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let late = false;
  const timer = setTimeout(() => { late = true; void reader.cancel().catch(() => undefined); }, timeoutMs);
  try {
    for (;;) {
      // the whole read's limit is the timer above (a cancelled read ends the loop); the signal ends it sooner
      const value = await readChunk(reader, timeoutMs + 1000, url, signal);
      if (value === null) break;
      size += value.byteLength;
      if (size > maxBytes) {
        await reader.cancel().catch(() => undefined);
        throw new UpstreamError('too_large', `${redactUrl(url)}: answer larger than ${maxBytes} bytes`, res.status);
      }
      chunks.push(value);
    }
  } catch (e) {
    if (e instanceof UpstreamError) throw new UpstreamError(e.kind, e.message, res.status);
    throw new UpstreamError('network', `${redactUrl(url)}: the answer was cut off`, res.status);
  } finally {
    clearTimeout(timer);
  }
  if (late) throw new UpstreamError('timeout', `${redactUrl(url)}: the answer did not arrive within ${timeoutMs} ms`, res.status);
  return Buffer.concat(chunks).toString('utf8');
}

/** A buffered JSON answer, depth-capped. */
export async function readUpstreamJson(res: Response, maxBytes: number, url: string, timeoutMs?: number, signal?: AbortSignal): Promise<unknown> {
  const text = await readUpstreamText(res, maxBytes, url, timeoutMs, signal);
  try {
    return parseJsonBounded(text, `${redactUrl(url)}: answer`);
  } catch (e) {
    throw new UpstreamError('bad_answer', (e as Error).message, res.status);
  }
}

/**
 * What of a failed answer may be shown: for a 4xx the upstream's `error.message` (or `message`/`detail`), cut to
 * 300 characters; for anything else nothing.
 */
export function failureDetail(status: number, text: string): string {
  if (status < 400 || status >= 500) return '';
  let j: unknown;
  try {
    j = JSON.parse(text.slice(0, 100_000));
  } catch {
    return '';
  }
  const o = j as { error?: { message?: unknown } | string; message?: unknown; detail?: unknown };
  const m = typeof o?.error === 'object' ? o.error?.message : typeof o?.error === 'string' ? o.error : o?.message ?? o?.detail;
  return typeof m === 'string' ? m.slice(0, 300) : '';
}

/** `text` with every occurrence of the given secrets (keys, tokens) replaced by `***` (an upstream that echoes a key). */
export function redactSecrets(text: string, secrets: readonly (string | undefined)[]): string {
  let out = text;
  for (const k of secrets) if (k && k.length >= 4) out = out.split(k).join('***');
  return out;
}

export const MAX_UPSTREAM_ANSWER = 64 * 1024 * 1024;
