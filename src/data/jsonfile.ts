/**
 * Reading JSON / JSONL data files with errors that name the file and the place (line:column or row),
 * and canonical JSON (sorted keys) for content hashes (util/hash.ts).
 */
import { readFileSync } from 'node:fs';
import { SafekeepError } from '../util/errors.ts';

/** 1-based line and column of a character offset. */
function lineColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lastBreak = -1;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (text.charCodeAt(i) === 10) { line++; lastBreak = i; }
  }
  return { line, column: offset - lastBreak };
}

function readText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? 'read error';
    throw new SafekeepError(`${file}: cannot read (${code})`);
  }
}

/**
 * Offset of the first JSON syntax error in `text` (a small scanner: V8 does not always report a position),
 * or -1 when the text is valid JSON.
 */
export function jsonErrorOffset(text: string): number {
  let i = 0;
  const ws = (): void => {
    while (i < text.length && ' \t\n\r'.includes(text[i]!)) i++;
  };
  const fail = (): never => {
    throw i;
  };
  const str = (): void => {
    if (text[i] !== '"') fail();
    i++;
    while (i < text.length && text[i] !== '"') {
      const c = text.charCodeAt(i);
      if (c < 0x20) fail();
      if (text[i] === '\\') {
        const n = text[i + 1] ?? '';
        if (n === 'u') {
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) { i++; fail(); }
          i += 6;
          continue;
        }
        if (!'"\\/bfnrt'.includes(n) || n === '') { i++; fail(); }
        i += 2;
        continue;
      }
      i++;
    }
    if (text[i] !== '"') fail();
    i++;
  };
  const value = (): void => {
    ws();
    const c = text[i];
    if (c === '{') {
      i++; ws();
      if (text[i] === '}') { i++; return; }
      for (;;) {
        ws(); str(); ws();
        if (text[i] !== ':') fail();
        i++; value(); ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === '}') { i++; return; }
        fail();
      }
    }
    if (c === '[') {
      i++; ws();
      if (text[i] === ']') { i++; return; }
      for (;;) {
        value(); ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === ']') { i++; return; }
        fail();
      }
    }
    if (c === '"') return str();
    const m = /^(?:true|false|null|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?)/.exec(text.slice(i, i + 400));
    if (!m) fail();
    i += m![0].length;
  };
  try {
    value();
    ws();
    return i === text.length ? -1 : i;
  } catch (e) {
    if (typeof e === 'number') return e;
    throw e;
  }
}

/** Parses JSON text; a syntax error becomes `file:line:col: invalid JSON (...)`. */
function parseJsonText(text: string, where: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    const msg = (e as Error).message.replace(/\s+/g, ' ').slice(0, 160);
    const at = jsonErrorOffset(text);
    if (at >= 0) {
      const { line, column } = lineColumn(text, at);
      throw new SafekeepError(`${where}:${line}:${column}: invalid JSON (${msg})`);
    }
    throw new SafekeepError(`${where}: invalid JSON (${msg})`);
  }
}

export function readJsonFile(file: string): unknown {
  return parseJsonText(readText(file), file);
}

/** One parsed JSONL row with its 1-based line number (blank lines are skipped). */
interface JsonlRow {
  line: number;
  value: unknown;
}

export function readJsonlFile(file: string): JsonlRow[] {
  const rows: JsonlRow[] = [];
  const lines = readText(file).split('\n');
  for (let i = 0; i < lines.length; i++) {
    const text = lines[i]!.trim();
    if (!text) continue;
    rows.push({ line: i + 1, value: parseJsonText(text, `${file}:${i + 1}`) });
  }
  return rows;
}

/** JSON with object keys sorted recursively (arrays keep their order): equal data ⇒ equal text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
