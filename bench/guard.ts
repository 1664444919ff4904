/**
 * `npm run bench:guard [-- --requests 400 --concurrency 8 --upstream-ms 0 --judge-ms 0 --cascade-requests 28 --no-cascade]`
 * Throughput (requests/s) and p50/p99 latency through `safekeep serve` with and without the guard, against a mock
 * upstream and a mock judge on 127.0.0.1 (both answer after a fixed simulated delay). Scenarios:
 *   direct      — client → mock upstream (no proxy)
 *   passthrough — client → proxy → upstream, request without tools, forwarded unjudged (`--pass-unjudged no-tools`)
 *   no-tools    — the same request on the default proxy: judged like any other (a prompted agent's tools are in its text)
 *   guarded     — client → proxy → judge (NO) → upstream, request with tools
 *   refused     — client → proxy → judge (YES) → upstream refusal call
 *   s3-rules    — S³ proxy with the rules-only skills (tool-rules, output-leak), no guard agent: no model call
 *                 beyond the upstream's
 *   s3-all      — S³ proxy with all shipped skills and the guard agent (input: guard agent + 2 judges; selection:
 *                 guard agent + tool-rules) → upstream; the same request each time (its input decision is cached
 *                 after the first: the S³ proxy keeps decisions by content)
 *   s3-all-fresh — the same with a different request each time (every decision made anew)
 * Then the probe→judge cascade against SafeKeep on the local engine (the planted synthetic model, built in a temp
 * folder; its probe trained with `probe train --calibrate`): the same evaluation requests, one backend, one run, one
 * method after the other — judge calls per request, guard tokens per request and the guard's added latency p50 / p95
 * for base, SafeKeep, refusal-probe, probe-cascade and probe-steer. The planted model measures the mechanism (how
 * many requests reach the judge, what the judge-free path costs), not a trained model's rates.
 * Bounded request count; stops by itself.
 */
