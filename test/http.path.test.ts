/**
 * Property tests (fast-check) of the two parsers in front of every route: the path canonicaliser (every spelling
 * of an endpoint reaches that endpoint, the output has no dot, empty or upper-case segment) and the
 * chat-completions request parser (any JSON at all is either a parsed request or a 400 — never another error —
 * and a valid request comes back with its messages and tools intact).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { apiPath, canonicalPath } from '../src/http/path.ts';
import { parseChatRequest, ROLES } from '../src/chat/body.ts';
import { HttpError } from '../src/http/errors.ts';

/** a spelling of `/v1/chat/completions`: per character percent-encoded or not, any case; extra `.`, `x/..`, `//`, trailing `/`, a query */
const spelling = fc.record({
  encode: fc.array(fc.boolean(), { minLength: 32, maxLength: 32 }),
  upper: fc.array(fc.boolean(), { minLength: 32, maxLength: 32 }),
  noise: fc.array(fc.constantFrom('', '/.', '/./', '/x/..', '/', '\\'), { minLength: 3, maxLength: 3 }),
  prefix: fc.boolean(),
  trail: fc.constantFrom('', '/', '/.', '?a=b', '#f', '%2F'),
}).map(({ encode, upper, noise, prefix, trail }) => {
  const word = (w: string, off: number) => [...w].map((ch, i) => {
    const c = upper[(off + i) % 32] ? ch.toUpperCase() : ch;
    return encode[(off + i) % 32] ? `%${c.charCodeAt(0).toString(16).padStart(2, '0')}` : c;
  }).join('');
  return `${prefix ? `/${word('v1', 0)}` : '/'}${noise[0]}/${word('chat', 2)}${noise[1]}/${word('completions', 6)}${noise[2]}${trail}`;
});

test('canonicalPath: every spelling of /v1/chat/completions routes to chat/completions', () => {
  fc.assert(fc.property(spelling, (p) => {
    const c = canonicalPath(p);
    assert.notEqual(c, null, p);
    assert.equal(apiPath(c!), 'chat/completions', p);
  }), { numRuns: 2000 });
});

test('canonicalPath: the output is absolute, lower-case, without dot or empty segments or control characters; or the path is refused', () => {
  fc.assert(fc.property(fc.string({ unit: fc.constantFrom('/', '.', '%', '2', 'F', 'f', '0', 'a', 'B', '\\', ';', '?', '\u0000', 'é', 'c') , maxLength: 40 }), (s) => {
    const c = canonicalPath(`/${s}`);
    if (c === null) return;
    assert.ok(c.startsWith('/'));
    assert.equal(c, c.toLowerCase());
    if (c !== '/') for (const seg of c.slice(1).split('/')) assert.ok(seg !== '' && seg !== '.' && seg !== '..', `${s} → ${c}`);
    // eslint-disable-next-line no-control-regex
    assert.doesNotMatch(c, /[\u0000-\u001f\\]/);
  }), { numRuns: 3000 });
  assert.equal(canonicalPath('/v1/chat/completions%00'), null);
  assert.equal(canonicalPath('/v1/%E0%A4%A'), null);
  assert.equal(canonicalPath('v1/chat/completions'), null);
  assert.equal(canonicalPath('/../../v1/chat/completions'), '/v1/chat/completions');
});

const isHttp400 = (e: unknown) => e instanceof HttpError && e.status === 400 && e.type === 'invalid_request_error' && e.message.length > 0;

test('parseChatRequest: any JSON value is a parsed request or a 400, never another error', () => {
  fc.assert(fc.property(fc.jsonValue({ maxDepth: 6 }), (v) => {
    try {
      parseChatRequest(JSON.stringify(v) ?? 'null');
    } catch (e) {
      assert.ok(isHttp400(e), String(e));
    }
  }), { numRuns: 2000 });
  // request-shaped values with random fields, where most checks apply
  const message = fc.record({ role: fc.oneof(fc.constantFrom(...ROLES), fc.string({ maxLength: 8 })), content: fc.oneof(fc.string(), fc.constant(null), fc.jsonValue({ maxDepth: 3 })), tool_calls: fc.option(fc.jsonValue({ maxDepth: 4 })), tool_call_id: fc.option(fc.string()) }, { requiredKeys: ['role'] });
  fc.assert(fc.property(fc.record({ messages: fc.array(message, { maxLength: 4 }), tools: fc.option(fc.jsonValue({ maxDepth: 4 })), max_tokens: fc.option(fc.jsonValue({ maxDepth: 1 })), stream: fc.option(fc.jsonValue({ maxDepth: 1 })) }), (b) => {
    try {
      parseChatRequest(JSON.stringify(b));
    } catch (e) {
      assert.ok(isHttp400(e), String(e));
    }
  }), { numRuns: 2000 });
});

test('parseChatRequest: a valid request comes back intact; any other spelling of a role is refused', () => {
  const text = fc.string({ maxLength: 30 });
  const valid = fc.record({
    messages: fc.array(fc.oneof(
      fc.record({ role: fc.constantFrom('system', 'user', 'developer'), content: text }),
      fc.record({ role: fc.constant('assistant'), content: fc.option(text, { nil: null }) }),
    ), { minLength: 1, maxLength: 5 }),
    tools: fc.array(fc.record({ type: fc.constant('function'), function: fc.record({ name: fc.string({ minLength: 1, maxLength: 10 }), description: text }) }), { maxLength: 3 }),
    max_tokens: fc.integer({ min: 1, max: 1 << 20 }),
  });
  fc.assert(fc.property(valid, fc.nat(), (b, k) => {
    const r = parseChatRequest(JSON.stringify(b));
    const plain = JSON.parse(JSON.stringify(b)) as typeof b;
    assert.deepEqual(r.messages, plain.messages);
    assert.deepEqual(r.tools, plain.tools);
    assert.equal(r.maxTokens, b.max_tokens);
    const i = k % b.messages.length;
    const role = b.messages[i]!.role;
    const other = role[0]!.toUpperCase() + role.slice(1);
    const bad = { ...b, messages: b.messages.map((m, j) => (j === i ? { ...m, role: other } : m)) };
    assert.throws(() => parseChatRequest(JSON.stringify(bad)), (e: unknown) => isHttp400(e) && /unknown role/.test((e as Error).message));
  }), { numRuns: 500 });
});

test('parseChatRequest: nesting beyond 64 levels is a 400 naming the depth, at any depth', () => {
  fc.assert(fc.property(fc.integer({ min: 1, max: 5000 }), (d) => {
    // inside a tool's schema (a field that takes any JSON; unknown message keys are refused before depth matters)
    const body = `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"x":${'['.repeat(d)}${']'.repeat(d)}}}}]}`;
    if (d + 5 <= 64) assert.equal(parseChatRequest(body).messages.length, 1);
    else assert.throws(() => parseChatRequest(body), (e: unknown) => isHttp400(e) && new RegExp(`nested ${d + 5} levels`).test((e as Error).message));
  }), { numRuns: 300 });
});
