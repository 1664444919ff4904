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

/** a history: instructions, the request, maybe an earlier call and its result, maybe a follow-up */
const history = fc.record({
  system: fc.option(text),
  systemName: fc.option(word),
  user: text,
  userParts: fc.boolean(),
  userName: fc.option(word),
  call: fc.option(fc.record({ name: word, args, reasoning: fc.option(text), content: fc.option(text), result: text })),
  followUp: fc.option(fc.record({ role: fc.constantFrom('user', 'system', 'developer'), content: text })),
}).map((h) => {
  const m: Record<string, Json>[] = [];
  if (h.system !== null) m.push({ role: 'system', content: h.system, ...(h.systemName !== null ? { name: h.systemName } : {}) });
  m.push({ role: 'user', content: h.userParts ? [{ type: 'text', text: h.user }] : h.user, ...(h.userName !== null ? { name: h.userName } : {}) });
  if (h.call) {
    m.push({
      role: 'assistant', content: h.call.content,
      ...(h.call.reasoning !== null ? { reasoning_content: h.call.reasoning } : {}),
      tool_calls: [{ id: 'c1', type: 'function', function: { name: h.call.name, arguments: JSON.stringify(h.call.args) } }],
    });
    m.push({ role: 'tool', tool_call_id: 'c1', content: h.call.result });
  }
  if (h.followUp) m.push(h.followUp);
  return m;
});

const settings = fc.record({
  stop: fc.array(word, { minLength: 1, maxLength: 2 }),
  user: word,
  response_format: schema(1).map((s) => ({ type: 'json_schema', json_schema: { name: 'answer', schema: s } })),
  temperature: fc.constant(0.2),
}, { requiredKeys: [] });

/** a request body with 1–3 tools */
export const markedRequest = fc.record({ tools: fc.array(tool, { minLength: 1, maxLength: 3 }), messages: history, settings, slot: fc.nat() })
  .map(({ tools, messages, settings: s, slot }) => ({ body: { model: 'agent-m', messages, tools, ...s } as Record<string, Json>, slot }));

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
