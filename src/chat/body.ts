/**
 * The chat-completions request parser: one canonical request. What the guard judges must be what the upstream will
 * execute, so a body is parsed into a value of known fields — every field checked, every unknown or mis-spelt key
 * refused by name (400) — and the upstream receives the re-serialisation of that value, never the client's bytes.
 * A key the parser does not know would be a side door: an upstream that matches keys case-insensitively (Go's
 * `encoding/json`, as in Ollama's OpenAI layer) reads `"Tools"` or `"toolſ"` as `tools`, and a duplicate key
 * (`{"tools": [benign], "tools": [harmful]}`) means whatever the upstream's parser picks; re-serialising the parsed
 * value leaves one spelling of each field.
 *
 * - JSON nested at most 64 deep (`util/json-bounded.ts`), tool-call `arguments` strings too.
 * - Top level: the fields of KNOWN_FIELDS only. Text-bearing settings (`stop`, `user`, a JSON-schema
 *   `response_format`, a named `tool_choice`) are part of the request the judge is shown (`settings`).
 * - `messages`: a non-empty array; `role` exactly one of OpenAI's lower-case names; the message keys of
 *   MESSAGE_FIELDS only; `content` a string, null (assistant/tool only), or content parts (`text`, `refusal`; other
 *   kinds are listed in `nonTextParts`); assistant `tool_calls` `[{id, type: "function", function: {name,
 *   arguments}}]`; a tool message's `tool_call_id` a string.
 * - `tools`: `[{type: "function", function: {name, description, parameters, strict}}]` (nothing else under
 *   `function`: a chat template may print any key it is given); the legacy `functions` field is read too (its
 *   entries are tools the model may call, so they are judged the same way). At most MAX_TOOLS.
 * - `max_tokens` / `max_completion_tokens`: a positive integer when given; `stream` a boolean; `stream_options` an
 *   object whose only key `include_usage` is a boolean.
 */
import type { ToolSpec } from '../data/types.ts';
import type { ChatMessage } from '../prompts/tokenizer.ts';
import { SafekeepError } from '../util/errors.ts';
import { jsonDepth, MAX_JSON_DEPTH, parseJsonBounded } from '../util/json-bounded.ts';
import { JsonDuplicateKeyError, JsonNumber, parseJsonLossless, stringifyLossless, type LosslessValue } from '../util/json-lossless.ts';
import { badRequest } from '../http/errors.ts';

export const ROLES = ['system', 'developer', 'user', 'assistant', 'tool', 'function'] as const;

/**
 * The most tools (functions included) a request may offer: OpenAI's own bound. Every tool is flattened for the
 * judge and rendered by the template, so without a bound 20k tiny tools hold the event loop for seconds.
 */
export const MAX_TOOLS = 128;
/** OpenAI's bound on `stop` strings, and the longest one accepted */
export const MAX_STOP_STRINGS = 4;
export const MAX_STOP_CHARS = 128;

/** Top-level fields a request may carry (anything else is a 400 naming it). */
export const KNOWN_FIELDS = [
  'model', 'messages', 'tools', 'functions', 'tool_choice', 'function_call', 'parallel_tool_calls',
  'max_tokens', 'max_completion_tokens', 'stream', 'stream_options', 'temperature', 'top_p', 'n', 'seed', 'stop',
  'presence_penalty', 'frequency_penalty', 'logit_bias', 'logprobs', 'top_logprobs', 'user', 'response_format',
  'reasoning_effort', 'chat_template_kwargs',
  // vLLM's sampling extras in the body (its OpenAI server reads them there; the SDKs send them via extra_body)
  'top_k', 'min_p', 'repetition_penalty',
] as const;

/** Message fields (anything else is a 400 naming it). */
export const MESSAGE_FIELDS = ['role', 'content', 'name', 'tool_calls', 'tool_call_id', 'function_call', 'reasoning_content', 'refusal'] as const;

