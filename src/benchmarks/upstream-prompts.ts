/**
 * Where a benchmark's own prompt text is read from, so that what we send is the benchmark's bytes and nothing of it
 * is committed here. Two kinds of source, tried in a fixed order by each benchmark:
 *
 * - `upstream-prompts.json` in the data folder: the prompts as data, one string per upstream constant name (the
 *   shared data folders carry one, with a SOURCE.md naming the code it was taken from);
 * - the benchmark's own Python file in its upstream repository layout (a user's own copy of the benchmark), read as
 *   text by py-source.ts and never executed.
 *
 * The first source that exists is used; when none does, one error lists every place looked in.
 */
import { existsSync, statSync } from 'node:fs';
import { extname } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { isRecord, readJsonFile } from '../data/jsonfile.ts';
import { readPyConstant } from './py-source.ts';

/** The data file's name, in every benchmark's data folder that carries one. */
export const UPSTREAM_PROMPTS_JSON = 'upstream-prompts.json';

/** One place a prompt source may be, and what it is (for the error that lists them). */
export interface PromptSourceCandidate {
  file: string;
  /** e.g. "the prompts as data", "InjecAgent's repository layout" */
  what: string;
}

/** The first candidate file that exists, or one error naming `need` and every place looked in. */
export function firstPromptSource(candidates: readonly PromptSourceCandidate[], need: string): string {
  const found = candidates.find((c) => existsSync(c.file) && statSync(c.file).isFile());
  if (found) return found.file;
  throw new SafekeepError(`${need} not found: looked for ${candidates.map((c) => `${c.file} (${c.what})`).join(', ')}`);
}

/**
 * The string constants `names` of a prompt source: the keys of an upstream-prompts.json, or the top-level
 * `NAME = """..."""` assignments of a .py file. A missing or non-string constant is an error naming the file.
 */
export function readPromptConstants(file: string, names: readonly string[]): Record<string, string> {
  const ext = extname(file).toLowerCase();
  if (ext === '.py') return Object.fromEntries(names.map((n) => [n, readPyConstant(file, n)]));
  if (ext !== '.json') throw new SafekeepError(`${file}: a prompt source is an ${UPSTREAM_PROMPTS_JSON} or the benchmark's .py file`);
  const data = readJsonFile(file);
  if (!isRecord(data)) throw new SafekeepError(`${file}: expected a JSON object of prompt strings`);
  const out: Record<string, string> = {};
  for (const n of names) {
    const v = data[n];
    if (typeof v !== 'string') throw new SafekeepError(`${file}: no string "${n}"`);
    out[n] = v;
  }
  return out;
}
