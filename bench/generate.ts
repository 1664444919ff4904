/**
 * `npm run bench:generate [-- --rounds R --prompts N --new-tokens K --threads T --base REV --hf-batches B,… --no-hf --keep DIR --json FILE]`: generation
 * throughput on the serving workload — a SmolLM2-135M-shaped random checkpoint (f32), N = 32 prompts of 151–587
 * tokens (random ids), exactly K = 64 new tokens each (no stop ids), greedy, 2 threads — in fresh child processes,
 * the modes interleaved round by round (best of R kept, so every mode sees the same machine load):
 * - `one`: safekeep, one call at a time (what the chat backends did: each call awaited before the next);
 * - `scheduled`: safekeep, all N calls in flight on the scheduler (src/engine/run/scheduler.ts);
 * - `base batch N`: the code at --base (default `main` while it has no scheduler) running `generate` on all N rows
 *   at once, its best path before continuous batching (left-padded pieces of ≤ 4,096 tokens decoded in turn).
 * Each child times every engine step (T = 1: decode, else prefill) and prints tokens generated / s, decode-only tok/s
 * (the N·(K − 1) tokens decode steps produce / the time in decode steps), the prefill rate, peak RSS (VmHWM).
 * The bound: the workload's time if every prompt token ran at the scheduled run's own measured prefill rate and every
 * decode token at its measured full-batch decode rate (its steps with all N rows) — tokens/s at that time, and the
 * scheduled run's fraction of it.
 * Results: a table on stdout and JSON in --json FILE (default <tmp>/safekeep-bench-generate.json; bench:projection
 * reads its scheduled throughput from there).
 * HF rows (`python3 bench/hf_generate.py`, the same prompt ids): transformers `generate` at batch --hf-batches
 * (default 16, the best of 1/8/16/32 measured before) and `generate_batch` (continuous batching, paged sdpa); they
 * need torch + transformers (pip, a developer tool) and are skipped with the reason printed without them.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { SMOLLM2_SHAPE, finishBench, flag, loadavg, peakRss, runChild } from './common.ts';

const here = fileURLToPath(import.meta.url);
const repo = resolve(here, '..', '..');

/** N prompt lengths spread over 151–587 (a fixed shuffle, so arrival order mixes long and short) and their ids */
export function workload(n: number, vocab: number): number[][] {
  const lengths = Array.from({ length: n }, (_, i) => 151 + Math.round((i * (587 - 151)) / Math.max(1, n - 1)));
  const order = lengths.map((_, i) => (i * 13) % n);
  let x = 12345;
  return order.map((i) => Array.from({ length: lengths[i]! }, () => { x = (x * 1103515245 + 12345) % 2 ** 31; return 3 + (x % (vocab - 3)); }));
}

interface StepTimes { prefillS: number; prefillTokens: number; decodeS: number; decodeSteps: { batch: number; s: number }[] }

async function child(): Promise<void> {
  const root = flag('root')!;
  const mode = flag('mode')!;
  const threads = Number(flag('threads') ?? 2);
  const n = Number(flag('prompts') ?? 32);
  const K = Number(flag('new-tokens') ?? 64);
  const { createEngine } = await import(pathToFileURL(join(root, 'src', 'engine', 'engine.ts')).href) as typeof import('../src/engine/engine.ts');
  const engine = await createEngine(flag('model')!, { threads, cacheDir: flag('cache')!, quiet: true });
  const prompts = workload(n, engine.vocabSize);
  const times: StepTimes = { prefillS: 0, prefillTokens: 0, decodeS: 0, decodeSteps: [] };
  const step = engine.step.bind(engine);
  engine.step = async (inp) => {
    const t = performance.now();
    const out = await step(inp);
    const s = (performance.now() - t) / 1000;
    if (inp.width === 1 && inp.past && inp.past.length > 0) { times.decodeS += s; times.decodeSteps.push({ batch: inp.batch, s }); } else { times.prefillS += s; times.prefillTokens += inp.batch * inp.width; }
    return out;
  };
  // warm-up (graph load, first-run allocations) outside the timed part, then the step times reset
  await engine.generate([prompts[0]!.slice(0, 32)], { maxNewTokens: 2, stopIds: [] });
  Object.assign(times, { prefillS: 0, prefillTokens: 0, decodeS: 0, decodeSteps: [] });
  const opts = { maxNewTokens: K, stopIds: [] as number[] };
  const t0 = performance.now();
  let generated = 0;
  if (mode === 'one') {
    for (const p of prompts) generated += (await engine.generate([p], opts))[0]!.generatedIds.length;
  } else {
    for (const r of await engine.generate(prompts, opts)) generated += r.generatedIds.length;
  }
  const wallS = (performance.now() - t0) / 1000;
  const full = times.decodeSteps.filter((x) => x.batch === n).map((x) => x.s).sort((a, b) => a - b);
  const fullStepS = full.length ? full[Math.floor(full.length / 2)]! : NaN;
  process.stdout.write(JSON.stringify({
    mode, wallS, generated, promptTokens: prompts.reduce((s, p) => s + p.length, 0),
    tps: generated / wallS, decodeTps: n * (K - 1) / times.decodeS, prefillTps: times.prefillTokens / times.prefillS,
    fullBatchDecodeTps: n / fullStepS, fullBatchSteps: full.length, decodeSteps: times.decodeSteps.length,
    peakRss: peakRss(), load: loadavg(),
  }) + '\n');
  await engine.dispose();
}

