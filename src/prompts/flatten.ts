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
import { SafekeepError } from '../util/errors.ts';

type Schema = JsonSchema;

/**
 * The most schema nodes one tool's flattening may visit. `$ref` and `allOf` can share one definition between many
 * places, so a 1 KB schema can double the work per level (depth 30: hours); real tool schemas visit tens to hundreds.
 */
export const MAX_SCHEMA_VISITS = 20_000;

/** A tool schema that expands beyond MAX_SCHEMA_VISITS nodes (or has an unreadable `$ref`): the client's error. */
export class SchemaBoundError extends SafekeepError {}

/**
 * What one flattening read: per schema object, the keys whose content the prose shows (or that are structure the
 * prose states in its own words: types, required lists, nesting). A judge's view prints everything else
 * (`guard/tool-view.ts`), so nothing in a spec is both sent to the agent and hidden from the judge.
 */
export interface Reading {
  used: WeakMap<object, Set<string>>;
  visits: number;
  tool: string;
}

function use(r: Reading, o: object, ...keys: string[]): void {
  let set = r.used.get(o);
  if (!set) r.used.set(o, (set = new Set()));
  for (const k of keys) set.add(k);
}

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
function resolveRef(root: Schema, ref: string, r: Reading): Schema | null {
  if (!ref.startsWith('#')) return null;
  let parts: string[];
  try {
    parts = ref.slice(1).split('/').filter((p) => p.length > 0).map((p) => decodeURIComponent(p).replace(/~1/g, '/').replace(/~0/g, '~'));
  } catch {
    throw new SchemaBoundError(`tool ${r.tool}: "$ref" ${JSON.stringify(ref.slice(0, 60))} is not a valid JSON pointer`);
  }
  let cur: unknown = root;
  const path: Schema[] = [];
  for (const p of parts) {
    if (!isSchema(cur)) return null;
    path.push(cur);
    cur = cur[p];
  }
  if (!isSchema(cur)) return null;
  // the containers on the way ($defs, definitions) are structure; what the target holds is read where it is merged
  parts.forEach((p, i) => use(r, path[i]!, p));
  return cur;
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
  /** where descriptions, enum/const values and defaults came from: marked as read once the prose shows them */
  from: { desc: [Schema, 'description' | 'title', string][]; values: [Schema, 'enum' | 'const', unknown[]][]; dflt: [Schema, unknown][] };
}

function emptyMerged(): Merged {
  return { description: null, enumValues: [], defaultValue: null, properties: new Map(), items: [], from: { desc: [], values: [], dflt: [] } };
}

/** JSON-schema keywords whose values are structure the prose states in its own words (or that carry no text) */
const STRUCTURE_KEYS = ['type', 'required', 'format', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
  'minLength', 'maxLength', 'minItems', 'maxItems', 'uniqueItems', 'minProperties', 'maxProperties', 'nullable', 'readOnly', 'writeOnly', 'deprecated'];

/** JSON Schema's and OpenAPI's format names (anything else in `format` is text) */
const FORMATS = ['date-time', 'date', 'time', 'duration', 'email', 'idn-email', 'hostname', 'idn-hostname', 'ipv4', 'ipv6', 'uri', 'uri-reference',
  'iri', 'iri-reference', 'uuid', 'uri-template', 'json-pointer', 'relative-json-pointer', 'regex', 'int32', 'int64', 'float', 'double', 'byte', 'binary', 'password'];

