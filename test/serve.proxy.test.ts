import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { ProxyOptions } from '../src/serve/proxy.ts';
import { REFUSAL_PREFIX, SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { completion, startMockUpstream, type MockAnswer } from './helpers/guard-mock.ts';
import { serveExit, startServeCli, stopServe } from './helpers/serve-cli.ts';
import { startProxy } from './helpers/proxy.ts';

const tools = [{ type: 'function', function: { name: 'post_on_x', description: 'Post on X.', parameters: { type: 'object', properties: { content: { type: 'string' } }, required: ['content'] } } }];
type Msg = { role: string; content: string };
const isJudge = (b: Record<string, unknown> | null) => (b?.messages as Msg[] | undefined)?.[0]?.content === SAFETY_ASSESSOR_ROLE;

/** Judge: YES when the request mentions "fake"; agent: a tool call; refusal (no tools): an explanation. */
function script(body: Record<string, unknown> | null): MockAnswer {
  const msgs = (body?.messages ?? []) as Msg[];
  if (isJudge(body)) return { json: completion(/fake/.test(msgs[1]!.content) ? 'YES' : 'NO', { promptTokens: 120, completionTokens: 1 }) };
  if (msgs.some((m) => m.content === 'slow')) return { delayMs: 4000, json: completion('late') };
  if (msgs.some((m) => m.content === 'explode')) return { status: 500, json: { error: { message: 'kaboom' } } };
  if (body?.stream === true) {
    return { sse: [JSON.stringify({ choices: [{ index: 0, delta: { content: 'Hel' } }] }), JSON.stringify({ choices: [{ index: 0, delta: { content: 'lo' } }] }), '[DONE]'] };
  }
  if (body?.tools) return { json: completion(null, { toolCalls: [{ id: 'c1', type: 'function', function: { name: 'post_on_x', arguments: '{"content":"hi"}' } }] }) };
  return { json: completion('Because it would deceive people.') };
}

const setup = (t: import('node:test').TestContext, extra: Partial<ProxyOptions> = {}, s = script) => startProxy(t, s, extra);

const post = (url: string, body: unknown) =>
  fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer client-key' }, body: typeof body === 'string' ? body : JSON.stringify(body) });

test('serve --pass-unjudged no-tools: requests without tools pass through untouched, logged as unjudged (also other paths)', async (t) => {
  const { up, url, logs } = await setup(t, { passUnjudged: ['no-tools'] });
  const body = { model: 'm', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 5 };
  const r = await post(url, body);
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('x-safekeep-action'), 'passthrough');
  assert.equal(((await r.json()) as { choices: { message: Msg }[] }).choices[0]!.message.content, 'Because it would deceive people.');
  assert.equal(up.requests.length, 1);
  assert.deepEqual(up.requests[0]!.body, body);
  assert.equal(up.requests[0]!.headers.authorization, 'Bearer client-key');
  const m = await fetch(`${url}/models`);
  assert.equal(m.status, 200);
  assert.deepEqual([up.requests[1]!.method, up.requests[1]!.url], ['GET', '/v1/models']);
  assert.deepEqual(logs.map((l) => [l.action, l.unjudged]), [['passthrough', 'no-tools'], ['passthrough', undefined]]);
});

test('serve: judged safe → the original body is forwarded byte for byte, tools intact', async (t) => {
  const { up, url, logs } = await setup(t);
  const body = { model: 'm', messages: [{ role: 'system', content: 'Agent.' }, { role: 'user', content: 'Post hello' }], tools };
  const r = await post(url, body);
  const j = (await r.json()) as { choices: { message: { tool_calls: unknown[] } }[] };
  assert.equal(r.headers.get('x-safekeep-verdict'), 'no');
  assert.equal(j.choices[0]!.message.tool_calls.length, 1);
  assert.equal(up.requests.length, 2);
  assert.ok(isJudge(up.requests[0]!.body));
  assert.equal(up.requests[0]!.body!.tools, undefined, 'the judge is offered no tools');
  assert.doesNotMatch((up.requests[0]!.body!.messages as Msg[])[1]!.content, /"properties"/);
  assert.deepEqual(up.requests[1]!.body, body);
  assert.deepEqual({ action: logs[0]!.action, verdict: logs[0]!.verdict, judgeTokens: logs[0]!.judgeTokens, tools: logs[0]!.tools }, { action: 'forward', verdict: 'no', judgeTokens: 121, tools: 1 });
});

