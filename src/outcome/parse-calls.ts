/**
 * Tool calls in each family's native output format.
 *
 * - llama3: a JSON object `{"name": ..., "parameters": {...}}` (or `"arguments"`), optionally after
 *   `<|python_tag|>`; several calls may be separated by `;` or newlines. The `<|python_tag|>` built-in form
 *   `name.call(key="value", n=3)` is parsed too. Objects are found anywhere in the text (also inside prose),
 *   but only objects whose first key is `"name"`, `"type"` or `"function"` count as call attempts.
 * - qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number, anywhere; an unclosed last tag
 *   (generation cut off) is parsed up to the end of the text. Qwen3 `<think>...</think>` blocks are dropped first
 *   (a refusal considered while thinking is not a refusal in the answer).
 * - mistral: `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]` (v3 tokenizer) or
 *   `[TOOL_CALLS]name[ARGS]{...}` (v11+ tokenizer).
 *
 * Arguments given as a JSON-encoded string (OpenAI wire style) are decoded. Special tokens that end a turn
 * (`<|eot_id|>`, `<|eom_id|>`, `</s>`, `<|im_end|>`...) are removed first.
 */
import { balancedEnd, isPlainObject, tryParseJson } from './json-scan.ts';
import type { CallFormat, MalformedCall, ParseResult, ParsedCall } from './types.ts';

/**
 * End-of-turn and end-of-text tokens of the supported families, as their tokenizers spell them (none belongs in an
 * answer's text): Llama 3.x `<|eot_id|>` `<|eom_id|>` `<|end_of_text|>`; Qwen `<|im_end|>` `<|endoftext|>`;
 * Mistral `</s>`; Phi-3 `<|end|>` (and `<|endoftext|>`); Gemma `<end_of_turn>` `<eos>`. The one list: the local
 * backend and the local server both strip with it.
 */
export const END_TOKENS = ['<|eot_id|>', '<|eom_id|>', '<|end_of_text|>', '<|im_end|>', '<|endoftext|>', '</s>', '<|end|>', '<end_of_turn>', '<eos>'] as const;

