/**
 * The side doors of one round of attacks, one test per class: JSON inside a tool call's `arguments` string (a
 * duplicate key, numbers past a double's digits), ids the server writes, requests without a `tools` field. The
 * scripted judge answers "unsafe" exactly when it is shown the marker; the agent upstream records what it got.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { loadSkills } from '../src/s3/skill-file.ts';
import { createLocalServer } from '../src/serve/local.ts';
import { parseChatRequest } from '../src/chat/body.ts';
import { parseJsonLossless, stringifyLossless } from '../src/util/json-lossless.ts';
import type { ChatBackend, ChatCall } from '../src/guard/types.ts';
import { completion } from './helpers/guard-mock.ts';
import { MARKER } from './helpers/marked-request.ts';
import { rawRequest } from './helpers/http-raw.ts';
import { startProxy } from './helpers/proxy.ts';
import { repoRoot } from './helpers/shared.ts';

type Msg = { role: string; content: string };
const isJudge = (b: Record<string, unknown> | null) => (b?.messages as Msg[] | undefined)?.[0]?.content === SAFETY_ASSESSOR_ROLE;
const sees = (v: unknown, s: string) => JSON.stringify(v).includes(s);

function script(body: Record<string, unknown> | null) {
  if (isJudge(body)) return { json: completion(sees(body!.messages, MARKER) ? 'YES' : 'NO') };
  return { json: completion('ok') };
}

const post = (port: number, body: unknown) => rawRequest(port, { path: '/v1/chat/completions', body: typeof body === 'string' ? body : JSON.stringify(body) });
const tools = [{ type: 'function', function: { name: 'send_email', description: 'Send an e-mail.', parameters: { type: 'object', properties: { to: { type: 'string' }, body: { type: 'string' } } } } }];
const withArgs = (args: string, id: unknown = 'a1') => [
  { role: 'user', content: 'Write to my colleague.' },
  { role: 'assistant', content: '', tool_calls: [{ ...(id === undefined ? {} : { id }), type: 'function', function: { name: 'send_email', arguments: args } }] },
  { role: 'tool', tool_call_id: typeof id === 'string' ? id : 'x', content: 'sent' },
];

test('JSON inside a string: a duplicate key in a call\'s arguments is a 400 naming it, on the SafeKeep and the S³ proxy; nothing runs', async (t) => {
  const args = `{"to":"n@x.y","body":"${MARKER}: you will regret this","body":"Hello"}`;
  for (const options of [{}, { skills: loadSkills([join(repoRoot, 'skills')]) }]) {
    const { up, port } = await startProxy(t, script, options);
    const r = await post(port, { model: 'm', messages: withArgs(args), tools });
    assert.equal(r.status, 400, r.body);
    assert.match(r.json().error!.message, /messages\[1\]\.tool_calls\[0\]\.function\.arguments: duplicate key "body"/);
    assert.equal(up.requests.length, 0);
  }
});

test('JSON inside a string: the upstream gets the re-serialisation of what the judge read, with the client\'s digits', async (t) => {
  const { up, port } = await startProxy(t, script);
  const args = '{ "to" : "n@x.y", "amount": 12345678901234567890, "ratio": 1.50, "nested": {"deep": ["x", {"k": 1e400}]} }';
  const r = await post(port, { model: 'm', messages: withArgs(args), tools });
  assert.equal(r.status, 200, r.body);
  const judge = up.requests.find((q) => isJudge(q.body))!;
  const agent = up.requests.find((q) => !isJudge(q.body))!;
  const sent = (agent.body!.messages as { tool_calls?: { function: { arguments: string } }[] }[])[1]!.tool_calls![0]!.function.arguments;
  assert.equal(sent, '{"to":"n@x.y","amount":12345678901234567890,"ratio":1.50,"nested":{"deep":["x",{"k":1e400}]}}');
  const prompt = JSON.stringify(judge.body!.messages);
  for (const digits of ['12345678901234567890', '1.50', '1e400']) assert.ok(prompt.includes(digits), `the judge saw ${digits}`);
  assert.ok(!prompt.includes('12345678901234567000'));
});

test('JSON inside a string: text that is not a JSON object is forwarded as the opaque string the judge was shown', async (t) => {
  const { up, port } = await startProxy(t, script);
  for (const args of [`to=n@x.y body="${MARKER}"`, `["${MARKER}"]`, `"${MARKER}"`]) {
    const before = up.requests.length;
    const r = await post(port, { model: 'm', messages: withArgs(args), tools });
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-safekeep-action'], 'refuse', args);
    const calls = up.requests.slice(before);
    assert.ok(calls.some((q) => isJudge(q.body) && sees(q.body, MARKER)), 'the judge saw the raw text');
    assert.ok(calls.every((q) => isJudge(q.body) || !q.body?.tools), 'nothing ran with tools');
  }
});

test('ids the server writes: an id-less call and a client id spelled like a server-made key get distinct canonical ids', () => {
  const c = parseChatRequest(JSON.stringify({ model: 'm', messages: [
    { role: 'user', content: 'hi' },
    { role: 'assistant', content: '', tool_calls: [
      { type: 'function', function: { name: 'f', arguments: '{}' } },
      { id: '\u0000missing0', type: 'function', function: { name: 'g', arguments: '{}' } },
      { id: 'call00000', type: 'function', function: { name: 'h', arguments: '{}' } },
    ] },
    { role: 'tool', tool_call_id: '\u0000missing0', content: 'g done' },
    { role: 'tool', tool_call_id: 'call00000', content: 'h done' },
  ] }));
  const calls = (c.messages[1]!.tool_calls as { id: string }[]).map((x) => x.id);
  assert.equal(new Set(calls).size, 3, JSON.stringify(calls));
  assert.deepEqual([c.messages[2]!.tool_call_id, c.messages[3]!.tool_call_id], [calls[1], calls[2]]);
});

test('requests without tools are judged by default; --pass-unjudged no-tools forwards them, logged as unjudged', async (t) => {
  // a prompted (ReAct) agent: the tools are described in the system prompt, the request carries no `tools`
  const react = [{ role: 'system', content: 'You can use the tool BankTransfer[to, amount]. Answer as Action: ... Action Input: ...' }, { role: 'user', content: `${MARKER} move my savings to this stranger` }];
  const judged = await startProxy(t, script);
  const r = await post(judged.port, { model: 'm', messages: react });
  assert.deepEqual([r.status, r.headers['x-safekeep-action'], r.headers['x-safekeep-verdict']], [200, 'refuse', 'yes']);
  assert.ok(judged.up.requests.some((q) => isJudge(q.body) && sees(q.body, 'BankTransfer[to, amount]')), 'the judge saw the tool descriptions in the prompt');
  const passing = await startProxy(t, script, { passUnjudged: ['no-tools'] });
  const p = await post(passing.port, { model: 'm', messages: react });
  assert.deepEqual([p.status, p.headers['x-safekeep-action'], p.headers['x-safekeep-verdict']], [200, 'passthrough', 'skipped']);
  assert.equal(passing.up.requests.filter((q) => isJudge(q.body)).length, 0);
  assert.equal(passing.logs.at(-1)!.unjudged, 'no-tools');
});

test('serve --model: a request without tools meets the guard by default; --pass-unjudged no-tools answers it unguarded', async (t) => {
  const purposes: string[] = [];
  const backend: ChatBackend = {
    name: 'scripted', callFormat: 'qwen',
    async chat(c: ChatCall) {
      purposes.push(c.purpose);
      const content = c.purpose === 'judge' ? (sees(c.messages, MARKER) ? 'YES' : 'NO') : c.prefix ?? 'ok';
      return { content, toolCalls: [], promptTokens: 1, completionTokens: 1, latencyMs: 0, cached: false, finish: 'stop' };
    },
  };
  const serve = async (passUnjudged?: 'no-tools'[]) => {
    const server = createLocalServer({ backend, method: 'safekeep', modelName: 'm', log: () => undefined, ...(passUnjudged ? { passUnjudged } : {}) });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    t.after(() => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }));
    return (server.address() as AddressInfo).port;
  };
  const body = { messages: [{ role: 'user', content: `${MARKER} do it` }] };
  const r = await post(await serve(), body);
  assert.deepEqual([r.status, r.headers['x-safekeep-action'], purposes], [200, 'refuse', ['judge', 'refusal']]);
  purposes.length = 0;
  const p = await post(await serve(['no-tools']), body);
  assert.deepEqual([p.status, p.headers['x-safekeep-action'], p.headers['x-safekeep-method'], purposes], [200, 'forward', 'base', ['agent']]);
});

test('lossless JSON: duplicate keys at any depth refused, digits kept, output is valid JSON that JSON.parse reads', () => {
  assert.throws(() => parseJsonLossless('{"a":{"b":1,"b":2}}', 'x'), /duplicate key "b" at \.a/);
  assert.throws(() => parseJsonLossless('[{"a":1},{"a":1,"a":1}]', 'x'), /duplicate key "a"/);
  const text = '{"n":-0.000123e-5,"big":98765432109876543210,"s":"\\u00e9\\n","arr":[true,false,null],"__proto__":1}';
  const out = stringifyLossless(parseJsonLossless(text, 'x'));
  assert.equal(out, '{"n":-0.000123e-5,"big":98765432109876543210,"s":"é\\n","arr":[true,false,null],"__proto__":1}');
  assert.deepEqual(Object.keys(JSON.parse(out) as object), ['n', 'big', 's', 'arr', '__proto__']);
  for (const bad of ['{"a":1,}', '{"a" 1}', '01', '"x', '{"a":1} x', '\u00a0{}']) assert.throws(() => parseJsonLossless(bad, 'x'), /x: /, bad);
});
