/**
 * `npm run bench:serve [-- --clients 1,4,8 --requests 24 --max-tokens 32 --words 48 --rounds R --threads T
 *    --method base --keep DIR --json FILE]`: `safekeep serve --model DIR` under concurrent clients. The server runs
 * the local engine (its calls continuously batched on the scheduler) on a random SmolLM2-135M-shaped checkpoint
 * carrying the Llama-3.1 tokenizer (vocab 128,256; the chat template of ../shared/templates when present, else the
 * package's), f32, --threads 2, `--method base` (the plain agent call; `safekeep` adds a judge call per request),
 * on 127.0.0.1 with a free port; one fresh server process per round, the client levels in it in alternating order.
 * Each level sends the same number of requests (--requests) from C clients, each client sending its next request
 * when its last answer arrives; every request is a different permutation of the same --words single-token words
 * (equal prompt lengths, no response-cache hits; the template's header is a shared prefix, as with real clients),
 * `max_tokens` --max-tokens, no tools. Bounded: the request count is fixed, each request has a 180 s deadline, a
 * failed request is counted and the level goes on; the server is stopped at the end (SIGTERM).
 * Prints requests/s, p50/p95 latency, completion tokens/s (from each answer's `usage`) and errors per level, best of
 * R rounds by requests/s, and whether 8 clients reach ≥ 4× one client's requests/s. JSON to --json FILE.
 * Then where the time goes (`--no-engine` skips it): a fresh child process runs the same requests in process — the
 * server's LocalBackend on the same engine (response cache off), no HTTP — at 1 and at the largest client count, R
 * rounds, every engine step timed (bench/step-timer.ts), and prints per level requests/s, the prefill and decode
 * seconds per request and decode rows per step. From them the ceiling for C clients / 1 client when prefill does
 * not speed up with concurrency (a prompt's prefill is compute-bound GEMMs already at batch 1, so C prompts cost C
 * times one): C·(P₁ + D₁) / (C·P₁ + D_C), P₁ / D₁ the prefill / decode seconds of one request alone, D_C the decode
 * seconds of C requests decoding together; and the served ratio's share of it (what HTTP, JSON and scheduling cost).
 * `--sweep`: the α sweep over the research API instead (bench/serve-sweep.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { installTokenizer } from '../src/prompts/tokenizer.ts';
import { sharedPath } from '../test/helpers/shared.ts';
import { finishBench, flag, loadavg, runChild } from './common.ts';
import { decodeRows, emptyTimes, timeSteps } from './step-timer.ts';
import { T4_SHAPE, T4_TEMPLATE } from './generate-table4.ts';

const repo = resolve(fileURLToPath(import.meta.url), '..', '..');

/** words that are one Llama-3 token each after a space; request i gets its own permutation of the first `n` */
const WORDS = ('the of and to in is that it for on was with as at by this from or be are have not but had they you which ' +
  'one all were we when there can an your more if no out so what up about who its into time has only new some could them ' +
  'than other then now people like may over such make first').split(' ');

export function promptOf(i: number, n: number): string {
  const w = WORDS.slice(0, n);
  let x = 2654435761 * (i + 1) % 2 ** 31;
  for (let k = w.length - 1; k > 0; k--) { x = (x * 1103515245 + 12345) % 2 ** 31; const j = x % (k + 1); [w[k], w[j]] = [w[j]!, w[k]!]; }
  return w.join(' ');
}

/** the server's base URL from its first stdout line (`safekeep serve: http://127.0.0.1:PORT/v1 → …`) */
function startServer(model: string, cache: string, threads: number, maxTokens: number, method: string, maxQueue: number): Promise<{ proc: ChildProcess; url: string }> {
  const proc = spawn(process.execPath, [join(repo, 'bin', 'safekeep.mjs'), 'serve', '--model', model, '--method', method, '--port', '0', '--threads', String(threads),
    '--max-tokens', String(maxTokens), '--max-queue', String(maxQueue)], { env: { ...process.env, SAFEKEEP_CACHE: cache, SAFEKEEP_QUIET: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => { err = (err + d.toString()).slice(-4000); });
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => { proc.kill('SIGTERM'); fail(new Error(`server did not start within 300 s: ${err}`)); }, 300_000);
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /(http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(out);
      if (m) { clearTimeout(timer); ok({ proc, url: m[1]! }); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); fail(new Error(`server exited (${code}) before listening: ${err}`)); });
  });
}

