/**
 * Who may talk to a server, checked before any route runs:
 *
 * - Client key (`--client-key-env VAR`): every request carries `Authorization: Bearer <key>`, compared in constant
 *   time (both sides hashed to 32 bytes first, so neither the content nor the length leaks through timing — as
 *   vLLM's `--api-key` does with `secrets.compare_digest`). Without one, 401 with `WWW-Authenticate: Bearer`.
 * - Origin: a browser sends `Origin` on every cross-origin request, "simple" ones included (a `text/plain` POST
 *   needs no preflight). A request with an `Origin` not named by `--cors` is refused (403); a named one gets the
 *   CORS headers, and its preflight (`OPTIONS`) is answered.
 * - Host (DNS rebinding): while the server listens on a loopback address, a page on `evil.example` that rebinds its
 *   name to 127.0.0.1 still sends `Host: evil.example`; only loopback names (`localhost`, `127.x.x.x`, `[::1]`) and
 *   the names given in `allowedHosts` are served.
 * - Content type: a POST body must be `application/json` (415 otherwise), which also keeps browsers' simple
 *   requests out.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { HttpError } from './errors.ts';

export interface AccessPolicy {
  /** the key clients must present as a bearer token; none = no client authentication */
  clientKey?: string;
  /** origins allowed to call from a browser (exact `scheme://host[:port]`); none = every cross-origin request refused */
  corsOrigins?: readonly string[];
  /** Host names served besides the loopback names, while bound to loopback */
  allowedHosts?: readonly string[];
}

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

/** Constant-time equality of two secrets (of any lengths). */
export function secretEquals(a: string, b: string): boolean {
  return timingSafeEqual(digest(a), digest(b));
}

/** The bearer token of an Authorization header value (case-insensitive scheme), or null. */
export function bearerToken(header: string | undefined): string | null {
  if (typeof header !== 'string') return null;
  const m = /^bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return m ? m[1]! : null;
}

export function isLoopbackAddress(a: string | undefined): boolean {
  if (!a) return false;
  const v4 = a.startsWith('::ffff:') ? a.slice(7) : a;
  return v4 === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4);
}

/** A listen address that keeps the server on this machine. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || isLoopbackAddress(host.replace(/^\[|\]$/g, ''));
}

/** The host name of a Host header (port and IPv6 brackets handled), lower-cased. */
export function hostName(header: string): string {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(0, h.indexOf(']') + 1);
  const colon = h.lastIndexOf(':');
  return colon >= 0 ? h.slice(0, colon) : h;
}

function hostAllowed(header: string | undefined, p: AccessPolicy): boolean {
  if (typeof header !== 'string' || header === '') return false;
  const name = hostName(header);
  if (name === 'localhost' || name.endsWith('.localhost') || name === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(name)) return true;
  return (p.allowedHosts ?? []).some((h) => h.toLowerCase() === name);
}

/** CORS response headers for an allowed origin. */
export function corsHeaders(origin: string): Record<string, string> {
  return {
    'access-control-allow-origin': origin,
    'access-control-allow-headers': 'authorization, content-type',
    'access-control-allow-methods': 'GET, POST, OPTIONS',
    'access-control-expose-headers': 'x-safekeep-action, x-safekeep-verdict, x-safekeep-stages, x-safekeep-risky, x-safekeep-method, x-safekeep-probe-score',
    'access-control-max-age': '600',
    vary: 'Origin',
  };
}

/**
 * Host, then Origin, then the client key. Returns the CORS headers to add to the answer ({} for a non-browser
 * request); throws the refusal.
 */
export function checkAccess(req: IncomingMessage, p: AccessPolicy): Record<string, string> {
  if (isLoopbackAddress(req.socket.localAddress) && !hostAllowed(req.headers.host, p)) {
    throw new HttpError(403, 'forbidden', `Host '${String(req.headers.host ?? '').slice(0, 100)}' is not served here (this server listens on loopback; DNS-rebinding protection)`);
  }
  let cors: Record<string, string> = {};
  const origin = req.headers.origin;
  if (origin !== undefined) {
    if (!(p.corsOrigins ?? []).includes(origin)) {
      throw new HttpError(403, 'forbidden', `cross-origin request from '${origin.slice(0, 100)}' refused (start the server with --cors ${origin.slice(0, 100)} to allow it)`);
    }
    cors = corsHeaders(origin);
  }
  // a preflight carries no credentials; it only learns which headers a later request may send
  if (p.clientKey !== undefined && req.method !== 'OPTIONS') {
    const token = bearerToken(req.headers.authorization);
    if (token === null || !secretEquals(token, p.clientKey)) {
      throw new HttpError(401, 'authentication_error', token === null ? 'missing client key: send Authorization: Bearer <key>' : 'invalid client key', {}, { ...cors, 'www-authenticate': 'Bearer' });
    }
  }
  return cors;
}

/** A POST body must be JSON (`application/json`, parameters such as charset allowed). */
export function checkJsonContentType(req: IncomingMessage): void {
  const ct = String(req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (ct !== 'application/json') {
    throw new HttpError(415, 'invalid_request_error', `content-type must be application/json, got '${ct.slice(0, 100) || 'none'}'`);
  }
}
