import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OpenAIBackend, BackendError, refusalFallbackInstruction, completionsUrl } from '../src/chat/openai.ts';
import { canonicalJson } from '../src/data/jsonfile.ts';
import { requestHash } from '../src/chat/cache.ts';
import { Limiter, backoffMs } from '../src/util/limit.ts';
import { REFUSAL_PREFIX } from '../src/guard/prompts.ts';
import { completion, startMockUpstream } from './helpers/guard-mock.ts';
import { apiKeyFromEnv } from '../src/cli/env.ts';
import { SafekeepError } from '../src/util/errors.ts';

const msgs = [{ role: 'system', content: 'Agent.' }, { role: 'user', content: 'Hi' }];
const fast = { retries: 2, backoffBaseMs: 5, backoffCapMs: 20 };

test('canonical JSON and request hash ignore key order', () => {
  assert.equal(canonicalJson({ b: 1, a: [{ d: 2, c: null }] }), '{"a":[{"c":null,"d":2}],"b":1}');
  assert.equal(requestHash('u', { x: 1, y: 2 }), requestHash('u', { y: 2, x: 1 }));
  assert.notEqual(requestHash('u', { x: 1 }), requestHash('v', { x: 1 }));
  assert.equal(completionsUrl('http://h/v1/'), 'http://h/v1/chat/completions');
  assert.equal(completionsUrl('http://h/v1/chat/completions'), 'http://h/v1/chat/completions');
});

test('backoff: exponential with full jitter, capped; Retry-After wins', () => {
  assert.equal(backoffMs(0, 100, 1000, undefined, () => 1), 100);
  assert.equal(backoffMs(3, 100, 1000, undefined, () => 1), 800);
  assert.equal(backoffMs(5, 100, 1000, undefined, () => 1), 1000);
  assert.equal(backoffMs(5, 100, 1000, undefined, () => 0.5), 500);
  assert.equal(backoffMs(0, 100, 5000, 2), 2000);
});

test('limiter: never more than n tasks at once', async () => {
  const lim = new Limiter(2);
  let active = 0, peak = 0;
  await Promise.all(Array.from({ length: 7 }, () => lim.run(async () => {
    active++; peak = Math.max(peak, active);
    await new Promise((r) => setTimeout(r, 5));
    active--;
  })));
  assert.equal(peak, 2);
});

test('OpenAIBackend: body, usage, tool calls, the key as a bearer token', async (t) => {
  const up = await startMockUpstream(() => ({ json: completion(null, { toolCalls: [{ id: '1', type: 'function', function: { name: 'f', arguments: '{}' } }], promptTokens: 42, completionTokens: 7 }) }));
  t.after(() => up.close());
  const b = new OpenAIBackend({ baseUrl: up.url, model: 'm1', apiKey: 'sk-test', ...fast });
  const tools = [{ type: 'function' as const, function: { name: 'f', description: '', parameters: { type: 'object' } } }];
  const r = await b.chat({ messages: msgs, tools, maxTokens: 9, purpose: 'agent' });
  assert.deepEqual([r.promptTokens, r.completionTokens, r.toolCalls[0]!.function.name, r.content, r.cached], [42, 7, 'f', '', false]);
  const rec = up.requests[0]!;
  assert.equal(rec.url, '/v1/chat/completions');
  assert.equal(rec.headers.authorization, 'Bearer sk-test');
  assert.deepEqual(rec.body, { model: 'm1', messages: msgs, max_tokens: 9, temperature: 0, tools });
});

test('apiKeyFromEnv: the variable --api-key-env names; unset → one clear error; no flag → the fallback or no key', () => {
  const env = { SAFEKEEP_TEST_KEY: 'sk-test', OPENAI_API_KEY: 'sk-default', EMPTY: '' };
  assert.equal(apiKeyFromEnv('api-key-env', 'SAFEKEEP_TEST_KEY', 'OPENAI_API_KEY', env), 'sk-test');
  assert.equal(apiKeyFromEnv('api-key-env', undefined, 'OPENAI_API_KEY', env), 'sk-default');
  assert.equal(apiKeyFromEnv('api-key-env', undefined, undefined, env), undefined);
  assert.equal(apiKeyFromEnv('api-key-env', undefined, 'OPENAI_API_KEY', {}), undefined);
  for (const name of ['NOPE', 'EMPTY']) {
    assert.throws(() => apiKeyFromEnv('judge-api-key-env', name, 'OPENAI_API_KEY', env), (e: unknown) =>
      e instanceof SafekeepError && e.message === `--judge-api-key-env ${name}: that environment variable is not set`);
  }
});

