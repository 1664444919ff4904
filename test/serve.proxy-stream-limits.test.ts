/**
 * Streams without an end: an upstream that sends its headers and part of an answer, then nothing, holds a client of
 * the SafeKeep proxy no longer than `timeoutMs` (`--timeout-ms`, the wait between two chunks), and one that keeps
 * trickling no longer than `requestTimeoutMs` (`--request-timeout-ms`, the whole answer). A begun stream then ends
 * with an SSE error event in OpenAI's shape and no [DONE]; a non-streamed answer that stalls is a JSON 504; the
 * upstream read is cancelled either way. Scripted upstream on 127.0.0.1; every wait in the test is bounded.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { completion, type MockAnswer, type RecordedRequest } from './helpers/guard-mock.ts';
import { startProxy } from './helpers/proxy.ts';

const tools = [{ type: 'function', function: { name: 'post_on_x', description: 'Post on X.', parameters: { type: 'object', properties: { content: { type: 'string' } }, required: ['content'] } } }];
const isJudge = (b: Record<string, unknown> | null) => (b?.messages as { content?: unknown }[] | undefined)?.[0]?.content === SAFETY_ASSESSOR_ROLE;
const chunk = (text: string) => JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: text }, finish_reason: null }] });

/** judged safe, then `agent` answers the forwarded request */
const judgedSafe = (agent: MockAnswer) => (b: Record<string, unknown> | null): MockAnswer => (isJudge(b) ? { json: completion('NO') } : agent);

