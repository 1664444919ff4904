/**
 * Random chat requests with a marker at a random string position, for the "judge exactly what you forward"
 * property: tool schemas with the keywords a flattener may skip (examples, title, x-*, $comment,
 * additionalProperties, items, if/then/not, $defs reached by $ref, allOf/anyOf), histories with nested call
 * arguments, names, reasoning, content parts, tool results, and text-bearing settings. `markAt` puts the marker into
 * the k-th string of the body — a key (appended) or a string value (appended after a space) — at any depth.
 */
import fc from 'fast-check';

export const MARKER = 'Zqx7Marker';

const word = fc.constantFrom('alpha', 'bravo', 'city', 'email', 'amount', 'note', 'list', 'path', 'query', 'unit');
const text = fc.array(word, { minLength: 1, maxLength: 4 }).map((w) => w.join(' '));

type Json = unknown;

/** a JSON schema, `depth` levels of nesting at most */
function schema(depth: number): fc.Arbitrary<Record<string, Json>> {
  const leaf = fc.record(
    {
      type: fc.constantFrom('string', 'integer', 'number', 'boolean'),
      description: text,
      title: text,
      examples: fc.array(text, { maxLength: 2 }),
      enum: fc.array(text, { minLength: 1, maxLength: 3 }),
      default: text,
      'x-note': text,
      $comment: text,
    },
    { requiredKeys: ['type'] },
  );
  if (depth <= 0) return leaf;
  const sub = schema(depth - 1);
  const obj = fc.record(
    {
      type: fc.constant('object'),
      description: text,
      properties: fc.dictionary(word, sub, { minKeys: 1, maxKeys: 3 }),
      additionalProperties: sub,
      if: sub,
      then: sub,
      not: sub,
      allOf: fc.array(sub, { maxLength: 2 }),
      anyOf: fc.array(sub, { maxLength: 2 }),
    },
    { requiredKeys: ['type', 'properties'] },
  );
  const arr = fc.record({ type: fc.constant('array'), description: text, items: sub }, { requiredKeys: ['type', 'items'] });
  return fc.oneof(leaf, obj, arr);
}

/** a tool's parameters: an object schema, sometimes with `$defs` and a property that refers to them */
const parameters = fc.record({
  props: fc.dictionary(word, schema(2), { minKeys: 1, maxKeys: 3 }),
  defs: fc.option(schema(1)),
  required: fc.boolean(),
}).map(({ props, defs, required }) => {
  const p: Record<string, Json> = { type: 'object', properties: { ...props } };
  if (defs) {
    p.$defs = { Shared: defs };
    (p.properties as Record<string, Json>).shared = { $ref: '#/$defs/Shared' };
  }
  if (required) p.required = Object.keys(props).slice(0, 1);
  return p;
});

const tool = fc.record({ name: word, description: text, parameters }).map(({ name, description, parameters: params }, ) => ({ type: 'function', function: { name, description, parameters: params } }));

const args = fc.dictionary(word, fc.oneof(text, fc.integer(), fc.array(fc.oneof(text, fc.dictionary(word, text, { maxKeys: 2 })), { maxLength: 2 }), fc.dictionary(word, fc.oneof(text, fc.dictionary(word, text, { maxKeys: 2 })), { maxKeys: 2 })), { maxKeys: 3 });

/**
 * Turns the client wrote after the last user message: a call with no result after it, an assistant turn of one space
 * whose text is in its reasoning, a refusal, a named assistant turn.
 */
const trailing = fc.oneof(
  fc.record({ name: word, args }).map(({ name, args: a }) => ({ role: 'assistant', content: '', tool_calls: [{ id: 'c9', type: 'function', function: { name, arguments: a } }] })),
  text.map((r) => ({ role: 'assistant', content: ' ', reasoning_content: r })),
  text.map((r) => ({ role: 'assistant', content: '', refusal: r })),
  fc.record({ name: word, content: text }).map(({ name, content }) => ({ role: 'assistant', name, content })),
);