/** Fields an endpoint runs but the guard cannot judge: refused by name, with the reason. */
const REFUSED_FIELDS: Readonly<Record<string, string>> = {
  chat_template: 'a client-supplied chat template decides what the agent reads, and the guard cannot judge a template',
  documents: 'documents are rendered into the prompt by the server and the guard does not judge them; send them as message text',
  guided_json: 'guided decoding constraints are not judged; use response_format',
  guided_regex: 'guided decoding constraints are not judged', guided_grammar: 'guided decoding constraints are not judged',
  guided_choice: 'guided decoding constraints are not judged',
  // a per-request steering vector or ablation is a jailbreak tool: only the unguarded research server takes it
  safekeep: 'per-request steering, interventions and activation capture are accepted only by serve --model --allow-interventions (never by a guard)',
  // vllm-lens's fields (steering vectors, residual-stream capture, pickled Python hooks): the same jailbreak tool
  vllm_xargs: 'vllm-lens\'s steering vectors, activation capture and hooks are accepted only by serve --model --allow-interventions (never by a guard)',
  extra_body: 'extra_body is the SDK\'s name for fields to merge into the body; send them at the top level',
};

export interface ChatRequest {
  /** the canonical request: known fields only, checked; what an upstream receives, re-serialised */
  body: Record<string, unknown>;
  messages: ChatMessage[];
  /** `tools` plus the legacy `functions` as tools */
  tools: ToolSpec[];
  /** the request used the legacy `functions` field */
  legacyFunctions: boolean;
  /** `max_completion_tokens ?? max_tokens`, when given */
  maxTokens: number | undefined;
  stream: boolean;
  includeUsage: boolean;
  /** locations of content parts that are not text (images, audio, files): the judge cannot read them */
  nonTextParts: string[];
  /** the request's settings that carry client text besides messages and tools (shown to the judge) */
  settings: Record<string, unknown>;
  /**
   * the `safekeep` research field as sent (with `{ research: true }` only; never part of `body`, so never forwarded);
   * src/serve/research.ts checks it
   */
  research?: unknown;
  /** vllm-lens's `vllm_xargs` as sent (with `{ research: true }` only, never part of `body`); src/serve/vllm-lens.ts checks it */
  lens?: unknown;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const show = (v: unknown) => (typeof v === 'string' ? `'${v.slice(0, 40)}'` : JSON.stringify(v)?.slice(0, 40) ?? String(v));
const given = (v: unknown) => v !== undefined && v !== null;

/** a key as a case-insensitive, compatibility-folding parser might read it (`Tools`, `toolſ` → `tools`) */
const folded = (k: string) => k.normalize('NFKC').toLowerCase();

/** One 400 for a key that is not in `known`, naming the known field it could be read as. */
function checkKeys(o: Record<string, unknown>, known: readonly string[], at: string): void {
  for (const k of Object.keys(o)) {
    if (known.includes(k)) continue;
    const where = at ? `${at}.${k}` : `"${k}"`;
    const reason = at === '' ? REFUSED_FIELDS[k] : undefined;
    if (reason) throw badRequest(`${where}: not accepted: ${reason}`);
    const like = known.find((x) => folded(x) === folded(k));
    throw badRequest(`${where}: unknown field${like ? ` (the field is spelt "${like}")` : ''}; this server forwards only the fields it checks: ${known.join(', ')}`);
  }
}

function positiveInt(b: Record<string, unknown>, key: string): number | undefined {
  const v = b[key];
  if (!given(v)) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw badRequest(`"${key}" must be a positive integer, got ${show(v)}`);
  return v;
}

function checkNumber(b: Record<string, unknown>, key: string, integer = false): void {
  const v = b[key];
  if (!given(v)) return;
  if (typeof v !== 'number' || !Number.isFinite(v) || (integer && !Number.isInteger(v))) throw badRequest(`"${key}" must be ${integer ? 'an integer' : 'a finite number'}, got ${show(v)}`);
}

function checkBoolean(b: Record<string, unknown>, key: string, at = ''): void {
  const v = b[key];
  if (given(v) && typeof v !== 'boolean') throw badRequest(`${at ? `${at}.` : ''}"${key}" must be a boolean, got ${show(v)}`);
}

function checkString(o: Record<string, unknown>, key: string, at: string, max = 1 << 20): void {
  const v = o[key];
  if (given(v) && (typeof v !== 'string' || v.length > max)) throw badRequest(`${at}.${key} must be a string${max < 1 << 20 ? ` of at most ${max} characters` : ''}`);
}

function checkContent(m: Record<string, unknown>, at: string, nonText: string[]): void {
  const c = m.content;
  if (typeof c === 'string') return;
  if (c === null || c === undefined) {
    if (m.role === 'assistant' || m.role === 'tool' || m.role === 'function') return;
    throw badRequest(`${at}.content must be a string or an array of content parts`);
  }
  if (!Array.isArray(c)) throw badRequest(`${at}.content must be a string or an array of content parts`);
  c.forEach((p, j) => {
    const where = `${at}.content[${j}]`;
    if (!isObject(p) || typeof p.type !== 'string') throw badRequest(`${where} must be an object with a string "type"`);
    if (p.type === 'refusal' && m.role !== 'assistant') throw badRequest(`${where}: a refusal part belongs to an assistant message`);
    if (p.type === 'text' || p.type === 'refusal') {
      const key = p.type === 'text' ? 'text' : 'refusal';
      checkKeys(p, ['type', key], where);
      if (typeof p[key] !== 'string') throw badRequest(`${where}.${key} must be a string`);
    } else nonText.push(`${where} (${p.type.slice(0, 40)})`);
  });
}

function checkCallFunction(f: unknown, where: string): void {
  if (!isObject(f) || typeof f.name !== 'string') throw badRequest(`${where} must be {"name", "arguments"}`);
  checkKeys(f, ['name', 'arguments'], where);
  const a = f.arguments;
  if (typeof a === 'string') {
    const depth = jsonDepth(a);
    if (depth > MAX_JSON_DEPTH) throw badRequest(`${where}.arguments: JSON nested ${depth} levels deep (at most ${MAX_JSON_DEPTH})`);
    // the JSON inside is read (once) by canonicalArguments, which refuses a duplicate key
  } else if (a !== undefined && !isObject(a)) throw badRequest(`${where}.arguments must be a JSON string`);
}

function checkToolCalls(m: Record<string, unknown>, at: string): void {
  if (!given(m.tool_calls)) return;
  if (m.role !== 'assistant') throw badRequest(`${at}.tool_calls: only assistant messages carry tool calls`);
  if (!Array.isArray(m.tool_calls)) throw badRequest(`${at}.tool_calls must be an array`);
  m.tool_calls.forEach((c, j) => {
    const where = `${at}.tool_calls[${j}]`;
    if (!isObject(c) || !isObject(c.function) || typeof c.function.name !== 'string') throw badRequest(`${where} must be {"id", "type": "function", "function": {"name", "arguments"}}`);
    checkKeys(c, ['id', 'type', 'function'], where);
    if (c.type !== undefined && c.type !== 'function') throw badRequest(`${where}.type must be "function", got ${show(c.type)}`);
    if (c.id !== undefined && typeof c.id !== 'string') throw badRequest(`${where}.id must be a string`);
    checkCallFunction(c.function, `${where}.function`);
  });
}

function checkMessage(m: unknown, i: number, nonText: string[]): void {
  const at = `messages[${i}]`;
  if (!isObject(m) || typeof m.role !== 'string') throw badRequest(`${at} must be an object with a string "role"`);
  if (!(ROLES as readonly string[]).includes(m.role)) throw badRequest(`${at}.role: unknown role ${show(m.role)} (one of ${ROLES.join(', ')})`);
  checkKeys(m, MESSAGE_FIELDS, at);
  checkContent(m, at, nonText);
  checkToolCalls(m, at);
  if (m.role === 'tool' && typeof m.tool_call_id !== 'string') throw badRequest(`${at}: a tool message needs a string "tool_call_id"`);
  if (m.role !== 'tool' && given(m.tool_call_id)) throw badRequest(`${at}.tool_call_id: only tool messages answer a call`);
  if (m.role === 'function' && typeof m.name !== 'string') throw badRequest(`${at}: a function message needs a string "name"`);
  checkString(m, 'name', at, 256);
  for (const key of ['reasoning_content', 'refusal', 'function_call'] as const) {
    if (given(m[key]) && m.role !== 'assistant') throw badRequest(`${at}.${key}: only assistant messages carry it`);
  }
  checkString(m, 'reasoning_content', at);
  checkString(m, 'refusal', at);
  if (given(m.function_call)) checkCallFunction(m.function_call, `${at}.function_call`);
}

/** the parts of a tool's `function` object an endpoint reads (anything else a template may print unjudged) */
const FUNCTION_FIELDS = ['name', 'description', 'parameters', 'strict'] as const;

function checkFunction(f: unknown, at: string): ToolSpec['function'] {
  if (!isObject(f) || typeof f.name !== 'string' || f.name === '') throw badRequest(`${at} must be {"name", "description", "parameters"}`);
  checkKeys(f, FUNCTION_FIELDS, at);
  if (f.name.length > 256) throw badRequest(`${at}.name: at most 256 characters`);
  if (given(f.description) && typeof f.description !== 'string') throw badRequest(`${at}.description must be a string`);
  if (given(f.parameters) && !isObject(f.parameters)) throw badRequest(`${at}.parameters must be a JSON-schema object`);
  checkBoolean(f, 'strict', at);
  return f as unknown as ToolSpec['function'];
}

function checkTool(t: unknown, at: string): ToolSpec {
  if (!isObject(t) || t.type !== 'function' || !isObject(t.function)) throw badRequest(`${at} must be {"type": "function", "function": {"name", ...}}`);
  checkKeys(t, ['type', 'function'], at);
  checkFunction(t.function, `${at}.function`);
  return t as unknown as ToolSpec;
}

/** `stop`: a string or up to MAX_STOP_STRINGS of them, each 1..MAX_STOP_CHARS characters (absent or null: none). */
export function stopStrings(b: Record<string, unknown>): string[] {
  const v = b.stop;
  if (v === undefined || v === null) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list)) throw badRequest('"stop" must be a string or an array of strings');
  if (list.length > MAX_STOP_STRINGS) throw badRequest(`"stop": at most ${MAX_STOP_STRINGS} strings, got ${list.length}`);
  list.forEach((x, i) => {
    if (typeof x !== 'string' || x === '' || x.length > MAX_STOP_CHARS) throw badRequest(`"stop"[${i}] must be a string of 1 to ${MAX_STOP_CHARS} characters`);
  });
  return list as string[];
}

