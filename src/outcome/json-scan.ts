/**
 * Finding JSON values inside free text: the end of a balanced `{...}` / `[...]` starting at a given index,
 * respecting strings and escapes. Used by the tool-call parsers; pure and linear.
 */

/** Index just past the balanced value opening at `start` (text[start] is '{' or '['), or -1 if it never closes. */
export function balancedEnd(text: string, start: number): number {
  const stack: string[] = [];
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === '{' || c === '[') stack.push(c === '{' ? '}' : ']');
    else if (c === '}' || c === ']') {
      if (stack.pop() !== c) return -1;
      if (stack.length === 0) return i + 1;
    }
  }
  return -1;
}

type JsonParse = { ok: true; value: unknown } | { ok: false; error: string };

export function tryParseJson(text: string): JsonParse {
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
