/**
 * A server under load or facing a stuck judge still answers every client in bounded time, in JSON: one total
 * deadline per request (retries and backoff included) → 504 with nothing executed; over the connection cap idle
 * keep-alive sockets are closed first, and what still cannot be served gets a 503 with Retry-After (never a silent
 * reset), after which a pooled client works again; a body over the limit is answered with its 413 and read to a
 * bound before the connection closes, so that a client still writing (Node's own fetch) reads the answer instead
 * of EPIPE. Loopback only; every wait is bounded.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, createServer, request, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import { createGuardProxy, type ProxyOptions } from '../src/serve/proxy.ts';
import { createHttpServer } from '../src/http/server.ts';
import { loadSkills } from '../src/s3/skill-file.ts';
import { SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { completion, startMockUpstream, type MockAnswer, type MockUpstream } from './helpers/guard-mock.ts';
import { rawRequest } from './helpers/http-raw.ts';
import { serveExit, startServeCli, stopServe } from './helpers/serve-cli.ts';
import { repoRoot } from './helpers/shared.ts';

const tools = [{ type: 'function', function: { name: 'post_on_x', description: 'Post on X.', parameters: { type: 'object', properties: { content: { type: 'string' } }, required: ['content'] } } }];
const chatBody = { model: 'm', messages: [{ role: 'user', content: 'Post hello' }], tools };
type Msg = { role: string; content: string };

/** An endpoint that reads every request and never answers (a hung judge); it records the bodies it got. */
async function startHanging(t: import('node:test').TestContext): Promise<{ url: string; bodies: Record<string, unknown>[] }> {
  const bodies: Record<string, unknown>[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((req) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => { try { bodies.push(JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>); } catch { bodies.push({}); } });
  });
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => { for (const s of sockets) s.destroy(); server.close(() => r()); }));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, bodies };
}

async function listen(t: import('node:test').TestContext, server: Server): Promise<{ port: number; url: string }> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
  const port = (server.address() as AddressInfo).port;
  return { port, url: `http://127.0.0.1:${port}/v1` };
}

async function proxy(t: import('node:test').TestContext, o: ProxyOptions): Promise<{ port: number; url: string; logs: Record<string, unknown>[] }> {
  const logs: Record<string, unknown>[] = [];
  const server = createGuardProxy({ log: (l) => logs.push(JSON.parse(l) as Record<string, unknown>), ...o });
  return { ...(await listen(t, server)), logs };
}

async function mock(t: import('node:test').TestContext, script: (b: Record<string, unknown> | null) => MockAnswer | Promise<MockAnswer>): Promise<MockUpstream> {
  const up = await startMockUpstream(script);
  t.after(() => up.close());
  return up;
}

const postChat = (url: string, body: unknown = chatBody) => fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('deadline: a judge that never answers is a 504 JSON within about the request deadline, not retries × timeout; nothing is executed', async (t) => {
  const hung = await startHanging(t);
  // 6 attempts of 500 ms plus backoff would hold the client for over 3 s
  const { url, logs } = await proxy(t, { upstream: hung.url, judgeModel: 'judge-m', timeoutMs: 500, retries: 5, requestTimeoutMs: 700 });
  const t0 = performance.now();
  const r = await postChat(url);
  const ms = performance.now() - t0;
  assert.equal(r.status, 504);
  assert.equal(r.headers.get('x-safekeep-action'), 'error');
  const e = (await r.json()) as { error: { message: string; type: string; code: number } };
  assert.equal(e.error.code, 504);
  assert.match(e.error.message, /request not executed.*deadline|deadline/);
  assert.ok(ms < 2000, `answered after ${Math.round(ms)} ms (deadline 700 ms)`);
  assert.ok(hung.bodies.every((b) => (b.messages as Msg[])[0]!.content === SAFETY_ASSESSOR_ROLE), 'only judge calls went out');
  assert.ok(hung.bodies.length <= 2, `${hung.bodies.length} judge attempts`);
  await until(() => logs.length > 0, 1000, 'the log line');
  assert.equal(logs[0]!.status, 504);
});

test('deadline: the S³ guard is bounded by it too', async (t) => {
  const hung = await startHanging(t);
  const skills = loadSkills([join(repoRoot, 'skills')]);
  const { url } = await proxy(t, { upstream: hung.url, judgeModel: 'judge-m', timeoutMs: 500, retries: 5, requestTimeoutMs: 700, skills });
  const t0 = performance.now();
  const r = await postChat(url);
  const ms = performance.now() - t0;
  assert.equal(r.status, 504);
  assert.equal(((await r.json()) as { error: { code: number } }).error.code, 504);
  assert.ok(ms < 2000, `answered after ${Math.round(ms)} ms (deadline 700 ms)`);
  // the guard's own calls stop with the deadline: no further attempts afterwards
  const n = hung.bodies.length;
  await new Promise((r) => setTimeout(r, 800));
  assert.equal(hung.bodies.length, n, 'no guard attempts after the deadline');
});

