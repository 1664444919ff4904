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
 *   name to 127.0.0.1 still sends `Host: evil.example`; only loopback names and the names given in `allowedHosts`
 *   are served. The header is parsed strictly, whole (`hostParts`): a name (DNS labels) or a bracketed IPv6 literal,
 *   then nothing but an optional port 1..65535 — `[::1]evil.example`, `[::1].evil.example:80`, `localhost:`,
 *   `127.0.0.1:99999` and two Host headers are refused. Loopback names, compared without case: `localhost` and
 *   `*.localhost` (RFC 6761 reserves them for loopback), 127.0.0.0/8 as an exact dotted quad (no leading zeros, no
 *   short forms such as `127.1`), and ::1 in brackets however it is spelt (`[::1]`, `[0:0:0:0:0:0:0:1]`).
 * - Content type: a POST body must be `application/json` (415 otherwise), which also keeps browsers' simple
 *   requests out.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { isIPv6 } from 'node:net';
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

/** a DNS name: labels of letters, digits, `-` and `_` (at most 63 each, 253 in all), no empty label or trailing dot */
const NAME = /^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*$/;
/** 1..65535, digits only */
const PORT = /^[0-9]{1,5}$/;
/** one decimal octet 0..255 without leading zeros (`010` reads as octal to some resolvers) */
const OCTET = '(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])';
const LOOPBACK_V4 = new RegExp(`^127\\.${OCTET}\\.${OCTET}\\.${OCTET}$`);

/**
 * A Host header value split into its name (lower-cased; an IPv6 literal as `[canonical form]`) and port, or null
 * when it is not exactly `name[:port]` or `[IPv6][:port]` with a port 1..65535.
 */
export function hostParts(header: string): { name: string; port?: number } | null {
  const h = header.toLowerCase();
  let name: string;
  let rest: string;
  if (h.startsWith('[')) {
    const close = h.indexOf(']');
    if (close < 0) return null;
    const literal = h.slice(1, close);
    // hex digits, colons and an embedded dotted quad only: no zone id, no IPvFuture
    if (!/^[0-9a-f:.]+$/.test(literal) || !isIPv6(literal)) return null;
    name = new URL(`http://[${literal}]/`).hostname;
    rest = h.slice(close + 1);
  } else {
    const colon = h.indexOf(':');
    name = colon < 0 ? h : h.slice(0, colon);
    rest = colon < 0 ? '' : h.slice(colon);
    if (!NAME.test(name)) return null;
  }
  if (rest === '') return { name };
  if (rest[0] !== ':' || !PORT.test(rest.slice(1))) return null;
  const port = Number(rest.slice(1));
  return port >= 1 && port <= 65535 ? { name, port } : null;
}

/** The host name of a Host header (port dropped, IPv6 in canonical brackets), lower-cased; null when malformed. */
export function hostName(header: string): string | null {
  return hostParts(header)?.name ?? null;
}

/** A Host name that only ever means this machine. */
export function isLoopbackName(name: string): boolean {
  return name === 'localhost' || name.endsWith('.localhost') || name === '[::1]' || LOOPBACK_V4.test(name);
}

function hostAllowed(req: IncomingMessage, p: AccessPolicy): boolean {
  const all = req.headersDistinct.host;
  // node keeps the first of two Host headers; a proxy in front may have read the other
  if (!all || all.length !== 1 || all[0] === '') return false;
  const name = hostName(all[0]!);
  if (name === null) return false;
  if (isLoopbackName(name)) return true;
  return (p.allowedHosts ?? []).some((h) => hostName(h) === name);
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
  if (isLoopbackAddress(req.socket.localAddress) && !hostAllowed(req, p)) {
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