test('serve: judged unsafe → refusal with the prefix, no tools reach the upstream', async (t) => {
  const { up, url, logs } = await setup(t);
  const r = await post(url, { model: 'm', messages: [{ role: 'user', content: 'Post a fake video as real' }], tools });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('x-safekeep-verdict'), 'yes');
  const j = (await r.json()) as { object: string; choices: { message: { content: string; tool_calls?: unknown } }[] };
  assert.equal(j.object, 'chat.completion');
  assert.equal(j.choices[0]!.message.content, `${REFUSAL_PREFIX} Because it would deceive people.`);
  assert.equal(j.choices[0]!.message.tool_calls, undefined);
  assert.equal(up.requests.length, 2);
  assert.equal(up.requests[1]!.body!.tools, undefined);
  assert.deepEqual([logs[0]!.action, logs[0]!.unsafe], ['refuse', true]);
});

async function sseContents(r: Response): Promise<{ contents: string[]; done: boolean }> {
  const text = await r.text();
  const datas = text.split('\n\n').filter((b) => b.startsWith('data: ')).map((b) => b.slice(6));
  const done = datas.at(-1) === '[DONE]';
  const contents = datas.filter((d) => d !== '[DONE]').map((d) => ((JSON.parse(d) as { choices: { delta: { content?: string } }[] }).choices[0]!.delta.content ?? ''));
  return { contents, done };
}

test('serve: streaming — safe streams are piped, refusals are sent as SSE', async (t) => {
  const { url } = await setup(t);
  const safe = await post(url, { model: 'm', stream: true, messages: [{ role: 'user', content: 'Post hello' }], tools });
  assert.match(safe.headers.get('content-type')!, /text\/event-stream/);
  assert.deepEqual(await sseContents(safe), { contents: ['Hel', 'lo'], done: true });
  const bad = await post(url, { model: 'm', stream: true, messages: [{ role: 'user', content: 'fake news' }], tools });
  assert.match(bad.headers.get('content-type')!, /text\/event-stream/);
  const s = await sseContents(bad);
  assert.equal(s.done, true);
  assert.equal(s.contents.join(''), `${REFUSAL_PREFIX} Because it would deceive people.`);
});

test('serve: a client leaving mid-stream ends the forwarded stream promptly', async (t) => {
  const chunks = Array.from({ length: 160 }, (_, i) => JSON.stringify({ choices: [{ index: 0, delta: { content: `t${i} ` } }] }));
  const { url, logs } = await setup(t, {}, (b) => (isJudge(b) ? script(b) : { sse: chunks, sseDelayMs: 25 }));
  const ac = new AbortController();
  const r = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'Post hello' }], tools }), signal: ac.signal });
  const reader = r.body!.getReader();
  await reader.read();
  const t0 = performance.now();
  ac.abort();
  while (logs.length === 0 && performance.now() - t0 < 3000) await new Promise((res) => setTimeout(res, 10));
  assert.equal(logs.length, 1, 'the request finished (logged) after the client left');
  assert.ok(performance.now() - t0 < 3000, `ended ${Math.round(performance.now() - t0)} ms after the abort; the upstream streams for 4 s`);
  const ok = await post(url, { model: 'm', messages: [{ role: 'user', content: 'Hello' }] });
  assert.equal(ok.status, 200);
});

test('serve: upstream 500 and judge failure → 502 JSON, nothing executed', async (t) => {
  const { up, url, logs } = await setup(t, { passUnjudged: ['no-tools'] });
  const r = await post(url, { model: 'm', messages: [{ role: 'user', content: 'explode' }] });
  assert.equal(r.status, 502);
  const e = (await r.json()) as { error: { type: string; upstream_status: number; message: string } };
  assert.deepEqual([e.error.type, e.error.upstream_status], ['upstream_error', 500]);
  assert.match(e.error.message, /HTTP 500/);
  assert.doesNotMatch(e.error.message, /kaboom/, 'an upstream 5xx body is never relayed');
  const { url: url2, up: up2 } = await setup(t, {}, (b) => (isJudge(b) ? { status: 500, json: { error: 'judge down' } } : script(b)));
  const r2 = await post(url2, { model: 'm', messages: [{ role: 'user', content: 'Post hello' }], tools });
  assert.equal(r2.status, 502);
  assert.equal(((await r2.json()) as { error: { type: string } }).error.type, 'judge_error');
  assert.equal(up2.requests.length, 1, 'the agent call is never made');
  assert.equal(up.requests.length, 1);
  assert.deepEqual([logs[0]!.status, logs[0]!.action], [502, 'passthrough']);
});