test('deadline: it bounds the whole answer — a stream still running at the deadline ends there with an SSE error event, no [DONE]', async (t) => {
  const chunks = Array.from({ length: 100 }, (_, i) => JSON.stringify({ choices: [{ index: 0, delta: { content: `t${i} ` } }] }));
  const up = await mock(t, (b) => ((b?.messages as Msg[])[0]!.content === SAFETY_ASSESSOR_ROLE ? { json: completion('NO') } : { sse: [...chunks, '[DONE]'], sseDelayMs: 30 }));
  const { url } = await proxy(t, { upstream: up.url, judgeModel: 'judge-m', timeoutMs: 5000, retries: 0, requestTimeoutMs: 600 });
  const t0 = performance.now();
  const r = await postChat(url, { ...chatBody, stream: true });
  assert.equal(r.status, 200);
  const text = await r.text();
  const ms = performance.now() - t0;
  assert.match(text, /t0 /, 'what came before the deadline was passed on');
  assert.doesNotMatch(text, /t99 |\[DONE\]/);
  const last = JSON.parse(text.trim().split('\n\n').at(-1)!.replace(/^data: /, '')) as { error?: { type: string; message: string } };
  assert.equal(last.error?.type, 'upstream_timeout');
  assert.match(last.error!.message, /deadline/);
  assert.ok(ms < 2500, `ended ${Math.round(ms)} ms after the request; the deadline is 600 ms, the stream 3 s`);
});

test('deadline (HTTP core): a handler that ignores its signal is answered for with a 504 a second after the deadline; the signal fired with a TimeoutError', async (t) => {
  let reason: unknown;
  const server = createHttpServer({
    routes: { models: { methods: ['GET'], handle: (x) => new Promise<void>(() => { x.signal.addEventListener('abort', () => { reason = x.signal.reason; }); }) } },
    limits: { deadlineMs: 300 },
    log: () => undefined,
  });
  const { url } = await listen(t, server);
  const t0 = performance.now();
  const r = await fetch(`${url}/models`);
  const ms = performance.now() - t0;
  assert.equal(r.status, 504);
  assert.match(((await r.json()) as { error: { message: string } }).error.message, /within its deadline of 300 ms/);
  assert.ok(ms > 250 && ms < 2500, `answered after ${Math.round(ms)} ms`);
  assert.equal((reason as Error).name, 'TimeoutError');
});

test('serve CLI: --request-timeout-ms bounds the --upstream proxy too (a hung judge → 504 at the deadline); bad values exit 2', async (t) => {
  const hung = await startHanging(t);
  const serve = await startServeCli(['--upstream', hung.url, '--judge-model', 'judge-m', '--port', '0', '--timeout-ms', '1000', '--request-timeout-ms', '500']);
  t.after(() => stopServe(serve));
  const t0 = performance.now();
  const r = await postChat(serve.url);
  const ms = performance.now() - t0;
  assert.equal(r.status, 504);
  await r.text();
  assert.ok(ms < 2000, `answered after ${Math.round(ms)} ms (deadline 500 ms; 3 attempts of 1000 ms without it)`);
  const bad = await serveExit(['--upstream', hung.url, '--request-timeout-ms', '0']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--request-timeout-ms must be a positive integer/);
});

/** GET /v1/models through `agent`: status and body */
function getModels(port: number, agent: Agent | undefined): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/v1/models', agent, timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => { body += c.toString(); });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

test('connection cap: cap-many idle keep-alive connections — a new client is served (an idle one is closed), and the pooled client keeps working', async (t) => {
  const up = await mock(t, () => ({ json: { object: 'list', data: [] } }));
  const { port } = await proxy(t, { upstream: up.url, judgeModel: 'judge-m', timeoutMs: 5000, retries: 0, limits: { maxConnections: 4, idleTimeoutMs: 30_000 } });
  const pooled = new Agent({ keepAlive: true });
  t.after(() => pooled.destroy());
  const first = await Promise.all([0, 1, 2, 3].map(() => getModels(port, pooled)));
  assert.deepEqual(first.map((r) => r.status), [200, 200, 200, 200]);
  assert.equal(Object.values(pooled.freeSockets).flat().length, 4, 'four idle keep-alive connections');
  const other = new Agent({ keepAlive: true });
  t.after(() => other.destroy());
  assert.equal((await getModels(port, other)).status, 200, 'a new connection is served');
  await new Promise((r) => setTimeout(r, 50));
  const again = await Promise.all([0, 1, 2, 3].map(() => getModels(port, pooled)));
  assert.deepEqual(again.map((r) => r.status), [200, 200, 200, 200]);
});

