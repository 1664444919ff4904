/**
 * Reading JSON / JSONL data files with errors that name the file and the place (line:column or row),
 * and canonical JSON (sorted keys) for content hashes.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { SafekeepError } from '../util/errors.ts';

/** 1-based line and column of a character offset. */
export function lineColumn(text: string, offset: number): { line: number; column: number } {
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

/** Parses JSON text; a syntax error becomes `file:line:col: invalid JSON (...)`. */
export function parseJsonText(text: string, where: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    const msg = (e as Error).message;
    const m = /position (\d+)/.exec(msg);
    if (m) {
      const { line, column } = lineColumn(text, Number(m[1]));
      throw new SafekeepError(`${where}:${line}:${column}: invalid JSON (${msg})`);
    }
    throw new SafekeepError(`${where}: invalid JSON (${msg})`);
  }
}

export function readJsonFile(file: string): unknown {
  return parseJsonText(readText(file), file);
}

/** One parsed JSONL row with its 1-based line number (blank lines are skipped). */
export interface JsonlRow {
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

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
