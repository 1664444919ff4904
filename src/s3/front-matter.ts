/**
 * A strict subset of YAML for SKILL.md front matter (no dependency, no surprises):
 *
 *   key: plain text | "JSON string" | 'single-quoted'
 *   key: [a, "b, c"]            flow list of scalars
 *   key:                        block list
 *     - item
 *   key:                        one level of map (values as above, flow lists allowed)
 *     sub: value
 *   key: |                      block text (indented lines, indentation removed, trailing newline kept off)
 *     line one
 *
 * Comments: a line whose first non-blank character is `#`. Tabs for indentation, duplicate keys, anything else are
 * errors with the 1-based line number. All scalars come back as strings; the caller types them.
 */

export type FmValue = string | string[] | { [key: string]: string | string[] };

export class FrontMatterError extends Error {
  constructor(readonly line: number, readonly key: string | null, message: string) {
    super(message);
  }
}

/** Splits a SKILL.md text into its front matter text (between `---` lines) and body; null when there is none. */
export function splitFrontMatter(text: string): { front: string; body: string; bodyLine: number } | null {
  const t = text.replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n');
  if (!t.startsWith('---\n')) return null;
  const end = t.indexOf('\n---', 3);
  if (end < 0) return null;
  const after = t.slice(end + 4);
  if (after !== '' && !after.startsWith('\n')) return null;
  const front = t.slice(4, end + 1);
  return { front, body: after.replace(/^\n/, ''), bodyLine: front.split('\n').length + 2 };
}

const KEY = /^([A-Za-z_][\w-]*):(?:\s+(.*)|\s*)$/;

function unquote(raw: string, line: number, key: string): string {
  const s = raw.trim();
  if (s.startsWith('"')) {
    try {
      const v = JSON.parse(s) as unknown;
      if (typeof v === 'string') return v;
    } catch { /* below */ }
    throw new FrontMatterError(line, key, `bad double-quoted string ${s} (use JSON string syntax, e.g. "a \\"b\\"")`);
  }
  if (s.startsWith("'")) {
    if (s.length < 2 || !s.endsWith("'") || /(^|[^'])'($|[^'])/.test(s.slice(1, -1).replace(/''/g, ''))) {
      throw new FrontMatterError(line, key, `bad single-quoted string ${s}`);
    }
    return s.slice(1, -1).replace(/''/g, "'");
  }
  if (/^[[{&*!|>%@`]/.test(s)) throw new FrontMatterError(line, key, `unquoted value starting with '${s[0]}' (quote it)`);
  // a trailing comment on a plain scalar
  return s.replace(/\s+#.*$/, '');
}

function flowList(raw: string, line: number, key: string): string[] {
  const s = raw.trim();
  if (!s.endsWith(']')) throw new FrontMatterError(line, key, 'flow list must end with ] on the same line');
  const inner = s.slice(1, -1);
  const items: string[] = [];
  let cur = '';
  let quote = '';
  for (let i = 0; i < inner.length; i++) {
    const c = inner[i]!;
    if (quote) {
      cur += c;
      if (c === '\\' && quote === '"') { cur += inner[++i] ?? ''; continue; }
      if (c === quote) quote = '';
      continue;
    }
    if (c === '"' || c === "'") { quote = c; cur += c; continue; }
    if (c === ',') { items.push(cur); cur = ''; continue; }
    cur += c;
  }
  if (quote) throw new FrontMatterError(line, key, 'unterminated quote in flow list');
  if (cur.trim() !== '' || items.length > 0) items.push(cur);
  return items.map((x) => {
    if (x.trim() === '') throw new FrontMatterError(line, key, 'empty item in flow list');
    return unquote(x, line, key);
  });
}

function scalarOrList(raw: string, line: number, key: string): string | string[] {
  return raw.trim().startsWith('[') ? flowList(raw, line, key) : unquote(raw, line, key);
}

export function parseFrontMatter(text: string): Map<string, FmValue> {
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  const out = new Map<string, FmValue>();
  const indentOf = (l: string) => l.length - l.trimStart().length;
  const skip = (l: string) => l.trim() === '' || l.trim().startsWith('#');
  let i = 0;
  while (i < lines.length) {
    const l = lines[i]!;
    const n = i + 1;
    if (/^\s*\t/.test(l)) throw new FrontMatterError(n, null, 'tab used for indentation (use spaces)');
    if (skip(l)) { i++; continue; }
    if (indentOf(l) !== 0) throw new FrontMatterError(n, null, `unexpected indentation: "${l.trim()}"`);
    const m = KEY.exec(l);
    if (!m) throw new FrontMatterError(n, null, `expected "key: value", got "${l}"`);
    const key = m[1]!;
    if (out.has(key)) throw new FrontMatterError(n, key, `duplicate key "${key}"`);
    const rest = (m[2] ?? '').trim();
    i++;
    if (rest === '|' || rest === '|-') {
      const block: string[] = [];
      let indent = -1;
      while (i < lines.length && (lines[i]!.trim() === '' || indentOf(lines[i]!) > 0)) {
        const b = lines[i]!;
        if (b.trim() !== '') {
          if (indent < 0) indent = indentOf(b);
          if (indentOf(b) < indent) throw new FrontMatterError(i + 1, key, 'block text lines must keep the first line\'s indentation');
        }
        block.push(b.trim() === '' ? '' : b.slice(indent));
        i++;
      }
      while (block.length && block.at(-1) === '') block.pop();
      if (block.length === 0) throw new FrontMatterError(n, key, `"${key}: |" needs indented text below it`);
      out.set(key, block.join('\n'));
      continue;
    }
    if (rest !== '') {
      out.set(key, scalarOrList(rest, n, key));
      continue;
    }
    // nested block: a list of "- item" or a map of "sub: value"
    const items: string[] = [];
    const map: Record<string, string | string[]> = {};
    let kind: 'list' | 'map' | null = null;
    let indent = -1;
    while (i < lines.length && (skip(lines[i]!) || indentOf(lines[i]!) > 0)) {
      const b = lines[i]!;
      if (/^\s*\t/.test(b)) throw new FrontMatterError(i + 1, key, 'tab used for indentation (use spaces)');
      if (skip(b)) { i++; continue; }
      if (indent < 0) indent = indentOf(b);
      if (indentOf(b) !== indent) throw new FrontMatterError(i + 1, key, `inconsistent indentation under "${key}" (only one level is allowed)`);
      const t = b.trim();
      if (t.startsWith('- ') || t === '-') {
        if (kind === 'map') throw new FrontMatterError(i + 1, key, `mixing "- item" and "sub: value" under "${key}"`);
        kind = 'list';
        if (t === '-') throw new FrontMatterError(i + 1, key, 'empty list item');
        items.push(unquote(t.slice(2), i + 1, key));
      } else {
        if (kind === 'list') throw new FrontMatterError(i + 1, key, `mixing "- item" and "sub: value" under "${key}"`);
        kind = 'map';
        const sm = KEY.exec(t);
        if (!sm || sm[2] === undefined || sm[2].trim() === '') throw new FrontMatterError(i + 1, key, `expected "sub: value" under "${key}", got "${t}"`);
        const sub = sm[1]!;
        if (sub in map) throw new FrontMatterError(i + 1, `${key}.${sub}`, `duplicate key "${key}.${sub}"`);
        map[sub] = scalarOrList(sm[2], i + 1, `${key}.${sub}`);
      }
      i++;
    }
    if (kind === null) throw new FrontMatterError(n, key, `"${key}:" has no value`);
    out.set(key, kind === 'list' ? items : map);
  }
  return out;
}
