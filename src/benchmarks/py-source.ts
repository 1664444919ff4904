/**
 * Reading benchmark prompt text out of the benchmarks' own Python sources at run time, so that the prompts we send
 * are the benchmark's bytes rather than copies committed here. Two pieces, each refusing what it does not implement
 * exactly:
 *
 * - `pyTripleQuotedConstant(source, name)`: the value of a top-level `NAME = """..."""` assignment. Only plain
 *   (non-raw, non-f, non-byte) triple-double-quoted literals without backslashes are accepted: without a backslash
 *   the literal's value is its text, so nothing has to be unescaped; anything else is refused by name.
 * - `pyFormat(template, fields)`: Python's `str.format(**fields)` for templates whose replacement fields are bare
 *   names (`{name}`) and whose literal braces are doubled (`{{`, `}}`). Indexing, attributes, conversions (`!r`),
 *   format specs (`:>10`) and positional fields are refused, as Python would otherwise do something we do not.
 */
import { readFileSync } from 'node:fs';
import { SafekeepError } from '../util/errors.ts';

/** The value of the top-level `name = """..."""` assignment in `source` (`where` names the file in errors). */
export function pyTripleQuotedConstant(source: string, name: string, where: string): string {
  const head = `${name} = """`;
  const lines = source.split('\n');
  let offset = 0;
  let start = -1;
  for (const line of lines) {
    // top level only: the assignment starts the line
    if (line.startsWith(head)) {
      start = offset + head.length;
      break;
    }
    offset += line.length + 1;
  }
  if (start < 0) throw new SafekeepError(`${where}: no top-level ${name} = """...""" string`);
  const end = source.indexOf('"""', start);
  if (end < 0) throw new SafekeepError(`${where}: ${name}'s string is not closed`);
  const text = source.slice(start, end);
  // a backslash would be an escape (or a line continuation) whose value differs from its text
  if (text.includes('\\')) throw new SafekeepError(`${where}: ${name} contains a backslash escape, which is not supported`);
  const after = source.slice(end + 3).split('\n')[0]!;
  // `NAME = """...""" + OTHER` or `.format(...)` would make the constant something else
  if (after.trim() !== '') throw new SafekeepError(`${where}: ${name} is not a plain string literal (followed by '${after.trim()}')`);
  return text;
}

/** `pyTripleQuotedConstant` of a file, with the file named in errors. */
export function readPyConstant(file: string, name: string): string {
  let source: string;
  try {
    source = readFileSync(file, 'utf8');
  } catch {
    throw new SafekeepError(`cannot read ${file}`);
  }
  return pyTripleQuotedConstant(source, name, file);
}

/** The bare field names a template uses, in order of first use (also validates the template). */
export function pyFormatFields(template: string): string[] {
  const out: string[] = [];
  for (const piece of pyFormatPieces(template)) if (piece.field !== undefined && !out.includes(piece.field)) out.push(piece.field);
  return out;
}

interface Piece {
  text?: string;
  field?: string;
}

const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function pyFormatPieces(template: string): Piece[] {
  const out: Piece[] = [];
  let literal = '';
  let i = 0;
  while (i < template.length) {
    const c = template[i]!;
    if (c === '{') {
      if (template[i + 1] === '{') {
        literal += '{';
        i += 2;
        continue;
      }
      const close = template.indexOf('}', i + 1);
      if (close < 0) throw new SafekeepError(`format template: single '{' at offset ${i}`);
      const field = template.slice(i + 1, close);
      if (!FIELD_NAME.test(field)) {
        throw new SafekeepError(`format template: field '{${field}}' at offset ${i} is not a bare name (indexing, conversions, specs and positional fields are not supported)`);
      }
      if (literal) out.push({ text: literal });
      literal = '';
      out.push({ field });
      i = close + 1;
      continue;
    }
    if (c === '}') {
      // Python: a lone '}' is "Single '}' encountered in format string"
      if (template[i + 1] !== '}') throw new SafekeepError(`format template: single '}' at offset ${i}`);
      literal += '}';
      i += 2;
      continue;
    }
    literal += c;
    i++;
  }
  if (literal) out.push({ text: literal });
  return out;
}

