/**
 * Flattened tool specifications (paper §3.3): the same information as a JSON-schema tool spec, as prose.
 *
 * Removed: JSON syntax, reserved schema fields (type, required, format, bounds, patterns, ...), nesting and type
 * declarations, required markers. Kept: the tool name, a signature `name(arg1, arg2)`, what the tool does, and
 * one line per argument saying what it means. Nested object fields become dotted argument names
 * (`recipient.email`, also for arrays of objects); enum/const values stay as prose ("one of: C, F"); defaults stay
 * as prose ("Default: 30."). `$ref` (into `$defs`/`definitions` of the same spec), `allOf`, `anyOf` and `oneOf`
 * are resolved/merged. Curly braces inside descriptions become parentheses, so no JSON syntax survives.
 *
 * Example: run_command with `command` (required) and `timeout` (default 30) becomes
 *   run_command(command, timeout)
 *   Run a shell command and return its output.
 *   - command: The command line to run.
 *   - timeout: Seconds to wait before giving up. Default: 30.
 */
import type { JsonSchema, ToolSpec } from '../data/types.ts';

type Schema = JsonSchema;

function isSchema(v: unknown): v is Schema {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** One line of prose: collapse whitespace, no braces. */
function proseLine(text: string): string {
  return text.replace(/[{]/g, '(').replace(/[}]/g, ')').replace(/\s+/g, ' ').trim();
}

/** A JSON value written as prose (strings bare, others as written, objects field by field). */
function valueProse(v: unknown): string {
  if (typeof v === 'string') return proseLine(v);
  if (v === null) return 'none';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return v.length === 0 ? 'an empty list' : v.map(valueProse).join(', ');
  if (isSchema(v)) {
    const entries = Object.entries(v);
    return entries.length === 0 ? 'nothing' : entries.map(([k, x]) => `${proseLine(k)} ${valueProse(x)}`).join(', ');
  }
  return String(v);
}

/** Resolve a local `$ref` ('#/$defs/X', '#/definitions/X', any JSON pointer into the root). */
function resolveRef(root: Schema, ref: string): Schema | null {
  if (!ref.startsWith('#')) return null;
  const parts = ref.slice(1).split('/').filter((p) => p.length > 0).map((p) => decodeURIComponent(p).replace(/~1/g, '/').replace(/~0/g, '~'));
  let cur: unknown = root;
  for (const p of parts) {
    if (!isSchema(cur)) return null;
    cur = cur[p];
  }
  return isSchema(cur) ? cur : null;
}

/** What we know about one (possibly composite) schema after merging $ref/allOf/anyOf/oneOf. */
interface Merged {
  description: string | null;
  enumValues: unknown[];
  defaultValue: { v: unknown } | null;
  /** field name → list of sub-schemas (several when alternatives define the same field) */
  properties: Map<string, Schema[]>;
  /** schemas of array items */
  items: Schema[];
}

function emptyMerged(): Merged {
  return { description: null, enumValues: [], defaultValue: null, properties: new Map(), items: [] };
}

function mergeInto(acc: Merged, s: Schema, root: Schema, seen: ReadonlySet<string>): void {
  if (typeof s.$ref === 'string') {
    if (!seen.has(s.$ref)) {
      const target = resolveRef(root, s.$ref);
      if (target) mergeInto(acc, target, root, new Set([...seen, s.$ref]));
    }
  }
  const desc = typeof s.description === 'string' && s.description.trim() ? s.description : typeof s.title === 'string' && s.title.trim() ? s.title : null;
  if (desc && acc.description === null) acc.description = desc;
  if (Array.isArray(s.enum)) for (const e of s.enum) if (!acc.enumValues.some((x) => JSON.stringify(x) === JSON.stringify(e))) acc.enumValues.push(e);
  if ('const' in s && !acc.enumValues.some((x) => JSON.stringify(x) === JSON.stringify(s.const))) acc.enumValues.push(s.const);
  if ('default' in s && acc.defaultValue === null) acc.defaultValue = { v: s.default };
  if (isSchema(s.properties)) {
    for (const [name, sub] of Object.entries(s.properties)) {
      if (!isSchema(sub)) continue;
      const list = acc.properties.get(name) ?? [];
      list.push(sub);
      acc.properties.set(name, list);
    }
  }
  if (isSchema(s.items)) acc.items.push(s.items);
  else if (Array.isArray(s.items)) for (const it of s.items) if (isSchema(it)) acc.items.push(it);
  if (Array.isArray(s.prefixItems)) for (const it of s.prefixItems) if (isSchema(it)) acc.items.push(it);
  for (const key of ['allOf', 'anyOf', 'oneOf'] as const) {
    const alts = s[key];
    if (Array.isArray(alts)) for (const alt of alts) if (isSchema(alt)) mergeInto(acc, alt, root, seen);
  }
}

function merge(schemas: readonly Schema[], root: Schema, seen: ReadonlySet<string>): Merged {
  const acc = emptyMerged();
  for (const s of schemas) mergeInto(acc, s, root, seen);
  // array of objects: the item fields become the argument's dotted children
  if (acc.items.length > 0) {
    const inner = emptyMerged();
    for (const it of acc.items) mergeInto(inner, it, root, seen);
    for (const [name, subs] of inner.properties) {
      const list = acc.properties.get(name) ?? [];
      list.push(...subs);
      acc.properties.set(name, list);
    }
    if (acc.enumValues.length === 0) acc.enumValues.push(...inner.enumValues);
    if (acc.description === null && inner.description !== null) acc.description = inner.description;
  }
  return acc;
}

/** Refs met on the way to a schema: stops expansion of recursive definitions. */
function refsOf(schemas: readonly Schema[]): Set<string> {
  const out = new Set<string>();
  const visit = (s: Schema): void => {
    if (typeof s.$ref === 'string') out.add(s.$ref);
    for (const key of ['allOf', 'anyOf', 'oneOf'] as const) {
      const alts = s[key];
      if (Array.isArray(alts)) for (const a of alts) if (isSchema(a)) visit(a);
    }
    if (isSchema(s.items)) visit(s.items);
  };
  schemas.forEach(visit);
  return out;
}

function argumentLines(path: string, schemas: readonly Schema[], root: Schema, seen: ReadonlySet<string>, out: string[]): void {
  const m = merge(schemas, root, seen);
  let line = `- ${path}`;
  const bits: string[] = [];
  if (m.description) {
    const d = proseLine(m.description);
    bits.push(/[.!?]$/.test(d) ? d : `${d}.`);
  }
  if (m.enumValues.length > 0) bits.push(`One of: ${m.enumValues.map(valueProse).join(', ')}.`);
  if (m.defaultValue) bits.push(`Default: ${valueProse(m.defaultValue.v)}.`);
  if (bits.length > 0) line += `: ${bits.join(' ')}`;
  out.push(line);
  const nextSeen = new Set([...seen, ...refsOf(schemas)]);
  for (const [name, subs] of m.properties) argumentLines(`${path}.${proseLine(name)}`, subs, root, nextSeen, out);
}

/** Flatten one tool spec to prose (see the file comment). Total over any JSON Schema; deterministic. */
export function flattenToolSpec(tool: ToolSpec): string {
  const fn = tool.function;
  const root: Schema = isSchema(fn.parameters) ? fn.parameters : {};
  const m = merge([root], root, new Set());
  const name = proseLine(fn.name);
  const lines = [`${name}(${[...m.properties.keys()].map(proseLine).join(', ')})`];
  const desc = typeof fn.description === 'string' ? proseLine(fn.description) : '';
  if (desc) lines.push(desc);
  const seen = refsOf([root]);
  for (const [arg, subs] of m.properties) argumentLines(proseLine(arg), subs, root, seen, lines);
  return lines.join('\n');
}

/** Flatten a tool list: one block per tool, blank line between blocks. */
export function flattenTools(tools: readonly ToolSpec[]): string {
  return tools.map(flattenToolSpec).join('\n\n');
}