test('connection cap: cap-many busy connections — a new one gets a 503 JSON with Retry-After; once the load passes a pooled client (fetch) works again', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((r) => { release = r; });
  let held = 0;
  const up = await mock(t, async () => { held++; await gate; return { json: { object: 'list', data: [] } }; });
  const { url, logs } = await proxy(t, { upstream: up.url, judgeModel: 'judge-m', timeoutMs: 5000, retries: 0, limits: { maxConnections: 3 } });
  const busy = [0, 1, 2].map(() => fetch(`${url}/models`));
  await until(() => held === 3, 3000, 'three requests in flight');
  const r = await fetch(`${url}/models`);
  assert.equal(r.status, 503);
  assert.ok(Number(r.headers.get('retry-after')) >= 1, 'Retry-After');
  assert.equal(r.headers.get('connection'), 'close');
  const e = (await r.json()) as { error: { message: string; code: number; type: string } };
  assert.equal(e.error.code, 503);
  assert.match(e.error.message, /connection/);
  // a POST with a body over the cap gets its 503 too (read, then closed)
  const p = await postChat(url);
  assert.equal(p.status, 503);
  await p.text();
  release();
  assert.deepEqual((await Promise.all(busy)).map((x) => x.status), [200, 200, 200]);
  for (let i = 0; i < 3; i++) {
    const ok = await fetch(`${url}/models`);
    assert.equal(ok.status, 200, `sequential request ${i} after the load`);
    await ok.text();
  }
  const burst = await Promise.all([0, 1, 2].map(() => fetch(`${url}/models`).then(async (x) => { await x.text(); return x.status; })));
  assert.deepEqual(burst, [200, 200, 200]);
  assert.ok(logs.some((l) => l.status === 503), 'the refusal is logged');
});

test('a body over the limit: Node\'s own fetch posting 20 MB to the serve CLI (16 MiB limit) reads the JSON 413, never EPIPE — declared or chunked; the server keeps serving', async (t) => {
  const up = await mock(t, () => ({ json: completion('hi') }));
  // a server in another process: the client's upload and the server's close race as they do in use
  const serve = await startServeCli(['--upstream', up.url, '--judge-model', 'judge-m', '--port', '0']);
  t.after(() => stopServe(serve));
  const url = `${serve.url}/chat/completions`;
  const big = Buffer.alloc(20 * 1024 * 1024, 0x61);
  const outcome = async (p: Promise<Response>) => {
    try {
      const r = await p;
      const e = (await r.json()) as { error?: { message: string } };
      return `${r.status} ${e.error?.message ?? ''}`;
    } catch (err) {
      return String((err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message);
    }
  };
  const declared: string[] = [];
  for (let i = 0; i < 5; i++) declared.push(await outcome(fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: big })));
  assert.deepEqual(declared, Array(5).fill('413 request body exceeds 16777216 bytes'));
  const chunked: string[] = [];
  for (let i = 0; i < 2; i++) {
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(c) {
        if (sent >= big.length) { c.close(); return; }
        c.enqueue(big.subarray(sent, sent + 256 * 1024));
        sent += 256 * 1024;
      },
    });
    chunked.push(await outcome(fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: stream, duplex: 'half' } as RequestInit)));
  }
  assert.deepEqual(chunked, Array(2).fill('413 request body exceeds 16777216 bytes'));
  assert.equal(up.requests.length, 0);
  const ok = await postChat(serve.url, { model: 'm', messages: [{ role: 'user', content: 'Hello' }] });
  assert.equal(ok.status, 200);
  await ok.text();
});

test('a body over the limit: a client that keeps sending past the bound is cut off, not read forever', async (t) => {
  const up = await mock(t, () => ({ json: completion('hi') }));
  const { port } = await proxy(t, { upstream: up.url, judgeModel: 'judge-m', timeoutMs: 5000, retries: 0, maxBodyBytes: 1000, limits: { requestTimeoutMs: 1000 } });
  const r = await rawRequest(port, { path: '/v1/chat/completions', body: 'x'.repeat(5000) });
  assert.equal(r.status, 413);
  // a declared 1 GB body sent slowly: the answer comes at once; the connection closes within the request timeout
  const { connect } = await import('node:net');
  const s = connect(port, '127.0.0.1');
  s.on('error', () => undefined);
  let answer = '';
  s.on('data', (c: Buffer) => { answer += c.toString(); });
  const closed = new Promise<number>((r) => s.on('close', () => r(performance.now())));
  s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 1000000000\r\n\r\n');
  const timer = setInterval(() => { if (!s.destroyed) s.write('x'.repeat(1000)); }, 20);
  t.after(() => { clearInterval(timer); s.destroy(); });
  const t0 = performance.now();
  await until(() => answer.includes('exceeds 1000 bytes'), 2000, 'the 413');
  assert.match(answer, /^HTTP\/1\.1 413/);
  const end = await closed;
  clearInterval(timer);
  assert.ok(end - t0 < 3000, `closed after ${Math.round(end - t0)} ms`);
});