function checkToolChoice(b: Record<string, unknown>, names: readonly string[]): void {
  for (const [key, shape] of [['tool_choice', 'function'], ['function_call', 'legacy']] as const) {
    const v = b[key];
    if (!given(v)) continue;
    if (typeof v === 'string') {
      const ok = key === 'tool_choice' ? ['none', 'auto', 'required'] : ['none', 'auto'];
      if (!ok.includes(v)) throw badRequest(`"${key}" must be one of ${ok.join(', ')} or a named function, got ${show(v)}`);
      continue;
    }
    const fn = shape === 'function' && isObject(v) ? v.function : v;
    if (!isObject(v) || (shape === 'function' && v.type !== 'function') || !isObject(fn) || typeof fn.name !== 'string') {
      throw badRequest(`"${key}" must be ${shape === 'function' ? '{"type": "function", "function": {"name"}}' : '{"name"}'}`);
    }
    if (shape === 'function') checkKeys(v, ['type', 'function'], `"${key}"`);
    checkKeys(fn, ['name'], `"${key}"${shape === 'function' ? '.function' : ''}`);
    if (!names.includes(fn.name)) throw badRequest(`"${key}" names ${show(fn.name)}, which is not one of the request's tools`);
  }
}

function checkResponseFormat(b: Record<string, unknown>): void {
  const v = b.response_format;
  if (!given(v)) return;
  if (!isObject(v) || !['text', 'json_object', 'json_schema'].includes(v.type as string)) throw badRequest('"response_format" must be {"type": "text" | "json_object" | "json_schema", ...}');
  if (v.type !== 'json_schema') return checkKeys(v, ['type'], '"response_format"');
  checkKeys(v, ['type', 'json_schema'], '"response_format"');
  const s = v.json_schema;
  if (!isObject(s) || typeof s.name !== 'string') throw badRequest('"response_format".json_schema must be {"name", "schema", ...}');
  checkKeys(s, ['name', 'description', 'schema', 'strict'], '"response_format".json_schema');
  checkString(s, 'description', '"response_format".json_schema');
  if (given(s.schema) && !isObject(s.schema)) throw badRequest('"response_format".json_schema.schema must be a JSON-schema object');
  checkBoolean(s, 'strict', '"response_format".json_schema');
}