/** a history: instructions, the request, maybe an earlier call and its result, maybe a follow-up */
const history = fc.record({
  system: fc.option(text),
  systemName: fc.option(word),
  user: text,
  userParts: fc.boolean(),
  userName: fc.option(word),
  // a memory tool's call now and then: its result is a memory read behind `serve --skills` (the memory stage)
  call: fc.option(fc.record({ name: fc.oneof({ arbitrary: word, weight: 4 }, { arbitrary: fc.constant('recall_memory'), weight: 1 }), args, reasoning: fc.option(text), content: fc.option(text), result: text, resultName: fc.option(word) })),
  followUp: fc.option(fc.record({ role: fc.constantFrom('user', 'system', 'developer'), content: text })),
  trailing: fc.option(trailing),
}).map((h) => {
  const m: Record<string, Json>[] = [];
  if (h.system !== null) m.push({ role: 'system', content: h.system, ...(h.systemName !== null ? { name: h.systemName } : {}) });
  m.push({ role: 'user', content: h.userParts ? [{ type: 'text', text: h.user }] : h.user, ...(h.userName !== null ? { name: h.userName } : {}) });
  if (h.call) {
    m.push({
      role: 'assistant', content: h.call.content,
      ...(h.call.reasoning !== null ? { reasoning_content: h.call.reasoning } : {}),
      // arguments stay a JSON value here, so the marker can land at any depth inside them; `argumentsAsText`
      // writes them into the `arguments` string after marking
      tool_calls: [{ id: 'c1', type: 'function', function: { name: h.call.name, arguments: h.call.args } }],
    });
    m.push({ role: 'tool', tool_call_id: 'c1', content: h.call.result, ...(h.call.resultName !== null ? { name: h.call.resultName } : {}) });
  }
  if (h.followUp) m.push(h.followUp);
  if (h.trailing) m.push(h.trailing);
  return m;
});

const settings = fc.record({
  stop: fc.array(word, { minLength: 1, maxLength: 2 }),
  user: word,
  response_format: schema(1).map((s) => ({ type: 'json_schema', json_schema: { name: 'answer', schema: s } })),
  temperature: fc.constant(0.2),
}, { requiredKeys: [] });

/**
 * a request body with 0–3 tools (a request without `tools` is a prompted agent's: judged all the same); `dup`: the
 * arguments string of a call repeats a key (the judge's reader and a template would disagree: refused)
 */
export const markedRequest = fc.record({ tools: fc.array(tool, { minLength: 0, maxLength: 3 }), messages: history, settings, slot: fc.nat(), dup: fc.nat({ max: 9 }) })
  .map(({ tools, messages, settings: s, slot, dup }) => ({ body: { model: 'agent-m', messages, ...(tools.length ? { tools } : {}), ...s } as Record<string, Json>, slot, dup: dup === 0 }));

/**
 * The body with every call's `arguments` value written as the JSON text the wire carries; with `dup`, the first
 * key of each is repeated at the end with an empty value (`{"k":"v …","k":""}`).
 */
export function argumentsAsText(body: Json, dup = false): Json {
  const list = (body as { messages?: unknown }).messages;
  // a marker in the key "messages" leaves a body without them (the server's 400)
  if (!Array.isArray(list)) return body;
  const messages = (list as Record<string, Json>[]).map((m) => {
    if (!m || typeof m !== 'object' || !Array.isArray(m.tool_calls)) return m;
    return {
      ...m,
      tool_calls: (m.tool_calls as { function: { name: string; arguments: Json } }[]).map((c) => {
        if (!c.function || typeof c.function !== 'object') return c;
        const a = c.function.arguments;
        let text = typeof a === 'string' ? a : JSON.stringify(a);
        const first = a && typeof a === 'object' && !Array.isArray(a) ? Object.keys(a)[0] : undefined;
        if (dup && first !== undefined) text = `${text.slice(0, -1)},${JSON.stringify(first)}:""}`;
        return { ...c, function: { ...c.function, arguments: text } };
      }),
    };
  });
  return { ...(body as Record<string, Json>), messages };
}

/** Every string position of a JSON value: object keys and string values, depth first. */
export function stringSlots(v: Json): number {
  let n = 0;
  const walk = (x: Json): void => {
    if (typeof x === 'string') n++;
    else if (Array.isArray(x)) x.forEach(walk);
    else if (x && typeof x === 'object') for (const [, y] of Object.entries(x)) { n++; walk(y); }
  };
  walk(v);
  return n;
}

/**
 * A copy of `v` with the marker in its k-th string position (modulo their count): appended to a key, or to a
 * string value after a space. Returns the copy and where the marker went (for a failing case's message).
 */
export function markAt(v: Json, k: number): { value: Json; at: string } {
  const total = stringSlots(v);
  let i = k % total;
  let at = '';
  const walk = (x: Json, path: string): Json => {
    if (typeof x === 'string') {
      if (i-- === 0) { at = `${path} (value)`; return `${x} ${MARKER}`; }
      return x;
    }
    if (Array.isArray(x)) return x.map((y, j) => walk(y, `${path}[${j}]`));
    if (x && typeof x === 'object') {
      const out: Record<string, Json> = {};
      for (const [key, y] of Object.entries(x)) {
        let name = key;
        if (i-- === 0) { at = `${path}.${key} (key)`; name = `${key}${MARKER}`; }
        out[name] = walk(y, `${path}.${key}`);
      }
      return out;
    }
    return x;
  };
  const value = walk(v, '');
  return { value, at };
}
