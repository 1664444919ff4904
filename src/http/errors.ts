/**
 * Errors a server answers with: one JSON shape, OpenAI's (`{"error": {"message", "type", "param", "code"}}`, which
 * vLLM and llama.cpp clients parse too), a status, and nothing else — never a stack, never an upstream's body.
 */
import type { ServerResponse } from 'node:http';

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    /** extra fields of the error object (e.g. `upstream_status`) */
    readonly extra: Record<string, unknown> = {},
    /** extra response headers (e.g. `retry-after`, `allow`) */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

/** 400 with OpenAI's `invalid_request_error` type. */
export const badRequest = (message: string): HttpError => new HttpError(400, 'invalid_request_error', message);

/** the longest error message a client is sent (a 10 MB echo of its own input helps nobody) */
const MAX_MESSAGE = 1000;

export function capMessage(s: string, max = MAX_MESSAGE): string {
  return s.length <= max ? s : `${s.slice(0, max)}… (${s.length - max} more characters)`;
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export function errorBody(e: HttpError): { error: Record<string, unknown> } {
  return { error: { message: capMessage(e.message), type: e.type, param: null, code: e.status, ...e.extra } };
}

export function sendError(res: ServerResponse, e: HttpError, headers: Record<string, string> = {}): void {
  sendJson(res, e.status, errorBody(e), { ...headers, ...e.headers });
}