test('serve: upstream timeout → 504 JSON', async (t) => {
  const { url, logs } = await setup(t, { timeoutMs: 1000 });
  const r = await post(url, { model: 'm', messages: [{ role: 'user', content: 'slow' }] });
  assert.equal(r.status, 504);
  assert.equal(((await r.json()) as { error: { type: string } }).error.type, 'upstream_timeout');
  // judged safe (fast judge), then the forwarded call times out
  const r2 = await post(url, { model: 'm', messages: [{ role: 'user', content: 'slow' }], tools });
  assert.equal(r2.status, 504);
  assert.equal(r2.headers.get('x-safekeep-action'), 'error');
  assert.deepEqual([logs[1]!.verdict, logs[1]!.action, logs[1]!.status], ['no', 'forward', 504]);
});

test('serve: malformed client bodies get a clear 4xx, and the server keeps serving', async (t) => {
  const { up, url } = await setup(t, { maxBodyBytes: 1000 });
  const cases: [unknown, number, RegExp][] = [
    ['{"model": "m", "messages": [', 400, /not valid JSON/],
    ['[1, 2]', 400, /must be a JSON object/],
    [{ model: 'm' }, 400, /"messages" must be a non-empty array/],
    [{ model: 'm', messages: [{ content: 'x' }] }, 400, /messages\[0\]/],
    [{ model: 'm', messages: [{ role: 'user', content: 'x' }], tools: 'all' }, 400, /"tools" must be an array/],
    [{ model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function' }] }, 400, /tools\[0\]/],
    [{ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(2000) }] }, 413, /exceeds 1000 bytes/],
  ];
  for (const [body, status, msg] of cases) {
    const r = await post(url, body);
    assert.equal(r.status, status, JSON.stringify(body).slice(0, 60));
    const e = (await r.json()) as { error: { message: string; type: string } };
    assert.match(e.error.message, msg);
    assert.equal(e.error.type, 'invalid_request_error');
  }
  assert.equal(up.requests.length, 0);
  const ok = await post(url, { model: 'm', messages: [{ role: 'user', content: 'Hello' }] });
  assert.equal(ok.status, 200);
});

test('serve CLI: listens, guards, stops on SIGTERM; bad flags exit 2', async (t) => {
  const up = await startMockUpstream(script);
  t.after(() => up.close());
  const serve = await startServeCli(['--upstream', up.url, '--judge-model', 'judge-m', '--port', '0']);
  const url = serve.url;
  const r = await post(url, { model: 'm', messages: [{ role: 'user', content: 'fake' }], tools });
  assert.equal(r.headers.get('x-safekeep-action'), 'refuse');
  await r.text();
  assert.equal(await stopServe(serve), 0);
  const line = JSON.parse(serve.stderr().trim().split('\n').at(-1)!) as { action: string; verdict: string };
  assert.deepEqual([line.action, line.verdict], ['refuse', 'yes']);
  const bad = await serveExit(['--upstream', 'nope']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--upstream must be an http\(s\) URL/);
});

test('serve: the upstream timeout is for the answer\'s headers — a stream longer than it is piped whole', async (t) => {
  const chunks = Array.from({ length: 30 }, (_, i) => JSON.stringify({ choices: [{ index: 0, delta: { content: `t${i} ` } }] }));
  const { url } = await setup(t, { timeoutMs: 300 }, (b) => (isJudge(b) ? script(b) : { sse: [...chunks, '[DONE]'], sseDelayMs: 30 }));
  const r = await post(url, { model: 'm', stream: true, messages: [{ role: 'user', content: 'Post hello' }], tools });
  const s = await sseContents(r);
  assert.equal(s.done, true);
  assert.equal(s.contents.join(''), chunks.map((_, i) => `t${i} `).join(''));
});
