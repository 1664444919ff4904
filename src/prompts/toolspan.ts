/**
 * Where a chat template writes the tool specifications, found by rendering a sentinel tool and locating its
 * serialized JSON; other representations (flattened prose) are then substituted into exactly that span, so the
 * template's own tool-use wrapper around it stays identical.
 */
import type { ToolSpec } from '../data/types.ts';
import { SafekeepError } from '../util/errors.ts';
import type { ChatMessage, PromptTokenizer, RenderOptions } from './tokenizer.ts';

const MARK = 'sksentineltool';

/** A tool no real spec looks like; its name is the marker we search for. */
const SENTINEL_TOOL: ToolSpec = {
  type: 'function',
  function: {
    name: MARK,
    description: 'sksentinel description',
    parameters: { type: 'object', properties: { sksentinelarg: { type: 'string', description: 'sksentinel argument' } }, required: ['sksentinelarg'] },
  },
};

/** Key-order-independent JSON form for comparing parsed objects. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

/** Index of the `}` matching the `{` at `start` (JSON-string aware), or -1. */
function matchingBrace(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return i;
  }
  return -1;
}

/** [start, end) of the sentinel's serialization in `rendered` (whole tool object preferred over its `function`). */
function locateSentinel(rendered: string): { start: number; end: number } {
  const at = rendered.indexOf(MARK);
  if (at < 0) throw new SafekeepError('chat template does not write tool specs (rendering with a tool shows no trace of it)');
  if (rendered.indexOf(MARK, at + MARK.length) >= 0) {
    throw new SafekeepError('chat template writes the tool name more than once; cannot substitute another tool representation');
  }
  const whole = canonical(SENTINEL_TOOL);
  const inner = canonical(SENTINEL_TOOL.function);
  let innerSpan: { start: number; end: number } | null = null;
  for (let s = rendered.lastIndexOf('{', at); s >= 0; s = s > 0 ? rendered.lastIndexOf('{', s - 1) : -1) {
    const e = matchingBrace(rendered, s);
    if (e < at) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(rendered.slice(s, e + 1));
    } catch {
      continue;
    }
    const c = canonical(parsed);
    if (c === whole) return { start: s, end: e + 1 };
    if (c === inner && !innerSpan) innerSpan = { start: s, end: e + 1 };
    if (at - s > 4000) break;
  }
  if (innerSpan) return innerSpan;
  throw new SafekeepError('chat template serializes tools in a form that is not JSON; cannot locate the tool span');
}

/**
 * Render `messages` with the template's tools path, but with `toolText` standing where the template writes the
 * JSON tool specs (between the same wrapper text). Returns the rendering and the span of `toolText` in it.
 */
export function renderWithToolText(
  tok: PromptTokenizer,
  messages: readonly ChatMessage[],
  toolText: string,
  opts: Omit<RenderOptions, 'tools'>,
): { text: string; start: number; end: number } {
  const rendered = tok.render(messages, { ...opts, tools: [SENTINEL_TOOL] });
  const span = locateSentinel(rendered);
  return { text: rendered.slice(0, span.start) + toolText + rendered.slice(span.end), start: span.start, end: span.start + toolText.length };
}
