/**
 * The judge's prose view of the tools: the flattened prose (paper §3.3) and, after it, every piece of the specs the
 * prose does not show — an `examples`, `title`, `x-*`, `$comment`, `additionalProperties`, `if`/`then`/`not`, an
 * unreferenced `$defs` entry, a second description merged away — each as `path: value` prose. A chat template may
 * print the whole JSON schema into the agent's prompt (Qwen3's does), so text the judge is not shown would reach
 * the agent unjudged; this view is lossless over the specs. What the flattener read is recorded during the
 * flattening itself (`readToolSpec`), not guessed from the text afterwards.
 */
import type { ToolSpec } from '../data/types.ts';
import { flattenTools, newReading, readToolSpec, type Reading } from '../prompts/flatten.ts';
import { proseKey, proseValue } from './prose-value.ts';
import type { Flattener } from './types.ts';

/** keys whose value the prose shows whole (not containers to look inside) */
const SHOWN_WHOLE = new Set(['enum', 'const', 'default', 'required', 'type', 'description', 'title', 'name', 'format']);
/** containers whose keys are names the prose shows (property names) */
const NAMED = new Set(['properties']);

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** `path: value` lines for everything under `v` that `r` does not record as shown. */
function unread(v: unknown, path: string, r: Reading | null, out: string[], namedKeys = false): void {
  if (Array.isArray(v)) {
    v.forEach((x, i) => unread(x, `${path}[${i}]`, r, out));
    return;
  }
  if (!isObject(v)) return;
  const used = r?.used.get(v);
  for (const [k, x] of Object.entries(v)) {
    const at = `${path}.${proseKey(k)}`;
    if (namedKeys) {
      unread(x, at, r, out);
      continue;
    }
    if (!used?.has(k)) {
      out.push(`- ${at}: ${proseValue(x)}`);
      continue;
    }
    if (SHOWN_WHOLE.has(k) || typeof x !== 'object' || x === null) continue;
    unread(x, at, r, out, NAMED.has(k));
  }
}

/** The unread parts of one tool's spec (its own flattening recorded in `r`; null = nothing counts as shown). */
export function unreadLines(tool: ToolSpec, r: Reading | null): string[] {
  const out: string[] = [];
  unread(tool, proseValue(tool.function?.name ?? ''), r, out);
  return out;
}

/**
 * The tools as the SafeKeep judge sees them: `flatten`'s prose, then what it leaves out. With the default
 * flattener the leftovers are what it did not read; another flattener's reading is unknown, so every part of every
 * spec is listed after it.
 */
export function proseToolView(tools: readonly ToolSpec[], flatten: Flattener = flattenTools): string {
  const own = flatten === flattenTools;
  const readings = tools.map((t) => {
    const r = newReading(t);
    const text = readToolSpec(t, r);
    return { r, text };
  });
  const prose = own ? readings.map((x) => x.text).join('\n\n') : flatten(tools);
  const rest = tools.flatMap((t, i) => unreadLines(t, own ? readings[i]!.r : null));
  if (rest.length === 0) return prose;
  return `${prose}\n\nAlso in the tool specifications (schema text not shown above, as path: value):\n${rest.join('\n')}`;
}