/** template switches such as `enable_thinking`: identifiers to booleans or numbers (a string value would be unjudged text) */
function checkTemplateKwargs(b: Record<string, unknown>): void {
  const v = b.chat_template_kwargs;
  if (!given(v)) return;
  if (!isObject(v)) throw badRequest('"chat_template_kwargs" must be an object');
  for (const [k, x] of Object.entries(v)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(k)) throw badRequest(`"chat_template_kwargs": ${show(k)} is not an identifier`);
    if (typeof x !== 'boolean' && !(typeof x === 'number' && Number.isFinite(x)) && x !== null) {
      throw badRequest(`"chat_template_kwargs".${k}: only booleans and numbers are accepted (text passed to the template would reach the agent unjudged)`);
    }
  }
}

function checkSettings(b: Record<string, unknown>, toolNames: readonly string[]): void {
  if (b.model !== undefined && (typeof b.model !== 'string' || !/^[A-Za-z0-9._:/@+-]{0,256}$/.test(b.model))) {
    throw badRequest('"model" must be a model name (at most 256 letters, digits and . _ : / @ + -)');
  }
  for (const k of ['temperature', 'top_p', 'presence_penalty', 'frequency_penalty', 'min_p', 'repetition_penalty']) checkNumber(b, k);
  for (const k of ['n', 'seed', 'top_logprobs', 'top_k']) checkNumber(b, k, true);
  for (const k of ['stream', 'logprobs', 'parallel_tool_calls']) checkBoolean(b, k);
  if (given(b.logit_bias)) {
    if (!isObject(b.logit_bias)) throw badRequest('"logit_bias" must be an object of token ids to numbers');
    for (const [k, x] of Object.entries(b.logit_bias)) {
      if (!/^\d{1,9}$/.test(k) || typeof x !== 'number' || !Number.isFinite(x)) throw badRequest(`"logit_bias": ${show(k)} must be a token id mapped to a number`);
    }
  }
  if (given(b.user) && (typeof b.user !== 'string' || b.user.length > 256)) throw badRequest('"user" must be a string of at most 256 characters');
  if (given(b.reasoning_effort) && !['minimal', 'low', 'medium', 'high'].includes(b.reasoning_effort as string)) throw badRequest(`"reasoning_effort" must be minimal, low, medium or high, got ${show(b.reasoning_effort)}`);
  if (given(b.stream_options)) {
    if (!isObject(b.stream_options)) throw badRequest('"stream_options" must be an object');
    checkKeys(b.stream_options, ['include_usage'], '"stream_options"');
    const u = b.stream_options.include_usage;
    if (u !== undefined && typeof u !== 'boolean') throw badRequest('"stream_options.include_usage" must be a boolean');
  }
  stopStrings(b);
  checkToolChoice(b, toolNames);
  checkResponseFormat(b);
  checkTemplateKwargs(b);
}