import type { AddressInfo } from 'node:net';
import { parseArgs, numberValue } from '../src/cli/args.ts';
import { createGuardProxy } from '../src/serve/proxy.ts';
import { SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { summarize } from '../src/eval/metrics.ts';
import { completion, startMockUpstream } from '../test/helpers/guard-mock.ts';
import { join } from 'node:path';
import { loadSkills } from '../src/s3/skill-file.ts';
import { repoRoot } from '../src/data/locate.ts';

const args = parseArgs(process.argv.slice(2), { values: ['requests', 'concurrency', 'upstream-ms', 'judge-ms', 'cascade-requests'], booleans: ['no-cascade'] });
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
const proxy = createGuardProxy({ upstream: upstream.url, judgeUpstream: judgeUp.url, judgeModel: 'judge-m', log: () => {}, passUnjudged: ['no-tools'] });
await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/v1`;
const judging = createGuardProxy({ upstream: upstream.url, judgeUpstream: judgeUp.url, judgeModel: 'judge-m', log: () => {} });
await new Promise<void>((r) => judging.listen(0, '127.0.0.1', r));
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
  await scenario('no-tools', `http://127.0.0.1:${(judging.address() as AddressInfo).port}/v1`, plain),
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
for (const p of [proxy, judging, s3Rules, s3All]) {
  p.closeAllConnections();
  await new Promise<void>((r) => p.close(() => r()));
}
await upstream.close();
await judgeUp.close();
if (!args.booleans.has('no-cascade')) await cascadeBench(numberValue(args, 'cascade-requests', 28));

/** The cascade against SafeKeep (and the other probe methods) on the planted model, same requests, same run. */
async function cascadeBench(n: number): Promise<void> {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { writePlantedModel } = await import('../src/experiments/planted.ts');
  const { loadPairSet } = await import('../src/data/load.ts');
  const { trainProbes } = await import('../src/experiments/probe/train.ts');
  const { createEngine } = await import('../src/engine/engine.ts');
  const { loadPromptTokenizer } = await import('../src/prompts/tokenizer.ts');
  const { PromptBuilder } = await import('../src/prompts/configurations.ts');
  const { loadPromptTexts } = await import('../src/prompts/texts.ts');
  const { LocalBackend } = await import('../src/chat/local.ts');
  const { guardedRespond } = await import('../src/guard/respond.ts');
  const { ProbeGuard } = await import('../src/guard/probe.ts');
  const { evaluationCases } = await import('../src/eval/table4/probe-compare.ts');
  const { splitPairs } = await import('../src/data/split.ts');
  const { stratifiedSubset } = await import('../src/experiments/extract.ts');
  const { sha256Hex } = await import('../src/util/hash.ts');
  const dir = mkdtempSync(join(tmpdir(), 'bench-cascade-'));
  try {
    const set = await loadPairSet('pairs');
    const model = join(dir, 'planted');
    await writePlantedModel(model, { lexiconPairs: set.pairs });
    const cacheDir = join(dir, '.cache');
    const [trained] = await trainProbes({ model, data: 'pairs', limit: 40, results: join(dir, 'results'), engine: { cacheDir, quiet: true }, kinds: ['mean-diff'], calibrate: {} });
    const probe = new ProbeGuard(trained!.probe);
    const tok = await loadPromptTokenizer(model);
    const builder = new PromptBuilder(tok, { texts: loadPromptTexts() });
    const engine = await createEngine(model, { cacheDir, quiet: true });
    try {
      const backend = new LocalBackend(engine, tok, { templateKwargs: builder.templateKwargs, responseCache: 0 });
      // requests the probe never saw: the evaluation split of the 40 pairs it was trained on, as agent requests
      const sub = { ...set, pairs: stratifiedSubset(set.pairs, 40) };
      const split = splitPairs(sub, trained!.probe.provenance.split.seed);
      if (sha256Hex([...split.extraction].sort().join('\n')) !== trained!.probe.provenance.split.extractionIdsHash) throw new Error('bench:guard: the recomputed extraction split is not the probe\'s');
      const cases = evaluationCases(sub, split, builder, Math.ceil(n / 2)).slice(0, n);
      const rows = [];
      for (const method of ['base', 'safekeep', 'refusal-probe', 'probe-cascade', 'probe-steer'] as const) {
        let judgeCalls = 0;
        let guardTokens = 0;
        let refused = 0;
        const added: number[] = [];
        const total: number[] = [];
        for (const c of cases) {
          const t0 = performance.now();
          const r = await guardedRespond(c.request, method, backend, { probe, maxTokens: 12, onUnparseable: 'safe' });
          total.push(performance.now() - t0);
          added.push(r.cost.guardMs);
          judgeCalls += r.cost.judgeCalls;
          guardTokens += r.cost.guardTokens;
          if (r.blocked || r.steered) refused++;
        }
        const a = summarize(added);
        const t = summarize(total);
        rows.push({ method, requests: cases.length, 'judge calls/req': Number((judgeCalls / cases.length).toFixed(3)), 'guard tokens/req': Number((guardTokens / cases.length).toFixed(1)), 'flagged': refused, 'added p50 ms': Number(a.p50.toFixed(2)), 'added p95 ms': Number(a.p95.toFixed(2)), 'total p50 ms': Number(t.p50.toFixed(2)), 'total p95 ms': Number(t.p95.toFixed(2)) });
      }
      const c = trained!.probe.cascade!;
      console.log(`\nbench:guard cascade — planted synthetic model (local engine, CPU), ${cases.length} evaluation requests, one backend, methods one after the other; cascade band [${c.low.toPrecision(4)}, ${c.high.toPrecision(4)}] from ${c.calibration.pairs} calibration pairs`);
      console.table(rows);
      const keep = rows.find((r) => r.method === 'safekeep')!;
      const casc = rows.find((r) => r.method === 'probe-cascade')!;
      console.log(`judge calls: probe-cascade ${casc['judge calls/req']} per request vs SafeKeep ${keep['judge calls/req']} (${(100 * (1 - casc['judge calls/req'] / keep['judge calls/req'])).toFixed(0)} % fewer); added p50 ${casc['added p50 ms']} vs ${keep['added p50 ms']} ms`);
      console.log('the planted model is synthetic (its judge answers are unparseable, counted safe here): the numbers show the cascade\'s mechanism and cost, not a trained model\'s refusal rates');
    } finally {
      await engine.dispose();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
