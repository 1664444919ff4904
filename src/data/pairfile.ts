/**
 * Pair files: the bundled scenario format and flat pair lists, from a file or a folder.
 *
 * Scenario format (data/pairs/<category>.json):
 *   { "category": "fraud", "scenarios": [ { "id": "fraud-invoice", "tools": ["send_email", {inline spec}],
 *     "pairs": [ { "harmful": {"prompt", "targetFunctions"}, "benign": {...} }, ... ] } ] }
 *   Pair ids default to `<scenario id>-<k>` (k = 1, 2, ...); a pair may set `id`, `category` or `group` (default: the
 *   scenario id, so pairs with the same tools never straddle the extraction/evaluation split).
 * Flat format: a JSON array of pairs, `{"pairs": [...]}`, or JSONL with one pair per line
 *   (`{"id", "category", "tools", "harmful", "benign"}`).
 * Tools given as a string are looked up by name in `tools.json` of the same folder (the tool library:
 *   `{"tools": [spec, ...]}` or a plain array), so common tools are written once.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { isRecord, readJsonFile, readJsonlFile } from './jsonfile.ts';
import type { Pair, ToolSpec } from './types.ts';
import { checkUniqueIds, validatePair, validateToolSpec } from './validate.ts';

const TOOL_LIBRARY_FILE = 'tools.json';

interface LoadedPairs {
  pairs: Pair[];
  /** where each pair was defined (file + row), parallel to `pairs` */
  origins: string[];
}

/** Tool library of a folder (empty when there is no tools.json). */
function readToolLibrary(dir: string): Map<string, ToolSpec> {
  const file = join(dir, TOOL_LIBRARY_FILE);
  const lib = new Map<string, ToolSpec>();
  if (!existsSync(file)) return lib;
  const raw = readJsonFile(file);
  const list = Array.isArray(raw) ? raw : isRecord(raw) ? raw.tools : undefined;
  if (!Array.isArray(list)) throw new SafekeepError(`${file}: expected {"tools": [...]} or a list of tool specs`);
  list.forEach((t, i) => {
    const spec = validateToolSpec(t, `${file}: tools[${i}]`);
    if (lib.has(spec.function.name)) throw new SafekeepError(`${file}: tools[${i}]: tool '${spec.function.name}' is defined twice`);
    lib.set(spec.function.name, spec);
  });
  return lib;
}

function resolveTools(value: unknown, lib: Map<string, ToolSpec>, where: string, libFile: string): unknown {
  if (!Array.isArray(value)) return value; // validatePair reports it
  return value.map((t, i) => {
    if (typeof t !== 'string') return t;
    const spec = lib.get(t);
    if (!spec) throw new SafekeepError(`${where}: tools[${i}] refers to '${t}', which is not defined in ${libFile}`);
    return spec;
  });
}

function scenarioFile(file: string, doc: Record<string, unknown>, lib: Map<string, ToolSpec>, libFile: string): LoadedPairs {
  const out: LoadedPairs = { pairs: [], origins: [] };
  const scenarios = doc.scenarios;
  if (!Array.isArray(scenarios)) throw new SafekeepError(`${file}: "scenarios" must be a list`);
  const fileCategory = doc.category;
  scenarios.forEach((sc, si) => {
    const sw = `${file}: scenario ${si + 1}`;
    if (!isRecord(sc)) throw new SafekeepError(`${sw}: must be an object`);
    if (typeof sc.id !== 'string' || !sc.id) throw new SafekeepError(`${sw}: missing "id"`);
    const w = `${file}: scenario ${si + 1} ('${sc.id}')`;
    if (!Array.isArray(sc.pairs) || sc.pairs.length === 0) throw new SafekeepError(`${w}: missing "pairs" (a non-empty list)`);
    const tools = resolveTools(sc.tools, lib, w, libFile);
    sc.pairs.forEach((p, pi) => {
      const pw = `${w}, pair ${pi + 1}`;
      if (!isRecord(p)) throw new SafekeepError(`${pw}: must be an object`);
      const pair = validatePair(
        {
          id: p.id ?? `${sc.id}-${pi + 1}`,
          category: p.category ?? sc.category ?? fileCategory,
          tools,
          harmful: p.harmful,
          benign: p.benign,
          // a scenario's pairs share its tools: they stay on one side of the split and resample together
          group: p.group ?? sc.id,
        },
        pw,
      );
      out.pairs.push(pair);
      out.origins.push(pw);
    });
  });
  return out;
}

function flatRows(rows: { where: string; value: unknown }[], lib: Map<string, ToolSpec>, libFile: string): LoadedPairs {
  const out: LoadedPairs = { pairs: [], origins: [] };
  for (const { where, value } of rows) {
    const v = isRecord(value) ? { ...value, tools: resolveTools(value.tools, lib, where, libFile) } : value;
    out.pairs.push(validatePair(v, where));
    out.origins.push(where);
  }
  return out;
}

/** Reads one pair file (.json or .jsonl); `lib` resolves tool names. */
function readPairFile(file: string, lib: Map<string, ToolSpec> = readToolLibrary(dirname(file))): LoadedPairs {
  const libFile = join(dirname(file), TOOL_LIBRARY_FILE);
  if (file.endsWith('.jsonl')) {
    return flatRows(readJsonlFile(file).map((r) => ({ where: `${file}:${r.line}`, value: r.value })), lib, libFile);
  }
  const doc = readJsonFile(file);
  if (isRecord(doc) && 'scenarios' in doc) return scenarioFile(file, doc, lib, libFile);
  const list = Array.isArray(doc) ? doc : isRecord(doc) ? doc.pairs : undefined;
  if (!Array.isArray(list)) {
    throw new SafekeepError(`${file}: not a pair file (expected {"scenarios": [...]}, {"pairs": [...]} or a list of pairs)`);
  }
  return flatRows(list.map((value, i) => ({ where: `${file}: pair ${i + 1}`, value })), lib, libFile);
}

/** Pair files of a folder: every *.json / *.jsonl except the tool library, in name order. */
function pairFilesIn(dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => (f.endsWith('.json') || f.endsWith('.jsonl')) && f !== TOOL_LIBRARY_FILE)
    .sort()
    .map((f) => join(dir, f));
}

/** Reads a pair file or folder, with set-level checks (unique ids). */
export function readPairs(path: string): LoadedPairs {
  let files: string[];
  let lib: Map<string, ToolSpec>;
  if (statSync(path).isDirectory()) {
    files = pairFilesIn(path);
    if (files.length === 0) throw new SafekeepError(`${path}: folder has no pair files (*.json, *.jsonl)`);
    lib = readToolLibrary(path);
  } else {
    if (basename(path) === TOOL_LIBRARY_FILE) throw new SafekeepError(`${path}: this is a tool library, not a pair file`);
    files = [path];
    lib = readToolLibrary(dirname(path));
  }
  const all: LoadedPairs = { pairs: [], origins: [] };
  for (const f of files) {
    const r = readPairFile(f, lib);
    all.pairs.push(...r.pairs);
    all.origins.push(...r.origins);
  }
  checkUniqueIds(all.pairs, all.origins);
  return all;
}