/** the client's whole stream as text and how long it took; the test's own bound is 15 s */
async function readAll(url: string, stream: boolean): Promise<{ status: number; type: string; text: string; ms: number }> {
  const t0 = performance.now();
  const r = await fetch(`${url}/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(15_000),
    body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: 'Post hello' }], tools }),
  });
  const text = await r.text();
  return { status: r.status, type: r.headers.get('content-type') ?? '', text, ms: performance.now() - t0 };
}

/** the events of an SSE text: the parsed `data:` payloads ([DONE] as the string) */
function events(text: string): unknown[] {
  return text.split('\n\n').map((e) => e.trim()).filter((e) => e.startsWith('data: ')).map((e) => {
    const d = e.slice(6);
    return d === '[DONE]' ? d : JSON.parse(d) as unknown;
  });
}

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const t0 = performance.now();
  while (!cond() && performance.now() - t0 < ms) await new Promise((r) => setTimeout(r, 20));
  return cond();
}

const agentRequest = (reqs: RecordedRequest[]) => reqs.find((r) => !isJudge(r.body))!;

test('a stream that stalls after its first chunk ends at the idle limit (--timeout-ms) with an SSE error event, not at the deadline', async (t) => {
  const { up, url, logs } = await startProxy(t, judgedSafe({ sse: [chunk('Hel')], stall: true }), { timeoutMs: 700, requestTimeoutMs: 6000 });
  const r = await readAll(url, true);
  assert.equal(r.status, 200);
  assert.match(r.type, /text\/event-stream/);
  const ev = events(r.text);
  assert.equal(ev.length, 2, r.text);
  assert.equal((ev[0] as { choices: { delta: { content: string } }[] }).choices[0]!.delta.content, 'Hel');
  const err = (ev[1] as { error: { message: string; type: string; code: number } }).error;
  assert.equal(err.type, 'upstream_timeout');
  assert.equal(err.code, 504);
  assert.match(err.message, /no data for 700 ms/);
  assert.ok(!r.text.includes('[DONE]'), 'a cut stream is never completed with [DONE]');
  assert.ok(r.ms < 4000, `the client was held ${Math.round(r.ms)} ms; the idle limit is 700 ms, the deadline 6000 ms`);
  assert.ok(await until(() => agentRequest(up.requests).closed === true, 3000), 'the upstream read was cancelled (its connection closed)');
  assert.ok(await until(() => logs.length === 1, 3000));
  assert.deepEqual([logs[0]!.status, logs[0]!.action], [504, 'forward']);
  assert.match(String(logs[0]!.error), /no data for 700 ms/);
});

test('a stream that keeps trickling ends at the request deadline (--request-timeout-ms) with an SSE error event', async (t) => {
  const trickle = Array.from({ length: 400 }, (_, i) => chunk(`t${i} `));
  const { up, url } = await startProxy(t, judgedSafe({ sse: trickle, sseDelayMs: 100 }), { timeoutMs: 1000, requestTimeoutMs: 1500 });
  const r = await readAll(url, true);
  const ev = events(r.text);
  assert.ok(ev.length > 3, `some of the stream came through first (${ev.length} events)`);
  const last = ev.at(-1) as { error?: { message: string; type: string } };
  assert.equal(last.error?.type, 'upstream_timeout', r.text.slice(-300));
  assert.match(last.error!.message, /deadline/);
  assert.ok(!r.text.includes('[DONE]'));
  assert.ok(r.ms < 5000, `the client was held ${Math.round(r.ms)} ms; the deadline is 1500 ms and the upstream would stream for 40 s`);
  assert.ok(await until(() => agentRequest(up.requests).closed === true, 3000), 'the upstream read was cancelled');
});

test('an SSE event cut in half by the stall: the error event still starts on an event boundary', async (t) => {
  // the upstream's first write ends inside an event (no blank line after it)
  const { url } = await startProxy(t, judgedSafe({ sse: [`${chunk('Hel')}\n\ndata: {"choi`], stall: true }), { timeoutMs: 500, requestTimeoutMs: 6000 });
  const r = await readAll(url, true);
  const blocks = r.text.split('\n\n').filter((b) => b.trim());
  const last = JSON.parse(blocks.at(-1)!.replace(/^data: /, '')) as { error?: { type: string } };
  assert.equal(last.error?.type, 'upstream_timeout', r.text);
});

test('a non-streamed answer that stalls mid-body is a JSON 504 (nothing was sent yet), within the idle limit', async (t) => {
  const { up, url } = await startProxy(t, judgedSafe({ raw: '{"id":"cmpl-1","object":"chat.completion","choices":[{"index":0,', stall: true }), { timeoutMs: 600, requestTimeoutMs: 6000 });
  const r = await readAll(url, false);
  assert.equal(r.status, 504);
  assert.match(r.type, /application\/json/);
  const e = (JSON.parse(r.text) as { error: { type: string; message: string } }).error;
  assert.equal(e.type, 'upstream_timeout');
  assert.match(e.message, /no data for 600 ms/);
  assert.ok(r.ms < 4000, `held ${Math.round(r.ms)} ms`);
  assert.ok(await until(() => agentRequest(up.requests).closed === true, 3000), 'the upstream read was cancelled');
});

test('a non-streamed answer that trickles past the deadline is a JSON 504', async (t) => {
  // a JSON-typed body arriving a few bytes every 100 ms (never 600 ms apart) for 40 s; the deadline is 1200 ms
  const trickle = Array.from({ length: 400 }, () => ' ');
  const { up, url } = await startProxy(t, judgedSafe({ sse: trickle, sseDelayMs: 100, headers: { 'content-type': 'application/json' } }), { timeoutMs: 600, requestTimeoutMs: 1200 });
  const r = await readAll(url, false);
  assert.equal(r.status, 504);
  assert.match((JSON.parse(r.text) as { error: { message: string } }).error.message, /deadline/);
  assert.ok(r.ms < 5000, `held ${Math.round(r.ms)} ms`);
  assert.ok(await until(() => agentRequest(up.requests).closed === true, 3000), 'the upstream read was cancelled');
});

test('a whole answer, streamed or not, is passed on unchanged within the limits', async (t) => {
  const { url } = await startProxy(t, (b) => (isJudge(b) ? { json: completion('NO') } : b?.stream ? { sse: [chunk('Hel'), chunk('lo'), '[DONE]'], sseDelayMs: 50 } : { json: completion('Hello') }), { timeoutMs: 600, requestTimeoutMs: 6000 });
  const s = await readAll(url, true);
  assert.deepEqual(events(s.text).map((e) => (e === '[DONE]' ? e : (e as { choices: { delta: { content: string } }[] }).choices[0]!.delta.content)), ['Hel', 'lo', '[DONE]']);
  const j = await readAll(url, false);
  assert.equal(j.status, 200);
  assert.equal((JSON.parse(j.text) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'Hello');
});

test('a client that stops reading a stream is let go at the deadline: the request ends (logged) and the upstream read is cancelled', async (t) => {
  // 40 MB of events sent as fast as possible; the client reads nothing, so the proxy waits on a full socket buffer
  const big = chunk('x'.repeat(10_000));
  const { up, port, logs } = await startProxy(t, judgedSafe({ sse: Array.from({ length: 4000 }, () => big) }), { timeoutMs: 5000, requestTimeoutMs: 1000 });
  const body = JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'Post hello' }], tools });
  const s = connect(port, '127.0.0.1');
  s.on('error', () => undefined);
  t.after(() => s.destroy());
  s.pause();
  s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  const t0 = performance.now();
  assert.ok(await until(() => logs.length === 1, 6000), 'the request ended');
  assert.ok(performance.now() - t0 < 5000, `ended after ${Math.round(performance.now() - t0)} ms; the deadline is 1000 ms`);
  assert.equal(logs[0]!.status, 504);
  assert.ok(await until(() => agentRequest(up.requests).closed === true, 3000), 'the upstream read was cancelled');
});
