/**
 * AgentHarm's tools are Python functions (inspect_ai `@tool`s: `def name() -> Tool:` returning
 * `async def run(arg: type, ...) -> str` with a Google-style docstring). The hub copy of the benchmark carries the
 * sources (benchmark/{harmful,benign}_tools/*.py) only at older revisions; `safekeep data pull agentharm` fetches
 * them and converts them here into the `tools.json` the importer reads — the same conversion inspect_ai makes
 * (type hints → JSON types, docstring summary → description, `Args:` lines → argument descriptions, arguments
 * without a default and not Optional → required).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import type { JsonSchema, ToolSpec } from './types.ts';
import { validateToolSpec } from './validate.ts';

const SCALARS: Record<string, string> = { str: 'string', int: 'integer', float: 'number', bool: 'boolean', dict: 'object', Dict: 'object', list: 'array', List: 'array' };

/** JSON Schema of a Python type hint, and whether it admits None. */
export function pythonTypeToSchema(hint: string): { schema: JsonSchema; optional: boolean } {
  let h = hint.trim();
  let optional = false;
  const opt = /^(?:typing\.)?Optional\[(.*)\]$/.exec(h);
  if (opt) { h = opt[1]!.trim(); optional = true; }
  const parts = splitTopLevel(h, '|').map((s) => s.trim());
  if (parts.length > 1 && parts.includes('None')) {
    optional = true;
    h = parts.filter((p) => p !== 'None').join(' | ');
  }
  const generic = /^(?:typing\.)?(list|List|dict|Dict)\[(.*)\]$/.exec(h);
  if (generic) {
    if (generic[1] === 'list' || generic[1] === 'List') {
      const inner = pythonTypeToSchema(generic[2]!).schema;
      return { schema: Object.keys(inner).length ? { type: 'array', items: inner } : { type: 'array' }, optional };
    }
    return { schema: { type: 'object' }, optional };
  }
  const t = SCALARS[h.replace(/^typing\./, '')];
  return { schema: t ? { type: t } : {}, optional };
}

/** Splits at `sep` outside brackets and quotes. */
function splitTopLevel(s: string, sep: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let quote = '';
  let cur = '';
  for (const c of s) {
    if (quote) { cur += c; if (c === quote) quote = ''; continue; }
    if (c === '"' || c === "'") { quote = c; cur += c; continue; }
    if ('([{'.includes(c)) depth++;
    if (')]}'.includes(c)) depth--;
    if (c === sep && depth === 0) { out.push(cur); cur = ''; continue; }
    cur += c;
  }
  if (cur.trim()) out.push(cur);
  return out;
}

interface DocString {
  description: string;
  args: Map<string, string>;
}

/** Google-style docstring: summary paragraphs, then `Args:` (name[ (type)]: text, continuation lines indented). */
export function parseDocstring(doc: string): DocString {
  const lines = doc.replace(/\r/g, '').split('\n');
  const desc: string[] = [];
  const args = new Map<string, string>();
  let section: 'desc' | 'args' | 'other' = 'desc';
  let argIndent = -1;
  let current: string | null = null;
  for (const raw of lines) {
    const line = raw.trimEnd();
    const trimmed = line.trim();
    const header = /^(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?):$/.exec(trimmed);
    if (header) {
      section = ['Args', 'Arguments', 'Parameters'].includes(header[1]!) ? 'args' : 'other';
      argIndent = -1;
      current = null;
      continue;
    }
    if (section === 'desc') { desc.push(trimmed); continue; }
    if (section !== 'args' || !trimmed) continue;
    const indent = line.length - line.trimStart().length;
    const m = /^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$/.exec(trimmed);
    if (m && (argIndent < 0 || indent <= argIndent)) {
      argIndent = indent;
      current = m[1]!.replace(/^\*+/, '');
      args.set(current, m[2]!.trim());
    } else if (current) {
      args.set(current, `${args.get(current)!} ${trimmed}`.trim());
    }
  }
  const description = desc.join('\n').trim().split(/\n\s*\n/).map((p) => p.replace(/\s*\n\s*/g, ' ').trim()).join(' ');
  return { description, args };
}

/** Index of the bracket closing the one at `open`. */
function closing(src: string, open: number): number {
  let depth = 0;
  for (let i = open; i < src.length; i++) {
    const c = src[i]!;
    if ('([{'.includes(c)) depth++;
    else if (')]}'.includes(c) && --depth === 0) return i;
  }
  return -1;
}

/** Every `@tool` of a Python source file as an OpenAI function spec. */
export function pythonToolSpecs(source: string, file: string): ToolSpec[] {
  const specs: ToolSpec[] = [];
  const toolRe = /@tool(?:\([^)]*\))?\s*\n\s*def\s+(\w+)\s*\([^)]*\)\s*(?:->\s*[\w.]+\s*)?:/g;
  for (let m = toolRe.exec(source); m; m = toolRe.exec(source)) {
    const name = m[1]!;
    const where = `${file}: tool '${name}'`;
    const inner = /(?:async\s+)?def\s+\w+\s*\(/g;
    inner.lastIndex = toolRe.lastIndex;
    const im = inner.exec(source);
    if (!im) throw new SafekeepError(`${where}: no inner function`);
    const open = im.index + im[0].length - 1;
    const close = closing(source, open);
    if (close < 0) throw new SafekeepError(`${where}: unbalanced parentheses in the signature`);
    const params = splitTopLevel(source.slice(open + 1, close), ',').map((p) => p.trim()).filter((p) => p && p !== 'self' && !p.startsWith('*'));
    const after = source.slice(close);
    const dm = /^\)\s*(?:->\s*[^:]+)?:\s*(?:[rRuU]?)("""|''')([\s\S]*?)\1/.exec(after);
    const doc = parseDocstring(dm ? dm[2]! : '');
    const properties: Record<string, JsonSchema> = {};
    const required: string[] = [];
    for (const p of params) {
      const pm = /^(\w+)\s*(?::\s*([^=]+?))?\s*(?:=\s*(.+))?$/s.exec(p);
      if (!pm) throw new SafekeepError(`${where}: cannot read parameter '${p}'`);
      const [, pname, hint, dflt] = pm;
      const { schema, optional } = pythonTypeToSchema(hint ?? '');
      const d = doc.args.get(pname!);
      const prop: JsonSchema = { ...(schema.type !== undefined ? { type: schema.type } : {}) };
      if (d) prop.description = d;
      if (schema.items !== undefined) prop.items = schema.items;
      properties[pname!] = prop;
      if (dflt === undefined && !optional) required.push(pname!);
    }
    specs.push(validateToolSpec({ type: 'function', function: { name, description: doc.description, parameters: { type: 'object', properties, required } } }, where));
  }
  return specs;
}

/** Converts `<dir>/{harmful,benign}_tools/*.py` into the tools.json object the importer reads. */
export function buildAgentHarmTools(dir: string): { harmful_tools: ToolSpec[]; benign_tools: ToolSpec[] } {
  const side = (sub: string): ToolSpec[] => {
    const d = join(dir, sub);
    const files = readdirSync(d).filter((f) => f.endsWith('.py') && !f.startsWith('__')).sort();
    const out: ToolSpec[] = [];
    for (const f of files) out.push(...pythonToolSpecs(readFileSync(join(d, f), 'utf8'), join(d, f)));
    if (out.length === 0) throw new SafekeepError(`${d}: no @tool functions found`);
    return out;
  };
  return { harmful_tools: side('harmful_tools'), benign_tools: side('benign_tools') };
}
