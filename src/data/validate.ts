/**
 * Validation of tool specs and pairs. Every problem is a SafekeepError naming the place (`where`: file + row/item)
 * and what is wrong, so a bad row in a 500-row file is found in seconds.
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import { SafekeepError } from '../util/errors.ts';
import { canonicalJson, isRecord } from './jsonfile.ts';
import type { JsonSchema, Pair, Request, ToolSpec } from './types.ts';

/** OpenAI's rule for function names. */
const TOOL_NAME_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

let ajv: Ajv2020 | null = null;
function metaValidator(): Ajv2020 {
  ajv ??= new Ajv2020({ strict: false, allErrors: false, validateFormats: false, logger: false });
  return ajv;
}

function fail(where: string, what: string): never {
  throw new SafekeepError(`${where}: ${what}`);
}

/** Structural checks the meta-schema does not make: `required` names must be declared properties. */
function checkRequired(schema: unknown, path: string, where: string): void {
  if (!isRecord(schema)) return;
  const props = schema.properties;
  if (Array.isArray(schema.required) && isRecord(props)) {
    for (const r of schema.required) {
      if (typeof r === 'string' && !(r in props)) fail(where, `${path}.required names '${r}', which is not in ${path}.properties`);
    }
  }
  if (isRecord(props)) for (const [k, v] of Object.entries(props)) checkRequired(v, `${path}.properties.${k}`, where);
  if (isRecord(schema.items)) checkRequired(schema.items, `${path}.items`, where);
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const) {
    const list = schema[key];
    if (Array.isArray(list)) list.forEach((s, i) => checkRequired(s, `${path}.${key}[${i}]`, where));
  }
  for (const key of ['$defs', 'definitions'] as const) {
    const defs = schema[key];
    if (isRecord(defs)) for (const [k, v] of Object.entries(defs)) checkRequired(v, `${path}.${key}.${k}`, where);
  }
}

/** Validates an OpenAI function spec; returns it typed. */
export function validateToolSpec(value: unknown, where: string): ToolSpec {
  if (!isRecord(value)) fail(where, 'tool spec must be an object {"type":"function","function":{...}}');
  if (value.type !== 'function') fail(where, `tool spec needs "type": "function" (got ${JSON.stringify(value.type)})`);
  const fn = value.function;
  if (!isRecord(fn)) fail(where, 'tool spec is missing the "function" object');
  const name = fn.name;
  if (typeof name !== 'string' || !TOOL_NAME_PATTERN.test(name)) {
    fail(where, `tool name ${JSON.stringify(name)} is not a valid function name (letters, digits, _ and -, at most 64)`);
  }
  const w = `${where} (tool '${name}')`;
  if (typeof fn.description !== 'string') fail(w, 'function.description must be a string');
  const params = fn.parameters;
  if (!isRecord(params)) fail(w, 'function.parameters must be a JSON Schema object');
  if (params.type !== 'object') fail(w, `function.parameters.type must be "object" (got ${JSON.stringify(params.type)})`);
  const key = canonicalJson(params);
  if (!validParameters.has(key)) {
    checkParameters(params, w);
    validParameters.add(key);
  }
  return { type: 'function', function: { name, description: fn.description, parameters: params as JsonSchema } };
}

/** Parameter schemas already validated (by canonical JSON): tools repeat across pairs, compiling is not free. */
const validParameters = new Set<string>();

function checkParameters(params: Record<string, unknown>, w: string): void {
  const v = metaValidator();
  if (!v.validateSchema(params)) {
    const e = v.errors?.[0];
    fail(w, `function.parameters is not a valid JSON Schema: ${e?.instancePath || '/'} ${e?.message ?? ''}`.trim());
  }
  // the meta-schema does not see dangling references ($ref to a missing $defs entry): compiling does
  // (only schemas with a $ref need it; compiling costs milliseconds)
  if (JSON.stringify(params).includes('"$ref"')) {
    try {
      v.compile(params);
    } catch (e) {
      fail(w, `function.parameters is not a usable JSON Schema: ${(e as Error).message}`);
    } finally {
      v.removeSchema(params);
    }
  }
  checkRequired(params, 'parameters', w);
}

function validateRequest(value: unknown, where: string, toolNames: Set<string>): Request {
  if (!isRecord(value)) fail(where, 'must be an object {"prompt", "targetFunctions"}');
  if (typeof value.prompt !== 'string' || !value.prompt.trim()) fail(where, 'missing or empty "prompt"');
  const tf = value.targetFunctions;
  if (!Array.isArray(tf) || tf.length === 0) fail(where, 'missing "targetFunctions" (a non-empty list of tool names)');
  for (const f of tf) {
    if (typeof f !== 'string') fail(where, `targetFunctions entries must be strings (got ${JSON.stringify(f)})`);
    if (!toolNames.has(f)) fail(where, `target function '${f}' is not one of the pair's tools (${[...toolNames].join(', ')})`);
  }
  return { prompt: value.prompt, targetFunctions: [...(tf as string[])] };
}

/**
 * Validates one pair object whose tools are already resolved to specs (or raw objects).
 * `where` names the file and row, e.g. `data/pairs/fraud.json: scenario 2 (fraud-invoices), pair 1`.
 */
export function validatePair(value: unknown, where: string): Pair {
  if (!isRecord(value)) fail(where, 'pair must be an object');
  const id = value.id;
  if (typeof id !== 'string' || !id) fail(where, 'missing "id"');
  const w = `${where} (id '${id}')`;
  if (typeof value.category !== 'string' || !value.category) fail(w, 'missing "category"');
  if (!Array.isArray(value.tools) || value.tools.length === 0) fail(w, 'missing "tools" (a non-empty list of tool specs)');
  const tools = value.tools.map((t, i) => validateToolSpec(t, `${w}, tools[${i}]`));
  const names = new Set<string>();
  for (const t of tools) {
    if (names.has(t.function.name)) fail(w, `tool '${t.function.name}' appears twice`);
    names.add(t.function.name);
  }
  if (value.harmful === undefined) fail(w, 'missing "harmful"');
  if (value.benign === undefined) fail(w, 'missing "benign"');
  const harmful = validateRequest(value.harmful, `${w}, harmful`, names);
  const benign = validateRequest(value.benign, `${w}, benign`, names);
  if (harmful.prompt.trim() === benign.prompt.trim()) fail(w, 'harmful and benign prompts are identical');
  if (value.group !== undefined && typeof value.group !== 'string') fail(w, '"group" must be a string');
  const pair: Pair = { id, category: value.category, tools, harmful, benign };
  if (typeof value.group === 'string') pair.group = value.group;
  return pair;
}

/** Set-level checks: unique ids (each pair's origin is named in the error). */
export function checkUniqueIds(pairs: readonly Pair[], origins: readonly string[]): void {
  const seen = new Map<string, string>();
  pairs.forEach((p, i) => {
    const prev = seen.get(p.id);
    if (prev !== undefined) throw new SafekeepError(`${origins[i]}: duplicate pair id '${p.id}' (first defined at ${prev})`);
    seen.set(p.id, origins[i]!);
  });
}