/** a keyword's value is structure only when it has no text in it: `type: "string"`, `required: ["a"]` of listed names */
function structural(k: string, v: unknown, s: Schema): boolean {
  if (!STRUCTURE_KEYS.includes(k)) return false;
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return true;
  if (k === 'type') return (Array.isArray(v) ? v : [v]).every((t) => typeof t === 'string' && /^(string|number|integer|boolean|object|array|null)$/.test(t));
  if (k === 'format') return typeof v === 'string' && FORMATS.includes(v);
  if (k === 'required') return Array.isArray(v) && v.every((n) => typeof n === 'string' && isSchema(s.properties) && n in s.properties);
  return false;
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

function mergeInto(acc: Merged, s: Schema, root: Schema, seen: ReadonlySet<string>, r: Reading): void {
  if (++r.visits > MAX_SCHEMA_VISITS) throw new SchemaBoundError(`tool ${r.tool}: its parameters schema expands to more than ${MAX_SCHEMA_VISITS} nodes ($ref/allOf sharing); flatten it`);
  if (typeof s.$ref === 'string') {
    if (!seen.has(s.$ref)) {
      const target = resolveRef(root, s.$ref, r);
      if (target) {
        use(r, s, '$ref');
        mergeInto(acc, target, root, new Set([...seen, s.$ref]), r);
      }
    } else use(r, s, '$ref');
  }
  for (const [k, v] of Object.entries(s)) if (structural(k, v, s)) use(r, s, k);
  for (const key of ['description', 'title'] as const) {
    const t = s[key];
    if (typeof t !== 'string') continue;
    if (!t.trim()) use(r, s, key);
    else acc.from.desc.push([s, key, t]);
  }
  const desc = typeof s.description === 'string' && s.description.trim() ? s.description : typeof s.title === 'string' && s.title.trim() ? s.title : null;
  if (desc && acc.description === null) acc.description = desc;
  if (Array.isArray(s.enum)) {
    acc.from.values.push([s, 'enum', s.enum]);
    for (const e of s.enum) if (!acc.enumValues.some((x) => same(x, e))) acc.enumValues.push(e);
  }
  if ('const' in s) {
    acc.from.values.push([s, 'const', [s.const]]);
    if (!acc.enumValues.some((x) => same(x, s.const))) acc.enumValues.push(s.const);
  }
  if ('default' in s) {
    acc.from.dflt.push([s, s.default]);
    if (acc.defaultValue === null) acc.defaultValue = { v: s.default };
  }
  if (isSchema(s.properties)) {
    use(r, s, 'properties');
    for (const [name, sub] of Object.entries(s.properties)) {
      if (!isSchema(sub)) continue;
      const list = acc.properties.get(name) ?? [];
      list.push(sub);
      acc.properties.set(name, list);
    }
  }
  if (isSchema(s.items)) { use(r, s, 'items'); acc.items.push(s.items); }
  else if (Array.isArray(s.items) && s.items.every(isSchema)) { use(r, s, 'items'); acc.items.push(...s.items); }
  if (Array.isArray(s.prefixItems) && s.prefixItems.every(isSchema)) { use(r, s, 'prefixItems'); acc.items.push(...s.prefixItems); }
  for (const key of ['allOf', 'anyOf', 'oneOf'] as const) {
    const alts = s[key];
    if (!Array.isArray(alts)) continue;
    if (alts.every(isSchema)) use(r, s, key);
    for (const alt of alts) if (isSchema(alt)) mergeInto(acc, alt, root, seen, r);
  }
}

function merge(schemas: readonly Schema[], root: Schema, seen: ReadonlySet<string>, r: Reading): Merged {
  const acc = emptyMerged();
  for (const s of schemas) mergeInto(acc, s, root, seen, r);
  // array of objects: the item fields become the argument's dotted children
  if (acc.items.length > 0) {
    const inner = emptyMerged();
    for (const it of acc.items) mergeInto(inner, it, root, seen, r);
    for (const [name, subs] of inner.properties) {
      const list = acc.properties.get(name) ?? [];
      list.push(...subs);
      acc.properties.set(name, list);
    }
    if (acc.enumValues.length === 0) acc.enumValues.push(...inner.enumValues);
    if (acc.description === null && inner.description !== null) acc.description = inner.description;
    // what the items said counts as shown only where the argument's line shows it
    acc.from.desc.push(...inner.from.desc);
    acc.from.values.push(...inner.from.values);
  }
  return acc;
}

/** Mark as read what an argument's line shows: the description (every source with that text), values, default. */
function markShown(m: Merged, r: Reading): void {
  for (const [s, key, t] of m.from.desc) if (t === m.description) use(r, s, key);
  for (const [s, key, vs] of m.from.values) if (vs.every((v) => m.enumValues.some((x) => same(x, v)))) use(r, s, key);
  for (const [s, v] of m.from.dflt) if (m.defaultValue && same(v, m.defaultValue.v)) use(r, s, 'default');
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

function argumentLines(path: string, schemas: readonly Schema[], root: Schema, seen: ReadonlySet<string>, out: string[], r: Reading): void {
  const m = merge(schemas, root, seen, r);
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
  markShown(m, r);
  const nextSeen = new Set([...seen, ...refsOf(schemas)]);
  for (const [name, subs] of m.properties) argumentLines(`${path}.${proseLine(name)}`, subs, root, nextSeen, out, r);
}

/** Flatten one tool spec to prose (see the file comment). Total over any JSON Schema; deterministic. */
export function flattenToolSpec(tool: ToolSpec): string {
  return readToolSpec(tool, newReading(tool));
}

/** a fresh record of one tool's flattening */
export function newReading(tool: ToolSpec): Reading {
  return { used: new WeakMap(), visits: 0, tool: JSON.stringify(String(tool.function?.name ?? '').slice(0, 60)) };
}

/**
 * `flattenToolSpec`, recording in `r` what the prose shows (and counting visits: a schema that expands beyond
 * MAX_SCHEMA_VISITS throws SchemaBoundError).
 */
export function readToolSpec(tool: ToolSpec, r: Reading): string {
  const fn = tool.function;
  const root: Schema = isSchema(fn.parameters) ? fn.parameters : {};
  use(r, tool, 'type', 'function');
  use(r, fn, 'name', 'parameters', ...(typeof fn.description === 'string' ? ['description'] : []));
  const m = merge([root], root, new Set(), r);
  const name = proseLine(fn.name);
  const lines = [`${name}(${[...m.properties.keys()].map(proseLine).join(', ')})`];
  const desc = typeof fn.description === 'string' ? proseLine(fn.description) : '';
  if (desc) lines.push(desc);
  const seen = refsOf([root]);
  for (const [arg, subs] of m.properties) argumentLines(proseLine(arg), subs, root, seen, lines, r);
  return lines.join('\n');
}

/** Flatten a tool list: one block per tool, blank line between blocks. */
export function flattenTools(tools: readonly ToolSpec[]): string {
  return tools.map(flattenToolSpec).join('\n\n');
}