test('OpenAIBackend: retries 5xx/429 with backoff, then succeeds; 4xx is not retried', async (t) => {
  let n = 0;
  const up = await startMockUpstream((body) => {
    if ((body?.messages as { content: string }[])[1]!.content === 'bad') return { status: 400, json: { error: { message: 'bad model' } } };
    n++;
    return n === 1 ? { status: 500, json: { error: 'boom' } } : n === 2 ? { status: 429, json: {}, headers: { 'retry-after': '0' } } : { json: completion('hello') };
  });
  t.after(() => up.close());
  const b = new OpenAIBackend({ baseUrl: up.url, model: 'm', ...fast });
  const r = await b.chat({ messages: msgs, maxTokens: 5, purpose: 'agent' });
  assert.equal(r.content, 'hello');
  assert.equal(up.requests.length, 3);
  await assert.rejects(b.chat({ messages: [msgs[0]!, { role: 'user', content: 'bad' }], maxTokens: 5, purpose: 'agent' }), (e: unknown) => e instanceof BackendError && e.status === 400 && /HTTP 400: .*bad model/.test(e.message));
  assert.equal(up.requests.length, 4, 'a 400 is sent once');
});

test('OpenAIBackend: gives up after retries with a clear message (500, timeout, connection refused)', async (t) => {
  const up = await startMockUpstream((body) => ((body?.max_tokens as number) === 1 ? { delayMs: 1500, json: completion('late') } : { status: 503, json: { error: 'down' } }));
  t.after(() => up.close());
  const b = new OpenAIBackend({ baseUrl: up.url, model: 'm', ...fast, timeoutMs: 10_000 });
  await assert.rejects(b.chat({ messages: msgs, maxTokens: 5, purpose: 'agent' }), /HTTP 503.*\(after 3 attempts\)/);
  const impatient = new OpenAIBackend({ baseUrl: up.url, model: 'm', ...fast, retries: 1, timeoutMs: 100 });
  await assert.rejects(impatient.chat({ messages: msgs, maxTokens: 1, purpose: 'agent' }), (e: unknown) => e instanceof BackendError && e.status === -1 && /no response within 100 ms.*after 2 attempts/.test(e.message));
  const dead = new OpenAIBackend({ baseUrl: 'http://127.0.0.1:9/v1', model: 'm', retries: 0 });
  await assert.rejects(dead.chat({ messages: msgs, maxTokens: 1, purpose: 'agent' }), (e: unknown) => e instanceof BackendError && e.status === 0);
});

test('OpenAIBackend: response cache keyed by request hash; a re-run sends nothing', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-cache-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const up = await startMockUpstream((body) => ({ json: completion(`answer ${(body?.messages as unknown[]).length}`) }));
  t.after(() => up.close());
  const mk = () => new OpenAIBackend({ baseUrl: up.url, model: 'm', cacheDir: dir, ...fast });
  const a = await mk().chat({ messages: msgs, maxTokens: 5, purpose: 'agent' });
  const b = await mk().chat({ messages: msgs, maxTokens: 5, purpose: 'agent' });
  assert.deepEqual([a.cached, b.cached, b.content, up.requests.length], [false, true, 'answer 2', 1]);
  assert.equal(b.latencyMs, a.latencyMs, 'cached replies report the measured latency');
  await mk().chat({ messages: msgs, maxTokens: 6, purpose: 'agent' });
  assert.equal(up.requests.length, 2, 'a different request is a miss');
  const up2 = await startMockUpstream(() => ({ json: { choices: [] } }));
  t.after(() => up2.close());
  const empty = new OpenAIBackend({ baseUrl: up2.url, model: 'm', cacheDir: dir, ...fast });
  await assert.rejects(empty.chat({ messages: msgs, maxTokens: 5, purpose: 'agent' }), /no choices\[0\]\.message/);
  const files = readdirSync(dir, { recursive: true }).map(String).filter((f) => f.endsWith('.json'));
  assert.equal(files.length, 2);
  assert.ok(!readdirSync(dir, { recursive: true }).map(String).some((f) => f.endsWith('.tmp')));
});