/**
 * The settings that carry client text besides messages and tools (what the judge is shown of them). The model name
 * is one: it never enters a prompt, but it is a string the upstream receives, and the rule has no exceptions.
 */
function textSettings(b: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of ['model', 'stop', 'user', 'tool_choice', 'function_call', 'response_format'] as const) {
    const v = b[k];
    if (!given(v)) continue;
    if ((k === 'tool_choice' || k === 'function_call') && typeof v === 'string') continue;
    if (k === 'response_format' && isObject(v) && v.type !== 'json_schema') continue;
    out[k] = v;
  }
  return out;
}

/**
 * `research`: the caller is `serve --model --allow-interventions` and accepts the `safekeep` and `vllm_xargs` fields; every other
 * caller (the proxies, a guarded local server) refuses it by name.
 */
export function parseChatRequest(raw: Buffer | string, opts: { research?: boolean } = {}): ChatRequest {
  let parsed: unknown;
  try {
    parsed = parseJsonBounded(typeof raw === 'string' ? raw : raw.toString('utf8'), 'request body');
  } catch (e) {
    if (e instanceof SafekeepError) throw badRequest(e.message);
    throw e;
  }
  if (!isObject(parsed)) throw badRequest('request body must be a JSON object');
  const b = parsed;
  checkKeys(b, opts.research ? [...KNOWN_FIELDS, 'safekeep', 'vllm_xargs'] : KNOWN_FIELDS, '');
  if (!Array.isArray(b.messages) || b.messages.length === 0) throw badRequest('"messages" must be a non-empty array');
  if (given(b.tools) && !Array.isArray(b.tools)) throw badRequest('"tools" must be an array');
  if (given(b.functions) && !Array.isArray(b.functions)) throw badRequest('"functions" must be an array');
  const toolCount = ((b.tools ?? []) as unknown[]).length + ((b.functions ?? []) as unknown[]).length;
  if (toolCount > MAX_TOOLS) throw badRequest(`"tools": at most ${MAX_TOOLS} tools (functions included), got ${toolCount}`);
  const nonTextParts: string[] = [];
  b.messages.forEach((m, i) => checkMessage(m, i, nonTextParts));
  const tools = ((b.tools ?? []) as unknown[]).map((t, i) => checkTool(t, `tools[${i}]`));
  const functions = ((b.functions ?? []) as unknown[]).map((f, i) => ({ type: 'function' as const, function: checkFunction(f, `functions[${i}]`) }));
  const maxCompletion = positiveInt(b, 'max_completion_tokens');
  const maxTokensField = positiveInt(b, 'max_tokens');
  checkSettings(b, [...tools, ...functions].map((t) => t.function.name));
  // the canonical value: the fields as parsed, null ones dropped (one spelling each, in a fixed order)
  const body: Record<string, unknown> = {};
  for (const k of KNOWN_FIELDS) if (given(b[k])) body[k] = b[k];
  const messages = canonicalCallIds(canonicalArguments(b.messages as ChatMessage[]));
  body.messages = messages;
  return {
    body,
    messages,
    tools: [...tools, ...functions],
    legacyFunctions: functions.length > 0,
    maxTokens: maxCompletion ?? maxTokensField,
    stream: b.stream === true,
    includeUsage: isObject(b.stream_options) && b.stream_options.include_usage === true,
    nonTextParts,
    settings: textSettings(body),
    ...(opts.research && given(b.safekeep) ? { research: b.safekeep } : {}),
    ...(opts.research && given(b.vllm_xargs) ? { lens: b.vllm_xargs } : {}),
  };
}

