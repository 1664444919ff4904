/**
 * `npm run bench:guard [-- --requests 400 --concurrency 8 --upstream-ms 0 --judge-ms 0]`
 * Throughput (requests/s) and p50/p99 latency through `safekeep serve` with and without the guard, against a mock
 * upstream and a mock judge on 127.0.0.1 (both answer after a fixed simulated delay). Scenarios:
 *   direct      — client → mock upstream (no proxy)
 *   passthrough — client → proxy → upstream, request without tools (no guard)
 *   guarded     — client → proxy → judge (NO) → upstream, request with tools
 *   refused     — client → proxy → judge (YES) → upstream refusal call
 *   s3-rules    — S³ proxy with the rules-only skills (tool-rules, output-leak), no guard agent: no model call
 *                 beyond the upstream's
 *   s3-all      — S³ proxy with all shipped skills and the guard agent (input: guard agent + 2 judges; selection:
 *                 guard agent + tool-rules) → upstream; the same request each time (its input decision is cached
 *                 after the first: the S³ proxy keeps decisions by content)
 *   s3-all-fresh — the same with a different request each time (every decision made anew)
 * Bounded request count; stops by itself.
 */
import type { AddressInfo } from 'node:net';
import { parseArgs, numberValue } from '../src/cli/args.ts';
import { createGuardProxy } from '../src/guard/proxy.ts';
import { SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { summarize } from '../src/guard/metrics.ts';
import { completion, startMockUpstream } from '../test/helpers/guard-mock.ts';
import { join } from 'node:path';
import { loadSkills } from '../src/guard/s3/skill-file.ts';
import { repoRoot } from '../src/data/locate.ts';

const args = parseArgs(process.argv.slice(2), { values: ['requests', 'concurrency', 'upstream-ms', 'judge-ms'] });
const N = numberValue(args, 'requests', 400);
const C = numberValue(args, 'concurrency', 8);
const upstreamMs = numberValue(args, 'upstream-ms', 0);
const judgeMs = numberValue(args, 'judge-ms', 0);

type Msg = { role: string; content: string };
const tools = [{ type: 'function', function: { name: 'send_email', description: 'Send an email.', parameters: { type: 'object', properties: { to: { type: 'string' }, body: { type: 'string' } }, required: ['to', 'body'] } } }];
const toolCall = completion(null, { toolCalls: [{ id: 'c', type: 'function', function: { name: 'send_email', arguments: '{"to":"a@b.c","body":"hi"}' } }] });

const upstream = await startMockUpstream(() => ({ delayMs: upstreamMs, json: toolCall }));
const judgeUp = await startMockUpstream((b) => {
  const text = ((b?.messages ?? []) as Msg[])[1]?.content ?? '';
  const isJudge = ((b?.messages ?? []) as Msg[])[0]?.content === SAFETY_ASSESSOR_ROLE;
  return { delayMs: judgeMs, json: completion(isJudge && text.includes('harmful') ? 'YES' : 'NO') };
});
const proxy = createGuardProxy({ upstream: upstream.url, judgeUpstream: judgeUp.url, judgeModel: 'judge-m', log: () => {} });
await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/v1`;
const skills = loadSkills([join(repoRoot, 'skills')]);
const s3Rules = createGuardProxy({ upstream: upstream.url, judgeUpstream: judgeUp.url, judgeModel: 'judge-m', log: () => {}, guardDecision: false, skills: skills.filter((x) => x.check === 'rules') });
const s3All = createGuardProxy({ upstream: upstream.url, judgeUpstream: judgeUp.url, judgeModel: 'judge-m', log: () => {}, skills });
for (const p of [s3Rules, s3All]) await new Promise<void>((r) => p.listen(0, '127.0.0.1', r));
const urlOf = (p: typeof proxy) => `http://127.0.0.1:${(p.address() as AddressInfo).port}/v1`;

async function scenario(name: string, url: string, body: unknown | ((i: number) => unknown)): Promise<Record<string, string | number>> {
  const payloadOf = (i: number) => JSON.stringify(typeof body === 'function' ? (body as (i: number) => unknown)(i) : body);
  const lat: number[] = [];
  let next = 0;
  let failed = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: C }, async () => {
    while (next < N) {
      const payload = payloadOf(next++);
      const s = performance.now();
      const r = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: payload });
      await r.arrayBuffer();
      if (!r.ok) failed++;
      lat.push(performance.now() - s);
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  const s = summarize(lat);
  return { scenario: name, requests: lat.length, failed, 'req/s': Number((lat.length / secs).toFixed(1)), 'p50 ms': Number(s.p50.toFixed(2)), 'p99 ms': Number(s.p99.toFixed(2)) };
}

const plain = { model: 'm', messages: [{ role: 'user', content: 'Email Bob hello.' }] };
const withTools = { ...plain, tools };
const harmful = { model: 'm', messages: [{ role: 'user', content: 'Send a harmful threat to Bob.' }], tools };
// warm-up (connections, JIT)
await scenario('warmup', proxyUrl, withTools);
const results = [
  await scenario('direct', upstream.url, withTools),
  await scenario('passthrough', proxyUrl, plain),
  await scenario('guarded', proxyUrl, withTools),
  await scenario('refused', proxyUrl, harmful),
  await scenario('s3-rules', urlOf(s3Rules), withTools),
  await scenario('s3-all', urlOf(s3All), withTools),
  await scenario('s3-all-fresh', urlOf(s3All), (i: number) => ({ ...withTools, messages: [{ role: 'user', content: `Email Bob hello (${i}).` }] })),
];
console.log(`bench:guard — ${N} requests per scenario, concurrency ${C}, mock upstream ${upstreamMs} ms, mock judge ${judgeMs} ms`);
console.table(results);
const pass = results.find((r) => r.scenario === 'passthrough')!;
const guarded = results.find((r) => r.scenario === 'guarded')!;
console.log(`guard overhead at p50: ${(Number(guarded['p50 ms']) - Number(pass['p50 ms'])).toFixed(2)} ms (one judge round trip + prompt flattening)`);
console.log('s3-rules vs passthrough is not a pure overhead figure: the S³ proxy makes one buffered upstream call where passthrough pipes the stream');
for (const p of [proxy, s3Rules, s3All]) {
  p.closeAllConnections();
  await new Promise<void>((r) => p.close(() => r()));
}
await upstream.close();
await judgeUp.close();