test('OpenAIBackend: refusal prefill modes', async (t) => {
  const up = await startMockUpstream((body) => {
    const last = (body?.messages as { role: string; content: string }[]).at(-1)!;
    return { json: completion(last.role === 'assistant' && !body?.continue_final_message ? `${REFUSAL_PREFIX} No.` : body?.continue_final_message ? ' Because.' : 'It would harm people.') };
  });
  t.after(() => up.close());
  const call = { messages: msgs, prefix: REFUSAL_PREFIX, maxTokens: 20, purpose: 'refusal' as const };
  const c = await new OpenAIBackend({ baseUrl: up.url, model: 'm', prefill: 'continue' }).chat(call);
  assert.equal(c.content, `${REFUSAL_PREFIX} Because.`);
  assert.deepEqual(up.requests[0]!.body!.messages, [...msgs, { role: 'assistant', content: REFUSAL_PREFIX }]);
  assert.deepEqual([up.requests[0]!.body!.continue_final_message, up.requests[0]!.body!.add_generation_prompt], [true, false]);
  const p = await new OpenAIBackend({ baseUrl: up.url, model: 'm', prefill: 'prefix' }).chat(call);
  assert.equal(p.content, `${REFUSAL_PREFIX} No.`);
  assert.deepEqual((up.requests[1]!.body!.messages as unknown[]).at(-1), { role: 'assistant', content: REFUSAL_PREFIX, prefix: true });
  const n = await new OpenAIBackend({ baseUrl: up.url, model: 'm' }).chat(call);
  assert.equal(n.content, `${REFUSAL_PREFIX} It would harm people.`);
  assert.deepEqual(up.requests[2]!.body!.messages, [{ role: 'system', content: `Agent.\n\n${refusalFallbackInstruction(REFUSAL_PREFIX)}` }, msgs[1]]);
  assert.equal(up.requests[2]!.body!.tools, undefined);
});

test('OpenAIBackend: deadlineMs bounds a call — attempts, retries and backoff together; a deadline on the call\'s signal is a timeout, not a cancellation', async (t) => {
  const up = await startMockUpstream(() => ({ delayMs: 1500, json: completion('late') }));
  t.after(() => up.close());
  // 6 attempts of 300 ms would take about 2 s
  const b = new OpenAIBackend({ baseUrl: up.url, model: 'm', retries: 5, backoffBaseMs: 50, backoffCapMs: 100, timeoutMs: 300, deadlineMs: 500 });
  let t0 = performance.now();
  await assert.rejects(b.chat({ messages: msgs, maxTokens: 1, purpose: 'agent' }), (e: unknown) => e instanceof BackendError && e.status === -1 && /deadline/.test(e.message));
  assert.ok(performance.now() - t0 < 1000, `gave up after ${Math.round(performance.now() - t0)} ms`);
  const plain = new OpenAIBackend({ baseUrl: up.url, model: 'm', retries: 5, backoffBaseMs: 50, backoffCapMs: 100, timeoutMs: 300 });
  t0 = performance.now();
  await assert.rejects(plain.chat({ messages: msgs, maxTokens: 1, purpose: 'agent', signal: AbortSignal.timeout(400) }), (e: unknown) => e instanceof BackendError && e.status === -1 && /deadline/.test(e.message));
  assert.ok(performance.now() - t0 < 1000);
  const left = new AbortController();
  setTimeout(() => left.abort(), 100);
  await assert.rejects(plain.chat({ messages: msgs, maxTokens: 1, purpose: 'agent', signal: left.signal }), (e: unknown) => e instanceof BackendError && e.status === 0 && /cancelled/.test(e.message));
});
