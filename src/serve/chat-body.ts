/**
 * The chat-completions request parser: what the guard judges must be what the upstream will execute, so a body the
 * guard cannot read exactly is refused (400) rather than passed on half-understood.
 *
 * - JSON nested at most 64 deep (`util/json-bounded.ts`), tool-call `arguments` strings too.
 * - `messages`: a non-empty array; `role` exactly one of OpenAI's lower-case names (a `"User"` that one server
 *   reads as a user and the judge would skip is refused); `content` a string, null (assistant/tool only), or text
 *   parts; assistant `tool_calls` `[{id, type: "function", function: {name, arguments}}]`; a tool message's
 *   `tool_call_id` a string.
 * - `tools`: `[{type: "function", function: {name, ...}}]`; the legacy `functions` field is read too (its entries
 *   are tools the model may call, so they are judged the same way).
 * - `max_tokens` / `max_completion_tokens`: a positive integer when given; `stream` a boolean; `stream_options` an
 *   object whose `include_usage` is a boolean.
 */
import type { ToolSpec } from '../data/types.ts';
import type { ChatMessage } from '../prompts/tokenizer.ts';
import { SafekeepError } from '../util/errors.ts';
import { jsonDepth, MAX_JSON_DEPTH, parseJsonBounded } from '../util/json-bounded.ts';
import { badRequest } from './errors.ts';

export const ROLES = ['system', 'developer', 'user', 'assistant', 'tool', 'function'] as const;

export interface ChatRequest {
  /** the parsed body, every field the client sent */
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
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const show = (v: unknown) => (typeof v === 'string' ? `'${v.slice(0, 40)}'` : JSON.stringify(v)?.slice(0, 40) ?? String(v));

function positiveInt(b: Record<string, unknown>, key: string): number | undefined {
  const v = b[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw badRequest(`"${key}" must be a positive integer, got ${show(v)}`);
  return v;
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
    if (!isObject(p) || typeof p.type !== 'string') throw badRequest(`${at}.content[${j}] must be an object with a string "type"`);
    if (p.type === 'refusal' && m.role !== 'assistant') throw badRequest(`${at}.content[${j}]: a refusal part belongs to an assistant message`);
    if (p.type === 'text' || p.type === 'refusal') {
      const key = p.type === 'text' ? 'text' : 'refusal';
      if (typeof p[key] !== 'string') throw badRequest(`${at}.content[${j}].${key} must be a string`);
    } else nonText.push(`${at}.content[${j}] (${p.type.slice(0, 40)})`);
  });
}

function checkToolCalls(m: Record<string, unknown>, at: string): void {
  if (m.tool_calls === undefined || m.tool_calls === null) return;
  if (m.role !== 'assistant') throw badRequest(`${at}.tool_calls: only assistant messages carry tool calls`);
  if (!Array.isArray(m.tool_calls)) throw badRequest(`${at}.tool_calls must be an array`);
  m.tool_calls.forEach((c, j) => {
    const where = `${at}.tool_calls[${j}]`;
    if (!isObject(c) || !isObject(c.function) || typeof c.function.name !== 'string') throw badRequest(`${where} must be {"id", "type": "function", "function": {"name", "arguments"}}`);
    if (c.type !== undefined && c.type !== 'function') throw badRequest(`${where}.type must be "function", got ${show(c.type)}`);
    if (c.id !== undefined && typeof c.id !== 'string') throw badRequest(`${where}.id must be a string`);
    const a = c.function.arguments;
    if (typeof a === 'string') {
      const depth = jsonDepth(a);
      if (depth > MAX_JSON_DEPTH) throw badRequest(`${where}.function.arguments: JSON nested ${depth} levels deep (at most ${MAX_JSON_DEPTH})`);
    } else if (a !== undefined && !isObject(a)) throw badRequest(`${where}.function.arguments must be a JSON string`);
  });
}

function checkMessage(m: unknown, i: number, nonText: string[]): void {
  const at = `messages[${i}]`;
  if (!isObject(m) || typeof m.role !== 'string') throw badRequest(`${at} must be an object with a string "role"`);
  if (!(ROLES as readonly string[]).includes(m.role)) throw badRequest(`${at}.role: unknown role ${show(m.role)} (one of ${ROLES.join(', ')})`);
  checkContent(m, at, nonText);
  checkToolCalls(m, at);
  if (m.role === 'tool' && typeof m.tool_call_id !== 'string') throw badRequest(`${at}: a tool message needs a string "tool_call_id"`);
  if (m.role === 'function' && typeof m.name !== 'string') throw badRequest(`${at}: a function message needs a string "name"`);
  if (m.name !== undefined && typeof m.name !== 'string') throw badRequest(`${at}.name must be a string`);
}

function checkTool(t: unknown, at: string): ToolSpec {
  if (!isObject(t) || t.type !== 'function' || !isObject(t.function) || typeof t.function.name !== 'string' || t.function.name === '') {
    throw badRequest(`${at} must be {"type": "function", "function": {"name", ...}}`);
  }
  const f = t.function;
  if (f.description !== undefined && f.description !== null && typeof f.description !== 'string') throw badRequest(`${at}.function.description must be a string`);
  if (f.parameters !== undefined && f.parameters !== null && !isObject(f.parameters)) throw badRequest(`${at}.function.parameters must be a JSON-schema object`);
  return t as unknown as ToolSpec;
}

export function parseChatRequest(raw: Buffer | string): ChatRequest {
  let parsed: unknown;
  try {
    parsed = parseJsonBounded(typeof raw === 'string' ? raw : raw.toString('utf8'), 'request body');
  } catch (e) {
    if (e instanceof SafekeepError) throw badRequest(e.message);
    throw e;
  }
  if (!isObject(parsed)) throw badRequest('request body must be a JSON object');
  const b = parsed;
  if (!Array.isArray(b.messages) || b.messages.length === 0) throw badRequest('"messages" must be a non-empty array');
  const nonTextParts: string[] = [];
  b.messages.forEach((m, i) => checkMessage(m, i, nonTextParts));
  if (b.tools !== undefined && b.tools !== null && !Array.isArray(b.tools)) throw badRequest('"tools" must be an array');
  const tools = ((b.tools ?? []) as unknown[]).map((t, i) => checkTool(t, `tools[${i}]`));
  if (b.functions !== undefined && b.functions !== null && !Array.isArray(b.functions)) throw badRequest('"functions" must be an array');
  const functions = ((b.functions ?? []) as unknown[]).map((f, i) => checkTool({ type: 'function', function: f }, `functions[${i}]`));
  const maxCompletion = positiveInt(b, 'max_completion_tokens');
  const maxTokensField = positiveInt(b, 'max_tokens');
  const maxTokens = maxCompletion ?? maxTokensField;
  if (b.stream !== undefined && b.stream !== null && typeof b.stream !== 'boolean') throw badRequest(`"stream" must be a boolean, got ${show(b.stream)}`);
  let includeUsage = false;
  if (b.stream_options !== undefined && b.stream_options !== null) {
    if (!isObject(b.stream_options)) throw badRequest('"stream_options" must be an object');
    const u = b.stream_options.include_usage;
    if (u !== undefined && typeof u !== 'boolean') throw badRequest('"stream_options.include_usage" must be a boolean');
    includeUsage = u === true;
  }
  if (b.model !== undefined && typeof b.model !== 'string') throw badRequest('"model" must be a string');
  return {
    body: b,
    messages: b.messages as ChatMessage[],
    tools: [...tools, ...functions],
    legacyFunctions: functions.length > 0,
    maxTokens,
    stream: b.stream === true,
    includeUsage,
    nonTextParts,
  };
}
