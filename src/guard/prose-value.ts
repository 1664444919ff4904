/**
 * Any JSON value as one line of prose, losslessly: strings quoted (JSON escapes, so a newline cannot end the line),
 * arrays `[a, b]`, objects `(key=value, ...)` at every depth. The judge's views use it for everything a client
 * sends that has no prose form of its own (call arguments, settings, schema text the flattener does not show): what
 * the agent can read, the judge reads too.
 */
import { JsonNumber } from '../util/json-lossless.ts';

const IDENT = /^[A-Za-z_][A-Za-z0-9_.-]*$/;

export function proseValue(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  // a number read without loss shows the digits the client wrote (what the template prints)
  if (v instanceof JsonNumber) return v.text;
  if (Array.isArray(v)) return `[${v.map(proseValue).join(', ')}]`;
  if (typeof v === 'object') return `(${Object.entries(v as Record<string, unknown>).map(([k, x]) => `${proseKey(k)}=${proseValue(x)}`).join(', ')})`;
  return JSON.stringify(String(v));
}

/** an object key: bare when it is an identifier, else quoted */
export function proseKey(k: string): string {
  return IDENT.test(k) ? k : JSON.stringify(k);
}

/** `send_email(to="a", n=3, recipient=(name="b"))`: a call with every argument, nested ones included. */
export function proseCall(name: string, args: Record<string, unknown>): string {
  return `${name}(${Object.entries(args).map(([k, v]) => `${proseKey(k)}=${proseValue(v)}`).join(', ')})`;
}