const END_TOKEN_RE = new RegExp(END_TOKENS.map((t) => t.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')).join('|'), 'g');

export function stripEndTokens(text: string): string {
  return text.replace(END_TOKEN_RE, '');
}

/** {name, arguments|parameters} → ParsedCall, or the reason it is not one. */
function callFromObject(v: unknown, source: string): ParsedCall | MalformedCall {
  if (!isPlainObject(v)) return { source, reason: 'tool call is not a JSON object' };
  // OpenAI wire shape {"type": "function", "function": {...}}
  if (isPlainObject(v.function) && v.name === undefined) return callFromObject(v.function, source);
  const name = v.name;
  if (typeof name !== 'string' || name.length === 0) return { source, reason: 'tool call has no string "name"' };
  let args: unknown = v.parameters !== undefined ? v.parameters : v.arguments;
  if (args === undefined) return { source, reason: `call to ${name} has no "parameters"/"arguments"` };
  if (typeof args === 'string') {
    const p = tryParseJson(args);
    if (!p.ok) return { source, reason: `call to ${name}: arguments string is not JSON (${p.error})` };
    args = p.value;
  }
  if (!isPlainObject(args)) return { source, reason: `call to ${name}: arguments are not a JSON object` };
  return { name, arguments: args, source };
}

function isCall(x: ParsedCall | MalformedCall): x is ParsedCall {
  return 'name' in x;
}

/** Parse a JSON text holding one call object or an array of them. */
function callsFromJsonText(json: string, out: ParseResult): void {
  const p = tryParseJson(json);
  if (!p.ok) {
    out.malformed.push({ source: json, reason: `malformed JSON: ${p.error}` });
    return;
  }
  const items = Array.isArray(p.value) ? p.value : [p.value];
  if (items.length === 0) out.malformed.push({ source: json, reason: 'empty tool-call list' });
  for (const item of items) {
    const c = callFromObject(item, json);
    if (isCall(c)) out.calls.push(c);
    else out.malformed.push(c);
  }
}

/** `name.call(a="x", b=2)` (Llama built-in tool form) → call; only literal keyword arguments. */
function parsePythonCall(src: string): ParsedCall | MalformedCall {
  const m = /^\s*([A-Za-z_][\w]*)(?:\.call)?\((.*)\)\s*$/s.exec(src);
  if (!m) return { source: src, reason: 'python_tag content is neither JSON nor name.call(...)' };
  const args: Record<string, unknown> = {};
  const body = m[2]!.trim();
  if (body.length > 0) {
    const re = /\s*([A-Za-z_]\w*)\s*=\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|-?\d+(?:\.\d+)?|True|False|None)\s*(,|$)/gy;
    let pos = 0;
    while (pos < body.length) {
      re.lastIndex = pos;
      const a = re.exec(body);
      if (!a) return { source: src, reason: `cannot parse python arguments at ${JSON.stringify(body.slice(pos, pos + 20))}` };
      const raw = a[2]!;
      let val: unknown;
      if (raw.startsWith('"')) val = JSON.parse(raw);
      else if (raw.startsWith("'")) val = raw.slice(1, -1).replace(/\\'/g, "'");
      else if (raw === 'True' || raw === 'False') val = raw === 'True';
      else if (raw === 'None') val = null;
      else val = Number(raw);
      args[a[1]!] = val;
      pos = re.lastIndex;
      if (a[3] === '') break;
    }
  }
  return { name: m[1]!, arguments: args, source: src };
}

function parseLlama(text: string, out: ParseResult): string {
  const tag = '<|python_tag|>';
  const tagAt = text.indexOf(tag);
  if (tagAt >= 0) {
    // everything after the tag is the call payload
    const prose = text.slice(0, tagAt);
    const payload = text.slice(tagAt + tag.length).trim();
    if (payload.startsWith('{') || payload.startsWith('[')) {
      const rest: ParseResult = { calls: [], malformed: [], prose: '' };
      const restProse = parseLlamaJsonObjects(payload, rest, true);
      out.calls.push(...rest.calls);
      out.malformed.push(...rest.malformed);
      return prose + restProse;
    }
    for (const part of splitTopLevel(payload, ';')) {
      if (part.trim() === '') continue;
      const c = parsePythonCall(part);
      if (isCall(c)) out.calls.push(c);
      else out.malformed.push(c);
    }
    return prose;
  }
  return parseLlamaJsonObjects(text, out, false);
}

/** Split on `sep` outside quotes and brackets. */
function splitTopLevel(s: string, sep: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let q: string | null = null;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (q) {
      if (c === '\\') i++;
      else if (c === q) q = null;
    } else if (c === '"' || c === "'") q = c;
    else if (c === '(' || c === '[' || c === '{') depth++;
    else if (c === ')' || c === ']' || c === '}') depth--;
    else if (c === sep && depth === 0) {
      parts.push(s.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(s.slice(start));
  return parts;
}

/**
 * Scan for `{` that begins a call-looking object (`{"name"` after optional whitespace) — or, when `payload`,
 * any top-level JSON value — and parse it. Returns the text outside those spans.
 */
function parseLlamaJsonObjects(text: string, out: ParseResult, payload: boolean): string {
  let prose = '';
  let i = 0;
  const opener = /\{\s*"(?:name|type|function)"\s*:|\[\s*\{\s*"(?:name|type|function)"\s*:/g;
  while (i < text.length) {
    let at: number;
    if (payload) {
      const m = /[{[]/.exec(text.slice(i));
      at = m ? i + m.index : -1;
    } else {
      opener.lastIndex = i;
      const m = opener.exec(text);
      at = m ? m.index : -1;
    }
    if (at < 0) {
      prose += text.slice(i);
      break;
    }
    prose += text.slice(i, at);
    const end = balancedEnd(text, at);
    if (end < 0) {
      out.malformed.push({ source: text.slice(at), reason: 'unterminated JSON (partial tool call)' });
      return prose;
    }
    callsFromJsonText(text.slice(at, end), out);
    i = end;
  }
  return prose;
}

/** Qwen3 thinking: `<think>...</think>` blocks are not part of the answer; an unclosed one swallows the rest. */
export function stripThinking(text: string): string {
  const t = text.replace(/<think>[\s\S]*?<\/think>/g, '');
  const open = t.indexOf('<think>');
  return open >= 0 ? t.slice(0, open) : t;
}

function parseQwen(raw: string, out: ParseResult): string {
  const text = stripThinking(raw);
  let prose = '';
  let i = 0;
  for (;;) {
    const open = text.indexOf('<tool_call>', i);
    if (open < 0) {
      prose += text.slice(i);
      break;
    }
    prose += text.slice(i, open);
    const bodyStart = open + '<tool_call>'.length;
    const close = text.indexOf('</tool_call>', bodyStart);
    const body = (close < 0 ? text.slice(bodyStart) : text.slice(bodyStart, close)).trim();
    if (body.length === 0) out.malformed.push({ source: text.slice(open, close < 0 ? undefined : close + 12), reason: 'empty <tool_call>' });
    else callsFromJsonText(body, out);
    if (close < 0) break;
    i = close + '</tool_call>'.length;
  }
  // a stray closing tag or a bare "{"name": ...}" object without tags is still an attempt at a call
  const stray = /<\/tool_call>/.test(prose);
  if (stray) out.malformed.push({ source: '</tool_call>', reason: 'closing </tool_call> without opening tag' });
  return prose;
}

function parseMistral(text: string, out: ParseResult): string {
  const tag = '[TOOL_CALLS]';
  const at = text.indexOf(tag);
  if (at < 0) return text;
  const prose = text.slice(0, at);
  const rest = text.slice(at + tag.length);
  // several [TOOL_CALLS] markers (v11 form: [TOOL_CALLS]a[ARGS]{..}[TOOL_CALLS]b[ARGS]{..})
  const segments = rest.split(tag);
  for (const segRaw of segments) {
    const seg = segRaw.trim();
    if (seg.length === 0) {
      out.malformed.push({ source: tag, reason: 'empty [TOOL_CALLS]' });
      continue;
    }
    const argsAt = seg.indexOf('[ARGS]');
    if (argsAt >= 0 && !seg.startsWith('[')) {
      const name = seg.slice(0, argsAt).trim();
      const json = seg.slice(argsAt + 6).trim();
      const end = json.startsWith('{') ? balancedEnd(json, 0) : -1;
      if (end < 0) {
        out.malformed.push({ source: seg, reason: `call to ${name}: [ARGS] is not a complete JSON object` });
        continue;
      }
      const c = callFromObject({ name, arguments: tryParseJsonOr(json.slice(0, end)) }, seg);
      if (isCall(c)) out.calls.push(c);
      else out.malformed.push(c);
      continue;
    }
    if (!seg.startsWith('[') && !seg.startsWith('{')) {
      out.malformed.push({ source: seg, reason: '[TOOL_CALLS] not followed by JSON' });
      continue;
    }
    const end = balancedEnd(seg, 0);
    if (end < 0) {
      out.malformed.push({ source: seg, reason: 'unterminated JSON (partial tool call)' });
      continue;
    }
    callsFromJsonText(seg.slice(0, end), out);
  }
  return prose;
}

function tryParseJsonOr(s: string): unknown {
  const p = tryParseJson(s);
  return p.ok ? p.value : s; // a string fails later with a precise reason
}

/** All tool calls in `text` written in `format`. */
export function parseToolCalls(text: string, format: CallFormat): ParseResult {
  const clean = stripEndTokens(text);
  const out: ParseResult = { calls: [], malformed: [], prose: '' };
  if (format === 'llama3') out.prose = parseLlama(clean, out);
  else if (format === 'qwen') out.prose = parseQwen(clean, out);
  else out.prose = parseMistral(clean, out);
  return out;
}