interface Answer { ms: number; completionTokens: number; promptTokens: number; ok: boolean; error?: string }

async function ask(url: string, prompt: string, maxTokens: number): Promise<Answer> {
  const t = performance.now();
  try {
    const r = await fetch(`${url}/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(180_000),
      body: JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens }),
    });
    const body = await r.json() as { usage?: { completion_tokens: number; prompt_tokens: number }; error?: { message?: string } };
    if (!r.ok) return { ms: performance.now() - t, completionTokens: 0, promptTokens: 0, ok: false, error: `${r.status} ${body.error?.message ?? ''}`.slice(0, 200) };
    return { ms: performance.now() - t, completionTokens: body.usage?.completion_tokens ?? 0, promptTokens: body.usage?.prompt_tokens ?? 0, ok: true };
  } catch (e) {
    return { ms: performance.now() - t, completionTokens: 0, promptTokens: 0, ok: false, error: (e as Error).message.slice(0, 200) };
  }
}

/** requests 0..requests−1 sent by `clients` clients, each sending its next request when its answer arrives */
async function clientLoop(clients: number, requests: number, one: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: clients }, async () => {
    while (next < requests) await one(next++);
  }));
}

/** `requests` requests from `clients` clients over HTTP */
async function level(url: string, clients: number, requests: number, first: number, words: number, maxTokens: number) {
  const answers: Answer[] = [];
  const t0 = performance.now();
  await clientLoop(clients, requests, async (i) => { answers.push(await ask(url, promptOf(first + i, words), maxTokens)); });
  const wallS = (performance.now() - t0) / 1000;
  const good = answers.filter((a) => a.ok);
  const ms = good.map((a) => a.ms).sort((a, b) => a - b);
  const q = (p: number) => ms.length ? ms[Math.min(ms.length - 1, Math.floor(p * ms.length))]! : NaN;
  return {
    clients, requests, ok: good.length, errors: answers.length - good.length, firstError: answers.find((a) => !a.ok)?.error,
    wallS, rps: good.length / wallS, p50: q(0.5), p95: q(0.95), tokensPerS: good.reduce((s, a) => s + a.completionTokens, 0) / wallS,
    meanCompletion: good.reduce((s, a) => s + a.completionTokens, 0) / Math.max(1, good.length), meanPrompt: good.reduce((s, a) => s + a.promptTokens, 0) / Math.max(1, good.length),
    load: loadavg(),
  };
}

/** child: the same requests in process (LocalBackend on the engine, no HTTP), every step timed, at each --levels count */
async function engineChild(): Promise<Record<string, unknown>> {
  const { createEngine } = await import('../src/engine/engine.ts');
  const { loadPromptTokenizer } = await import('../src/prompts/tokenizer.ts');
  const { LocalBackend } = await import('../src/chat/local.ts');
  const model = flag('model')!;
  const requests = Number(flag('requests'));
  const words = Number(flag('words'));
  const maxTokens = Number(flag('max-tokens'));
  const rounds = Number(flag('rounds'));
  const levels = flag('levels')!.split(',').map(Number);
  const engine = await createEngine(model, { threads: Number(flag('threads')), cacheDir: flag('cache')!, quiet: true });
  const backend = new LocalBackend(engine, await loadPromptTokenizer(model), { responseCache: 0 });
  const times = timeSteps(engine);
  const ask1 = (i: number) => backend.chat({ messages: [{ role: 'user', content: promptOf(i, words) }], maxTokens, purpose: 'agent' });
  await ask1(1e6); // warm-up, as the served rounds do
  let first = 2e6;
  const best = new Map<number, Record<string, number>>();
  for (let r = 0; r < rounds; r++) {
    for (const c of r % 2 === 0 ? levels : [...levels].reverse()) {
      Object.assign(times, emptyTimes());
      const packed0 = engine.scheduler.stats.packedRows;
      let tokens = 0;
      const base = first;
      first += requests;
      const t0 = performance.now();
      await clientLoop(c, requests, async (i) => { tokens += (await ask1(base + i)).completionTokens; });
      const wallS = (performance.now() - t0) / 1000;
      const rows = decodeRows(times);
      const m = { clients: c, wallS, rps: requests / wallS, prefillPerReq: times.prefillS / requests, decodePerReq: times.decodeS / requests,
        otherPerReq: (wallS - times.prefillS - times.decodeS) / requests, rowsPerStep: rows / Math.max(1, times.decodeSteps.length), packedShare: (engine.scheduler.stats.packedRows - packed0) / requests, tokens, load: loadavg() };
      process.stderr.write(`  in process, ${c} caller(s): ${m.rps.toFixed(2)} req/s, prefill ${m.prefillPerReq.toFixed(3)} s + decode ${m.decodePerReq.toFixed(3)} s per request, ${m.rowsPerStep.toFixed(1)} rows/step (load ${m.load})\n`);
      const prev = best.get(c);
      if (!prev || m.rps > prev.rps!) best.set(c, m);
    }
  }
  await engine.dispose();
  return { levels: Object.fromEntries(best) };
}

async function main(): Promise<void> {
  const clientsList = (flag('clients') ?? '1,4,8').split(',').map(Number);
  const requests = Number(flag('requests') ?? 24);
  const maxTokens = Number(flag('max-tokens') ?? 32);
  const words = Math.min(WORDS.length, Number(flag('words') ?? 48));
  const rounds = Number(flag('rounds') ?? 1);
  const threads = Number(flag('threads') ?? 2);
  const method = flag('method') ?? 'base';
  const keep = flag('keep');
  const dir = keep ? resolve(keep) : mkdtempSync(join(tmpdir(), 'safekeep-bench-serve-'));
  mkdirSync(dir, { recursive: true });
  const model = join(dir, 'model');
  const best = new Map<number, Awaited<ReturnType<typeof level>>>();
  const loads: number[] = [];
  let proc: ChildProcess | null = null;
  try {
    if (!existsSync(join(model, 'tokenizer.json'))) {
      process.stderr.write('writing the SmolLM2-shaped random checkpoint with the Llama-3.1 tokenizer…\n');
      await writeRandomCheckpoint(model, 'llama', T4_SHAPE);
      const tpl = sharedPath(...T4_TEMPLATE);
      await installTokenizer(model, 'llama3', tpl ? { template: readFileSync(tpl, 'utf8') } : {});
    }
    let first = 0;
    for (let r = 0; r < rounds; r++) {
      process.stderr.write(`round ${r + 1}/${rounds}: starting safekeep serve --model (fresh process)…\n`);
      const s = await startServer(model, join(dir, 'cache'), threads, maxTokens, method, Math.max(...clientsList) * 2);
      proc = s.proc;
      await ask(s.url, promptOf(1e6, words), maxTokens); // warm-up: graph load, first allocations
      for (const c of r % 2 === 0 ? clientsList : [...clientsList].reverse()) {
        process.stderr.write(`  ${c} client(s), ${requests} requests (load ${loadavg()})…\n`);
        const m = await level(s.url, c, requests, first, words, maxTokens);
        first += requests;
        loads.push(m.load);
        process.stderr.write(`    ${m.rps.toFixed(2)} req/s, p50 ${(m.p50 / 1000).toFixed(2)} s, ${m.tokensPerS.toFixed(1)} tok/s${m.errors ? `, ${m.errors} errors (${m.firstError})` : ''}\n`);
        const prev = best.get(c);
        if (!prev || m.rps > prev.rps) best.set(c, m);
      }
      proc.kill('SIGTERM');
      await new Promise((ok) => proc!.once('exit', ok));
      proc = null;
    }
    const one = best.get(1);
    const out = [`bench:serve — safekeep serve --model (--method ${method}), random SmolLM2-135M shape with the Llama-3.1 tokenizer (vocab 128,256), f32, ${threads} threads; ${requests} requests per level, prompts of ${words} words `
      + `(${fmt(one?.meanPrompt ?? best.values().next().value?.meanPrompt, 0)} prompt tokens after the template), max_tokens ${maxTokens}, no tools; loopback; best of ${rounds} round(s), one fresh server per round, levels alternating`, '',
      '| clients | requests/s | p50 latency | p95 latency | completion tokens/s | mean completion tokens | errors | × 1 client (requests/s) |', '| --- | --- | --- | --- | --- | --- | --- | --- |'];
    for (const c of clientsList) {
      const m = best.get(c)!;
      out.push(`| ${c} | ${fmt(m.rps, 2)} | ${fmt(m.p50 / 1000, 2)} s | ${fmt(m.p95 / 1000, 2)} s | ${fmt(m.tokensPerS)} | ${fmt(m.meanCompletion)} | ${m.errors}${m.firstError ? ` (${m.firstError})` : ''} | ${one ? fmt(m.rps / one.rps, 2) : '—'}× |`);
    }
    const eight = best.get(8);
    if (one && eight) out.push('', `8 clients / 1 client: ${fmt(eight.rps / one.rps, 2)}× requests/s (target ≥ 4×: ${eight.rps / one.rps >= 4 ? 'met' : 'NOT met'})`);
    const most = Math.max(...clientsList);
    let engineLevels: Record<string, Record<string, number>> | undefined;
    if (process.argv.includes('--no-engine') || most === 1) {
      out.push('', 'in-process breakdown: skipped (--no-engine or one client level)');
    } else {
      process.stderr.write(`in process (fresh child: LocalBackend on the engine, no HTTP), 1 and ${most} caller(s), ${rounds} round(s)…\n`);
      const r = runChild(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--child', 'engine', '--model', model, '--cache', join(dir, 'cache'),
        '--requests', String(requests), '--words', String(words), '--max-tokens', String(maxTokens), '--rounds', String(rounds), '--threads', String(threads), '--levels', `1,${most}`], 'in-process child');
      engineLevels = (r.json as { levels: Record<string, Record<string, number>> }).levels;
      const e1 = engineLevels['1']!;
      const eC = engineLevels[String(most)]!;
      loads.push(e1.load!, eC.load!);
      out.push('', `Where the time goes: the same requests in process (LocalBackend on the engine, response cache off, no HTTP; fresh child, best of ${rounds}):`, '',
        '| callers | requests/s | prefill s / request | decode s / request | other s / request | decode rows / step | prompts prefilled in a pack | × 1 caller |', '| --- | --- | --- | --- | --- | --- | --- | --- |');
      for (const m of [e1, eC]) out.push(`| ${m.clients} | ${fmt(m.rps, 2)} | ${fmt(m.prefillPerReq, 3)} | ${fmt(m.decodePerReq, 3)} | ${fmt(m.otherPerReq, 3)} | ${fmt(m.rowsPerStep)} | ${fmt(100 * (m.packedShare ?? 0), 0)} % | ${fmt(m.rps! / e1.rps!, 2)}× |`);
      // C requests: prefill C·P₁ (compute-bound, no gain from concurrency), decode what C rows together measured
      const ceiling = (most * (e1.prefillPerReq! + e1.decodePerReq!)) / (most * e1.prefillPerReq! + most * eC.decodePerReq!);
      const served = best.get(most) && one ? best.get(most)!.rps / one.rps : NaN;
      out.push('', `Ceiling for ${most} clients / 1 with prefill not sped up by concurrency: ${most}·(P₁ + D₁) / (${most}·P₁ + D_${most}) = ${fmt(ceiling, 2)}× `
        + `(P₁ ${fmt(e1.prefillPerReq, 3)} s, D₁ ${fmt(e1.decodePerReq, 3)} s per request alone; D_${most} ${fmt(most * eC.decodePerReq!, 3)} s for ${most} requests decoding together); `
        + `in process ${fmt(eC.rps! / e1.rps!, 2)}×, served ${fmt(served, 2)}× (${fmt(served / ceiling * 100, 0)} % of the ceiling). Prefill is ${fmt(e1.prefillPerReq! / (e1.prefillPerReq! + e1.decodePerReq!) * 100, 0)} % of a lone request's engine time.`);
    }
    finishBench(flag('json') ?? join(tmpdir(), 'safekeep-bench-serve.json'), { levels: Object.fromEntries(best), engine: engineLevels, method, requests, maxTokens }, out, loads);
  } finally {
    if (proc) proc.kill('SIGTERM');
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}

const fmt = (x: unknown, d = 1): string => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(d) : '—');

if (flag('child') === 'engine') process.stdout.write(JSON.stringify(await engineChild()) + '\n');
else if (process.argv.includes('--sweep')) await (await import('./serve-sweep.ts')).sweep();
else await main();