/** Python `template.format(**fields)` for bare-name fields; a field the template uses but `fields` lacks is an error (Python: KeyError). */
export function pyFormat(template: string, fields: Readonly<Record<string, string>>): string {
  let out = '';
  for (const p of pyFormatPieces(template)) {
    if (p.text !== undefined) out += p.text;
    else {
      const v = fields[p.field!];
      if (v === undefined) throw new SafekeepError(`format template: no value for field '{${p.field}}'`);
      out += v;
    }
  }
  return out;
}

/**
 * Python's `repr()` of a str, for the strings we need it for (tool names): printable ASCII only, anything else is
 * refused, since Python's escaping of non-printable and non-ASCII characters is not reproduced here.
 */
export function pyReprAscii(s: string): string {
  if (!/^[\x20-\x7e]*$/.test(s)) throw new SafekeepError(`python repr: '${JSON.stringify(s)}' has characters outside printable ASCII`);
  // Python picks double quotes only when the text has a single quote and no double quote
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const c of s) {
    if (c === '\\') out += '\\\\';
    else if (c === quote) out += `\\${c}`;
    else out += c;
  }
  return out + quote;
}

/** Python `repr()` of a list of str: `['A', 'B']`. */
export function pyReprStrList(items: readonly string[]): string {
  return `[${items.map(pyReprAscii).join(', ')}]`;
}

/**
 * Python `json.dumps(value, indent=n)` with its defaults (ensure_ascii=True; separators ',' and ': ' once indent is
 * given; keys in insertion order). Numbers must be integers that JavaScript holds exactly: a float in the source
 * (Python prints `1.0`) cannot be told from an integer after JSON.parse, so callers check the source text with
 * `assertIntegerNumbers` first.
 */
export function pyJsonDumps(value: unknown, indent: number): string {
  return dump(value, indent, 0);
}

function dump(v: unknown, indent: number, level: number): string {
  if (v === null) return 'null';
  if (v === true) return 'true';
  if (v === false) return 'false';
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v)) throw new SafekeepError(`python json.dumps: number ${v} is not an integer JavaScript holds exactly`);
    return String(v);
  }
  if (typeof v === 'string') return pyJsonString(v);
  const pad = (l: number) => '\n' + ' '.repeat(indent * l);
  if (Array.isArray(v)) {
    if (v.length === 0) return '[]';
    return '[' + v.map((x) => pad(level + 1) + dump(x, indent, level + 1)).join(',') + pad(level) + ']';
  }
  if (typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>);
    if (entries.length === 0) return '{}';
    return '{' + entries.map(([k, x]) => pad(level + 1) + pyJsonString(k) + ': ' + dump(x, indent, level + 1)).join(',') + pad(level) + '}';
  }
  throw new SafekeepError(`python json.dumps: cannot encode a ${typeof v}`);
}

const SHORT_ESCAPES: Record<string, string> = { '"': '\\"', '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\b': '\\b', '\f': '\\f' };

/** json.encoder's ensure_ascii string form: everything outside ' '..'~' escaped, UTF-16 code units as \uxxxx. */
export function pyJsonString(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    const short = SHORT_ESCAPES[c];
    if (short) out += short;
    else {
      const u = s.charCodeAt(i);
      out += u >= 0x20 && u <= 0x7e ? c : '\\u' + u.toString(16).padStart(4, '0');
    }
  }
  return out + '"';
}

/** Throws unless every number token in the JSON text (outside strings) is an integer literal. */
export function assertIntegerNumbers(jsonText: string, where: string): void {
  let inString = false;
  for (let i = 0; i < jsonText.length; i++) {
    const c = jsonText[i]!;
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === '-' || (c >= '0' && c <= '9')) {
      let j = i;
      while (j < jsonText.length && /[-+0-9.eE]/.test(jsonText[j]!)) j++;
      const tok = jsonText.slice(i, j);
      if (!/^-?\d+$/.test(tok)) throw new SafekeepError(`${where}: number ${tok} is not an integer; Python's float formatting is not reproduced`);
      i = j - 1;
    }
  }
}