/**
 * The history with every tool-call id replaced by `call` + 5 digits, in order of first appearance, consistently
 * between an assistant's `tool_calls` and the `tool_call_id` of the results. Ids only pair calls with results, yet
 * templates print them (Mistral's does): an id the client chose would be prompt text the judge is not shown. Nine
 * alphanumeric characters, as Mistral's template requires.
 */
export function canonicalCallIds(messages: readonly ChatMessage[]): ChatMessage[] {
  const ids = new Map<string, string>();
  let made = 0;
  const next = () => `call${String(made++).padStart(5, '0')}`;
  // a call without an id pairs with no result: it gets an id of its own, which no client string can name
  const idOf = (id: unknown): string => {
    if (typeof id !== 'string') return next();
    let v = ids.get(id);
    if (v === undefined) ids.set(id, (v = next()));
    return v;
  };
  return messages.map((m) => {
    if (m.role === 'assistant' && Array.isArray(m.tool_calls)) {
      return { ...m, tool_calls: (m.tool_calls as Record<string, unknown>[]).map((c) => ({ ...c, id: idOf(c.id), type: 'function' })) };
    }
    if (m.role === 'tool') return { ...m, tool_call_id: idOf(m.tool_call_id) };
    return m;
  });
}

/**
 * A call's `arguments` string as the judge reads it: JSON text that is one object becomes its compact
 * re-serialisation (numbers keep the digits the client wrote), so the upstream's template prints exactly what the
 * judge was shown. A duplicate key at any depth is a 400 naming `where` (the judge would read one value and a
 * template print the other). Text that is not a JSON object stays the opaque string it is, shown as written.
 */
export function canonicalArgumentText(a: string, where = 'arguments'): string {
  let v: LosslessValue;
  try {
    v = parseJsonLossless(a, where);
  } catch (e) {
    if (e instanceof JsonDuplicateKeyError) throw badRequest(e.message);
    return a;
  }
  return v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof JsonNumber) ? stringifyLossless(v) : a;
}

const canonicalFunction = (f: unknown, where: string): unknown => {
  if (!isObject(f) || typeof f.arguments !== 'string') return f;
  return { ...f, arguments: canonicalArgumentText(f.arguments, `${where}.arguments`) };
};

/** Every tool call's and legacy function call's `arguments` in its canonical form (`canonicalArgumentText`). */
export function canonicalArguments(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.map((m, i) => {
    if (m.role !== 'assistant') return m;
    const out: ChatMessage = { ...m };
    if (Array.isArray(m.tool_calls)) out.tool_calls = (m.tool_calls as Record<string, unknown>[]).map((c, j) => ({ ...c, function: canonicalFunction(c.function, `messages[${i}].tool_calls[${j}].function`) }));
    if (isObject(m.function_call)) out.function_call = canonicalFunction(m.function_call, `messages[${i}].function_call`);
    return out;
  });
}

/** The canonical request's bytes: what an upstream receives. */
export function canonicalBytes(body: Record<string, unknown>): Buffer {
  return Buffer.from(JSON.stringify(body));
}
