/**
 * Who may use a safekeep server, and how long a client may hold it: the client key (Bearer, constant-time compare,
 * never forwarded upstream), browser requests (text/plain simple POSTs and foreign origins refused unless --cors),
 * the Host check against DNS rebinding on loopback, and slow clients dropped by the header/request timeouts and the
 * connection cap while a normal client is still served. Loopback only; every wait is bounded.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import type { ProxyOptions } from '../src/serve/proxy.ts';
import { bearerToken, hostName, isLoopbackHost, secretEquals } from '../src/http/policy.ts';
import { completion } from './helpers/guard-mock.ts';
import { rawRequest } from './helpers/http-raw.ts';
import { startProxy } from './helpers/proxy.ts';

const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hello' }] });

const setup = (t: import('node:test').TestContext, extra: Partial<ProxyOptions> = {}) => startProxy(t, () => ({ json: completion('hi') }), { timeoutMs: 5000, ...extra });

test('secretEquals / bearerToken', () => {
  assert.equal(secretEquals('abc', 'abc'), true);
  assert.equal(secretEquals('abc', 'abd'), false);
  assert.equal(secretEquals('abc', 'abcd'), false);
  assert.equal(secretEquals('', 'x'), false);
  assert.equal(bearerToken('Bearer k1'), 'k1');
  assert.equal(bearerToken('bearer   k1 '), 'k1');
  assert.equal(bearerToken('Basic k1'), null);
  assert.equal(bearerToken('Bearer a b'), null);
  assert.equal(bearerToken(undefined), null);
});

test('loopback listen addresses (the CLI refuses anything else without --client-key-env) and Host names', () => {
  for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]', '::ffff:127.0.0.1']) assert.equal(isLoopbackHost(h), true, h);
  for (const h of ['0.0.0.0', '::', '192.168.1.10', '10.0.0.1', 'example.com', '128.0.0.1']) assert.equal(isLoopbackHost(h), false, h);
  assert.deepEqual(['Localhost:8080', '[::1]:80', '127.0.0.1', 'a.b:1'].map(hostName), ['localhost', '[::1]', '127.0.0.1', 'a.b']);
});

test('client key: missing or wrong → 401 (WWW-Authenticate), right → served; the client key never goes upstream', async (t) => {
  const { up, port } = await setup(t, { clientKey: 'client-secret' });
  for (const auth of [undefined, 'Bearer wrong', 'Bearer client-secre', 'Bearer client-secret2', 'client-secret', 'Basic Y2xpZW50LXNlY3JldA==']) {
    const r = await rawRequest(port, { path: '/v1/chat/completions', body, headers: auth ? { authorization: auth } : {} });
    assert.equal(r.status, 401, String(auth));
    assert.equal(r.headers['www-authenticate'], 'Bearer');
    assert.equal(r.json().error?.type, 'authentication_error');
  }
  // 404s are behind the key too (no probing of routes)
  assert.equal((await rawRequest(port, { method: 'GET', path: '/v1/nothing' })).status, 401);
  assert.equal(up.requests.length, 0);
  const ok = await rawRequest(port, { path: '/v1/chat/completions', body, headers: { authorization: 'Bearer client-secret' } });
  assert.equal(ok.status, 200);
  assert.equal(up.requests[0]!.headers.authorization, undefined, 'no upstream key configured: none is sent, and never the client key');
  const { up: up2, port: port2 } = await setup(t, { clientKey: 'client-secret', apiKey: 'upstream-key' });
  await rawRequest(port2, { path: '/v1/chat/completions', body, headers: { authorization: 'Bearer client-secret' } });
  assert.equal(up2.requests[0]!.headers.authorization, 'Bearer upstream-key');
});

test('browsers: a text/plain simple POST and a foreign Origin are refused; --cors ORIGIN is served with CORS headers', async (t) => {
  const { up, port } = await setup(t, { apiKey: 'server-key', corsOrigins: ['http://app.localhost:3000'] });
  const plain = await rawRequest(port, { path: '/v1/chat/completions', body, headers: { 'content-type': 'text/plain' } });
  assert.equal(plain.status, 415);
  const form = await rawRequest(port, { path: '/v1/chat/completions', body, headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  assert.equal(form.status, 415);
  const foreign = await rawRequest(port, { path: '/v1/chat/completions', body, headers: { origin: 'http://evil.example', 'content-type': 'text/plain' } });
  assert.equal(foreign.status, 403);
  assert.match(foreign.json().error!.message, /cross-origin request from 'http:\/\/evil\.example' refused/);
  assert.equal((await rawRequest(port, { path: '/v1/chat/completions', body, headers: { origin: 'null' } })).status, 403);
  assert.equal(up.requests.length, 0, 'nothing ran with the server key');
  const pre = await rawRequest(port, { method: 'OPTIONS', path: '/v1/chat/completions', headers: { origin: 'http://app.localhost:3000', 'access-control-request-method': 'POST' } });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers['access-control-allow-origin'], 'http://app.localhost:3000');
  const ok = await rawRequest(port, { path: '/v1/chat/completions', body, headers: { origin: 'http://app.localhost:3000' } });
  assert.equal(ok.status, 200);
  assert.equal(ok.headers['access-control-allow-origin'], 'http://app.localhost:3000');
  // the judge's call and the answering call (a request without tools is judged too)
  assert.equal(up.requests.length, 2);
});

test('Host check on loopback (DNS rebinding): a foreign Host is refused, loopback names and --allowed-hosts served', async (t) => {
  const { up, port } = await setup(t, { allowedHosts: ['gpu-box.internal'] });
  for (const host of ['evil.example', `evil.example:${port}`, '127.0.0.1.evil.example', 'localhost.evil.example']) {
    const r = await rawRequest(port, { path: '/v1/chat/completions', body, headers: { host } });
    assert.equal(r.status, 403, host);
    assert.match(r.json().error!.message, /DNS-rebinding/);
  }
  assert.equal(up.requests.length, 0);
  for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'localhost', `[::1]:${port}`, 'gpu-box.internal:8080']) {
    assert.equal((await rawRequest(port, { path: '/v1/chat/completions', body, headers: { host } })).status, 200, host);
  }
});

test('slow clients: 60 slow-loris connections are dropped by the timeouts and the connection cap; a normal client is served', async (t) => {
  const { port } = await setup(t, { limits: { maxConnections: 20, headersTimeoutMs: 800, requestTimeoutMs: 1200, idleTimeoutMs: 500 } });
  const sockets: Socket[] = [];
  let closed = 0;
  const timers: NodeJS.Timeout[] = [];
  t.after(() => { for (const x of timers) clearInterval(x); for (const s of sockets) s.destroy(); });
  for (let i = 0; i < 60; i++) {
    const s = connect(port, '127.0.0.1');
    s.on('error', () => undefined);
    s.on('close', () => { closed++; });
    sockets.push(s);
    // half send headers one byte at a time, half send full headers and then a body one byte at a time
    const head = i % 2 === 0 ? 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n' : `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n`;
    let k = 0;
    if (i % 2 === 1) s.write(head);
    timers.push(setInterval(() => { if (!s.destroyed) s.write(i % 2 === 0 ? head[k++ % head.length]! : 'x'); }, 100));
  }
  const t0 = performance.now();
  while (closed < 60 && performance.now() - t0 < 6000) await new Promise((r) => setTimeout(r, 50));
  assert.equal(closed, 60, `all slow connections closed (${closed} of 60 after ${Math.round(performance.now() - t0)} ms)`);
  const ok = await rawRequest(port, { path: '/v1/chat/completions', body });
  assert.equal(ok.status, 200);
});

test('a body over the limit is refused before it is read: 413 JSON', async (t) => {
  const { up, port } = await setup(t, { maxBodyBytes: 1000 });
  const r = await rawRequest(port, { path: '/v1/chat/completions', body: JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(5000) }] }) });
  assert.equal(r.status, 413);
  assert.match(r.json().error!.message, /exceeds 1000 bytes/);
  assert.equal(up.requests.length, 0);
});
