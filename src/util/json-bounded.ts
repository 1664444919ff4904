/**
 * JSON from outside (request bodies, config.json, safetensors headers, data files) with its nesting depth capped
 * before anything recurses over it: `JSON.parse` itself copes with deep text, but every walker after it (schema
 * validation, flattening, printing) recurses once per level and dies with a RangeError far from the input's name.
 */
import { SafekeepError } from './errors.ts';

/** the default cap: far above any real chat request, tool schema or checkpoint header */
export const MAX_JSON_DEPTH = 64;

/** Deepest nesting of `[`/`{` in a JSON text, by one scan without recursion (strings and their escapes skipped). */
export function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) { if (++depth > max) max = depth; }
    else if (c === 0x5d || c === 0x7d) depth--;
  }
  return max;
}

/**
 * `JSON.parse` for untrusted text: one SafekeepError naming `what` for text nested deeper than `maxDepth` or not
 * JSON at all (the parser's message, cut to one short line).
 */
export function parseJsonBounded(text: string, what: string, maxDepth = MAX_JSON_DEPTH): unknown {
  const depth = jsonDepth(text);
  if (depth > maxDepth) throw new SafekeepError(`${what}: JSON nested ${depth} levels deep (at most ${maxDepth})`);
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new SafekeepError(`${what}: not valid JSON (${String((e as Error).message).slice(0, 120)})`);
  }
}