/** a copy of `rev`'s src/ (and package.json) to run the code before continuous batching, or null with the reason */
function baseTree(dir: string, rev: string): { root: string } | { skip: string } {
  try {
    const has = spawnSync('git', ['-C', repo, 'cat-file', '-e', `${rev}:src/engine/run/scheduler.ts`]).status === 0;
    if (has && !flag('base')) return { skip: `base '${rev}' already has the scheduler; pass --base REV (a commit before it)` };
    const root = join(dir, 'base');
    mkdirSync(root);
    const tar = execFileSync('git', ['-C', repo, 'archive', rev, 'src', 'package.json'], { maxBuffer: 1 << 30 });
    execFileSync('tar', ['-x', '-C', root], { input: tar });
    symlinkSync(join(repo, 'node_modules'), join(root, 'node_modules'));
    return { root };
  } catch (e) {
    return { skip: `cannot check out '${rev}': ${(e as Error).message.split('\n')[0]}` };
  }
}

async function main(): Promise<void> {
  if (process.argv.includes('--child')) return child();
  const rounds = Number(flag('rounds') ?? 1);
  const n = Number(flag('prompts') ?? 32);
  const K = Number(flag('new-tokens') ?? 64);
  const threads = Number(flag('threads') ?? 2);
  const keep = flag('keep');
  const dir = keep ?? mkdtempSync(join(tmpdir(), 'safekeep-bench-gen-'));
  try {
    const model = join(dir, 'model');
    if (!existsSync(join(model, 'config.json'))) {
      process.stderr.write('writing the SmolLM2-shaped random checkpoint…\n');
      await writeRandomCheckpoint(model, 'llama', SMOLLM2_SHAPE);
    }
    const base = existsSync(join(dir, 'base')) ? { root: join(dir, 'base') } : baseTree(dir, flag('base') ?? 'main');
    const hfOk = !process.argv.includes('--no-hf') && spawnSync('python3', ['-c', 'import torch, transformers'], { encoding: 'utf8' }).status === 0;
    const idsFile = join(dir, 'ids.json');
    writeFileSync(idsFile, JSON.stringify(workload(n, SMOLLM2_SHAPE.vocabSize)));
    const hfModes = hfOk ? [
      ...(flag('hf-batches') ?? '16').split(',').map((b) => ({ name: `HF transformers generate batch ${b}`, args: ['batch', '--batch', b] })),
      { name: 'HF generate_batch (continuous batching, paged sdpa)', args: ['cb'] },
    ] : [];
    const skipped: string[] = [];
    const modes: { name: string; root: string; mode: string; hf?: string[] }[] = [
      { name: 'safekeep, one call at a time', root: repo, mode: 'one' },
      ...('root' in base ? [{ name: `base (${flag('base') ?? 'main'}) generate batch ${n}`, root: base.root, mode: 'batch' }] : []),
      ...hfModes.map((h) => ({ name: h.name, root: repo, mode: 'hf', hf: h.args })),
      { name: `safekeep scheduled (${n} in flight)`, root: repo, mode: 'scheduled' },
    ];
    const bestOf = new Map<string, Record<string, number | string>>();
    const loads: number[] = [];
    for (let r = 0; r < rounds; r++) {
      for (const m of r % 2 === 0 ? modes : [...modes].reverse()) {
        if (skipped.some((x) => x.startsWith(m.name))) continue;
        process.stderr.write(`round ${r + 1}/${rounds}: ${m.name}…\n`);
        let json: Record<string, unknown>;
        try {
          json = m.hf
            ? runChild('python3', [join(repo, 'bench', 'hf_generate.py'), ...m.hf, '--model', model, '--threads', String(threads), '--ids', idsFile, '--new-tokens', String(K)], m.name).json
            : runChild(process.execPath, ['--import', 'tsx', here, '--child', '--root', m.root, '--mode', m.mode, '--model', model,
              '--cache', join(dir, 'cache'), '--threads', String(threads), '--prompts', String(n), '--new-tokens', String(K)], m.name).json;
        } catch (e) {
          if (!m.hf) throw e;
          const lines = (e as Error).message.split('\n');
          const why = lines.filter((l) => /error|exception/i.test(l)).at(-1) ?? '';
          skipped.push(`${m.name}: ${lines[0]!.replace(/:.*$/, '')}${why ? ` — ${why.slice(0, 200)}` : ''}`);
          continue;
        }
        loads.push(json.load as number);
        process.stderr.write(`  ${(json.tps as number).toFixed(1)} tok/s, ${(json.wallS as number).toFixed(1)} s, load ${json.load}\n`);
        const prev = bestOf.get(m.name);
        if (!prev || (json.tps as number) > (prev.tps as number)) bestOf.set(m.name, json as Record<string, number | string>);
      }
    }
    const f = (x: unknown, d = 1) => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(d) : '—');
    const out = [`bench:generate — SmolLM2-135M shape (random), f32, ${threads} threads, ${n} prompts of 151–587 tokens, exactly ${K} new tokens, greedy; best of ${rounds} round(s), fresh processes, interleaved`, '',
      '| | tokens generated / s | decode-only tok/s | prefill tok/s | peak RSS | wall s |', '| --- | --- | --- | --- | --- | --- |'];
    for (const m of modes) {
      const j = bestOf.get(m.name);
      if (!j) continue;
      out.push(`| ${m.name} | ${f(j.tps)} | ${f(j.decodeTps)} | ${f(j.prefillTps, 0)} | ${((j.peakRss as number) / 1e9).toFixed(2)} GB | ${f(j.wallS)} |`);
    }
    const s = bestOf.get(modes.at(-1)!.name)!;
    const boundS = (s.promptTokens as number) / (s.prefillTps as number) + n * (K - 1) / (s.fullBatchDecodeTps as number);
    const boundTps = (s.generated as number) / boundS;
    out.push('', `bound (scheduled run's own rates: prefill ${f(s.prefillTps, 0)} tok/s, decode with all ${n} rows ${f(s.fullBatchDecodeTps)} tok/s over ${s.fullBatchSteps} such steps): `
      + `${f(boundTps)} tok/s → scheduled reaches ${f((s.tps as number) / boundTps, 2)} of it`);
    const one = bestOf.get(modes[0]!.name)!;
    out.push(`scheduled / one at a time: ${f((s.tps as number) / (one.tps as number), 2)}×`);
    if ('root' in base) { const b = bestOf.get(modes[1]!.name)!; out.push(`scheduled / base batch ${n}: ${f((s.tps as number) / (b.tps as number), 2)}×`); } else out.push(`base rows skipped: ${base.skip}`);
    if (process.argv.includes('--no-hf')) out.push('HF rows skipped: --no-hf');
    else if (!hfOk) out.push('HF rows skipped: python3 cannot import torch + transformers (pip install torch transformers safetensors to add them)');
    for (const x of skipped) out.push(`row skipped (failed): ${x}`);
    const hfBest = Math.max(...modes.filter((m) => m.hf && bestOf.has(m.name)).map((m) => bestOf.get(m.name)!.tps as number));
    if (Number.isFinite(hfBest)) out.push(`scheduled / HF's best row: ${f((s.tps as number) / hfBest, 2)}×`);
    finishBench(flag('json') ?? join(tmpdir(), 'safekeep-bench-generate.json'), { modes: Object.fromEntries(bestOf), scheduled: s, boundTps, fraction: (s.tps as number) / boundTps }, out, loads);
  } finally {
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}

await main();
