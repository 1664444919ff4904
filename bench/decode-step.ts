/**
 * `npm run bench:decode-step -- --contexts 64,1024 [--device cpu|cuda|webgpu --dtype D --kv-dtype K --new 10 --reps 3
 *   --model DIR --json FILE]`: per decode step at each context length, the host ↔ device bytes (engine.transfer:
 * every host tensor fed to or read back from a session on the device, counted at session.run; 0 on the cpu) and the
 * wall ms, both from one decode step's start to the next (the median of an N-token greedy generate's N − 2 intervals,
 * the run with the fastest of --reps), so nothing of the prefill enters: not its time, not the prompt KV's one crossing
 * nor the prefix cache's blocks read back. One engine in this process. `--json`
 * writes {"rows": [{"device", "context", "hostDeviceBytesPerStep", "stepMs", "dtype", "kvDType"}, …]}.
 *
 * `npm run bench:decode-step -- --sampling [--rows 32 --prompt 64 --new 34 --reps 3 --model DIR --json FILE]`: a
 * scheduled decode step of `--rows` rows, greedy beside sampled (temperature 0.7; and with top-p 0.95), interleaved in
 * one engine, best of --reps, measured the same way, with the ms a step spends choosing tokens (scheduler stats
 * `choose`), the model's step alone, and the overhead over greedy.
 *
 * `npm run bench:decode-step [-- --threads 1,2 --dtypes f32,q4 --rounds 4 --prompt 128 --new 34 --model DIR
 *   --base REV|DIR --spin]`: the unprofiled decode step of each dtype and q4 over f32 (the "q4 ≥ 3× f32 decode" target),
 * optionally against another version of this repo (`--base REV`: a git revision, checked out once under the work
 * folder as bench:generate's base is; or a folder holding a checkout): fresh child processes, this tree and the base alternating, one child per (side, threads)
 * holding an engine per dtype. A step = (best N-token − best 2-token greedy generate) / (N − 2), so the prefill cancels;
 * best of 3 in a child and of `--rounds` children. Without --model the SmolLM2-135M-shaped random checkpoint (written
 * once under --keep, default a temp dir); pass a 30-layer d-64 checkpoint for the per-step fixed cost (arithmetic ≈ 0).
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { SMOLLM2_SHAPE, flag, loadavg, median, runChild } from './common.ts';
import { archiveTree } from './generate-rounds.ts';
import { emptyTimes, timeSteps } from './step-timer.ts';

interface ChildResult { ms: Record<string, number>; load: number }

/** child: time the decode step of each dtype with the engine under `root` */
async function child(root: string): Promise<void> {
  const imp = (p: string) => import(pathToFileURL(join(root, p)).href);
  const { loadCheckpoint } = await imp('src/checkpoint/load.ts');
  const { createEngineFromCheckpoint } = await imp('src/engine/engine.ts');
  const ck = await loadCheckpoint(flag('model')!);
  const V = ck.config.vocabSize as number;
  const P = Number(flag('prompt') ?? 128);
  const N = Number(flag('new') ?? 34);
  const prompt = [Array.from({ length: P }, (_, i) => 3 + ((i * 7919) % (V - 3)))];
  const engines: [string, { generate: Function; dispose: () => Promise<void> }][] = [];
  for (const dtype of flag('dtypes')!.split(',')) {
    const e = await createEngineFromCheckpoint(ck, { dtype, threads: Number(flag('threads')), spin: process.argv.includes('--spin'), cacheDir: flag('cache')!, quiet: true });
    await e.generate(prompt, { maxNewTokens: 4, stopIds: [] });
    engines.push([dtype, e]);
  }
  const short = new Map<string, number>();
  const long = new Map<string, number>();
  for (let r = 0; r < 3; r++) {
    for (const [k, e] of engines) {
      const t0 = performance.now();
      await e.generate(prompt, { maxNewTokens: 2, stopIds: [] });
      const t1 = performance.now();
      await e.generate(prompt, { maxNewTokens: N, stopIds: [] });
      short.set(k, Math.min(short.get(k) ?? Infinity, t1 - t0));
      long.set(k, Math.min(long.get(k) ?? Infinity, performance.now() - t1));
    }
  }
  const ms = Object.fromEntries(engines.map(([k]) => [k, (long.get(k)! - short.get(k)!) / (N - 2)]));
  for (const [, e] of engines) await e.dispose();
  process.stdout.write(JSON.stringify({ ms, load: loadavg() } satisfies ChildResult) + '\n');
}

async function main(): Promise<void> {
  const keep = flag('keep');
  const work = keep ?? mkdtempSync(join(tmpdir(), 'safekeep-decode-step-'));
  const model = flag('model') ?? join(work, 'model');
  if (!flag('model') && !existsSync(join(model, 'config.json'))) {
    const { writeRandomCheckpoint } = await import('../src/checkpoint/random.ts');
    process.stderr.write(`writing a SmolLM2-135M-shaped random checkpoint to ${model} ...\n`);
    await writeRandomCheckpoint(model, 'llama', SMOLLM2_SHAPE);
  }
  const dtypes = flag('dtypes') ?? 'f32,q4';
  const rounds = Number(flag('rounds') ?? 4);
  const base = flag('base');
  let baseRoot: string | null = null;
  if (base) {
    const tree = existsSync(join(base, 'src')) ? { root: resolve(base) } : archiveTree(work, base);
    if (!('root' in tree)) throw new Error(`--base ${base}: ${tree.skip}`);
    baseRoot = tree.root;
  }
  const sides: [string, string][] = [['this tree', resolve('.')], ...(baseRoot ? [['base', baseRoot] as [string, string]] : [])];
  const spin = process.argv.includes('--spin') ? ['--spin'] : [];
  const out: string[] = [`decode step, prompt ${flag('prompt') ?? 128}, model ${model}, best of 3 in a child × ${rounds} children${spin.length ? ', spinning workers' : ''}`,
    '', `| side | threads | ${dtypes.split(',').map((d) => `${d} ms/step`).join(' | ')} | q4 / f32 | load |`, `| --- | --- | ${dtypes.split(',').map(() => '---').join(' | ')} | --- | --- |`];
  for (const threads of (flag('threads') ?? '1,2').split(',')) {
    const best = new Map<string, Record<string, number>>();
    const loads = new Map<string, number[]>();
    for (let r = 0; r < rounds; r++) {
      for (const [name, root] of sides) {
        const args = ['--import', 'tsx', resolve('bench/decode-step.ts'), '--child', root, '--model', model, '--dtypes', dtypes, '--threads', threads,
          '--prompt', flag('prompt') ?? '128', '--new', flag('new') ?? '34', '--cache', join(work, `cache-${name === 'base' ? 'base' : 'tree'}`), ...spin];
        const { json } = runChild(process.execPath, args, `${name} child`);
        const res = json as unknown as ChildResult;
        const b = best.get(name) ?? {};
        for (const [k, v] of Object.entries(res.ms)) b[k] = Math.min(b[k] ?? Infinity, v);
        best.set(name, b);
        loads.set(name, [...(loads.get(name) ?? []), res.load]);
      }
    }
    for (const [name] of sides) {
      const b = best.get(name)!;
      const l = loads.get(name)!;
      const ratio = b.f32 !== undefined && b.q4 !== undefined ? `${(b.f32 / b.q4).toFixed(2)}×` : '—';
      out.push(`| ${name} | ${threads} | ${dtypes.split(',').map((d) => b[d]!.toFixed(3)).join(' | ')} | ${ratio} | ${Math.min(...l)}–${Math.max(...l)} |`);
    }
  }
  process.stdout.write(out.join('\n') + '\n');
  if (!keep) rmSync(work, { recursive: true, force: true });
}

/**
 * --contexts without --model: a small llama (8 layers, d 256, GQA 4:2, hd 64) so the default run stays within minutes
 * on a software Vulkan (lavapipe ran the SmolLM2 shape at seconds per step); the bytes per step scale with layers × KV heads × hd
 */
const CONTEXT_SHAPE = { ...SMOLLM2_SHAPE, numLayers: 8, hiddenSize: 256, numHeads: 4, numKvHeads: 2, headDim: 64, intermediateSize: 768, vocabSize: 4096 };

interface ContextRow { device: string; context: number; hostDeviceBytesPerStep: number; stepMs: number; dtype: string; kvDType: string }

/**
 * The work folder (--keep, else a temporary one) and the checkpoint a mode runs on: --model, else a random one of
 * `shape` written once into the work folder (`what` names it on stderr).
 */
async function workCheckpoint(shape: Parameters<typeof import('../src/checkpoint/random.ts').writeRandomCheckpoint>[2], what: string) {
  const work = flag('keep') ?? mkdtempSync(join(tmpdir(), 'safekeep-decode-step-'));
  const model = flag('model') ?? join(work, 'model');
  const { writeRandomCheckpoint } = await import('../src/checkpoint/random.ts');
  const { loadCheckpoint } = await import('../src/checkpoint/load.ts');
  if (!flag('model') && !existsSync(join(model, 'config.json'))) {
    process.stderr.write(`writing ${what} to ${model} ...\n`);
    await writeRandomCheckpoint(model, 'llama', shape);
  }
  return { work, ck: await loadCheckpoint(model) };
}

/** --contexts: bytes crossing and ms per decode step at each context length */
async function contexts(list: string): Promise<void> {
  const ctxs = list.split(',').map(Number);
  if (ctxs.some((c) => !Number.isInteger(c) || c < 1)) throw new Error(`--contexts must be positive integers, got ${list}`);
  const { work, ck } = await workCheckpoint(CONTEXT_SHAPE, 'a small random llama (8 layers, d 256)');
  const { createEngineFromCheckpoint } = await import('../src/engine/engine.ts');
  const device = flag('device') ?? 'cpu';
  const N = Number(flag('new') ?? 10);
  const reps = Number(flag('reps') ?? 3);
  const { resolveEngineConfig } = await import('../src/engine/engine-config.ts');
  const opts = {
    device: device as 'cpu', threads: Number(flag('threads') ?? 2), cacheDir: join(work, 'cache'), quiet: true,
    ...(flag('dtype') ? { dtype: flag('dtype') as 'f32' } : {}), ...(flag('kv-dtype') ? { kvDType: flag('kv-dtype') as 'f32' } : {}),
  };
  const dtype = resolveEngineConfig(opts).dtype;
  const e = await createEngineFromCheckpoint(ck, opts);
  const marks = markDecodeSteps(e, () => e.transfer.hostToDevice + e.transfer.deviceToHost, () => 0);
  const V = ck.config.vocabSize;
  const rows: ContextRow[] = [];
  try {
    for (const context of ctxs) {
      const prompt = [Array.from({ length: context }, (_, i) => 3 + ((i * 7919) % (V - 3)))];
      await e.generate(prompt, { maxNewTokens: 2, stopIds: [] }); // warm: the graph's shapes, the prefix cache
      let ms = Infinity, bytes = 0;
      for (let r = 0; r < reps; r++) {
        const m = await marks.during(() => e.generate(prompt, { maxNewTokens: N, stopIds: [] }));
        const step = medianIntervals(m);
        if (step.ms < ms) ({ ms, bytes } = step);
      }
      const row = { device, context, hostDeviceBytesPerStep: Math.round(bytes), stepMs: Number(ms.toFixed(3)), dtype, kvDType: e.kvDType };
      rows.push(row);
      process.stderr.write(`${JSON.stringify(row)}\n`);
    }
  } finally {
    await e.dispose();
    if (!flag('keep')) rmSync(work, { recursive: true, force: true });
  }
  const out = flag('json');
  if (out) writeFileSync(out, JSON.stringify({ rows }, null, 2) + '\n');
  process.stdout.write([`decode step by context, ${device}, ${rows[0]?.dtype ?? ''} weights, ${rows[0]?.kvDType ?? ''} KV, from one decode step's start to the next (median of a ${N}-token generate's ${N - 2}), best of ${reps}`, '',
    '| context | host↔device bytes / step | ms / step |', '| --- | --- | --- |',
    ...rows.map((r) => `| ${r.context} | ${r.hostDeviceBytesPerStep} | ${r.stepMs.toFixed(2)} |`)].join('\n') + '\n');
}

/** the state at the start of one decode step: wall ms, host↔device bytes so far, choosing seconds so far */
interface Mark { t: number; bytes: number; choose: number }

/**
 * Marks the start of every decode step (`engine.step` with one new token on a past) while `during` runs: consecutive
 * marks bound one whole decode iteration — its model step, the device-KV append, choosing tokens, the scheduler's own
 * work — and nothing of the prefill, whose cost (and, on a device, its one crossing of the prompt's KV; the prefix
 * cache's blocks read back) used to leak into a per-step figure taken as the difference of two runs.
 */
function markDecodeSteps(engine: object, bytes: () => number, choose: () => number): { during(f: () => Promise<unknown>): Promise<Mark[]> } {
  const e = engine as { step(inp: { width: number; past: { length: number } | null }): Promise<unknown> };
  const step = e.step.bind(e);
  let marks: Mark[] | null = null;
  e.step = async (inp) => {
    if (marks && inp.width === 1 && inp.past && inp.past.length > 0) marks.push({ t: performance.now(), bytes: bytes(), choose: choose() });
    return step(inp);
  };
  return {
    async during(f) {
      marks = [];
      try {
        await f();
        return marks;
      } finally {
        marks = null;
      }
    },
  };
}

/** per decode iteration (between consecutive marks), the median of ms, bytes and choosing ms */
function medianIntervals(m: Mark[]): { ms: number; bytes: number; chooseMs: number } {
  if (m.length < 2) throw new Error(`only ${m.length} decode step(s) seen: raise --new`);
  const diff = (f: (x: Mark) => number) => median(m.slice(1).map((x, i) => f(x) - f(m[i]!)));
  return { ms: diff((x) => x.t), bytes: diff((x) => x.bytes), chooseMs: diff((x) => x.choose) * 1000 };
}

/**
 * --sampling: a `--rows`-row decode step, greedy and sampled, interleaved in one engine. Per decoding, from one decode
 * step's start to the next (median over the run, best of --reps): the wall ms, the ms choosing tokens (the scheduler's
 * timer) and the model's decode step alone (`engine.step` timed). The cost over greedy is the extra choosing time as a
 * share of greedy's step.
 */
async function sampling(): Promise<void> {
  const { work, ck } = await workCheckpoint(SMOLLM2_SHAPE, 'a SmolLM2-135M-shaped random checkpoint');
  const { createEngineFromCheckpoint } = await import('../src/engine/engine.ts');
  const [B, P, N, reps] = [Number(flag('rows') ?? 32), Number(flag('prompt') ?? 64), Number(flag('new') ?? 34), Number(flag('reps') ?? 3)];
  if (!(N > 2)) throw new Error(`--new must be more than 2, got ${N}`);
  const device = flag('device') ?? 'cpu';
  const e = await createEngineFromCheckpoint(ck, { device: device as 'cpu', threads: Number(flag('threads') ?? 2), cacheDir: join(work, 'cache'), quiet: true });
  const times = timeSteps(e as unknown as Parameters<typeof timeSteps>[0]);
  const marks = markDecodeSteps(e, () => e.transfer.hostToDevice + e.transfer.deviceToHost, () => e.scheduler.stats.seconds.choose);
  const V = ck.config.vocabSize;
  const prompts = Array.from({ length: B }, (_, r) => Array.from({ length: P }, (_, i) => 3 + ((i * 7919 + r * 104729) % (V - 3))));
  const modes: [string, { temperature: number; topP?: number; seed: number } | undefined][] = [
    ['greedy', undefined], ['temperature 0.7', { temperature: 0.7, seed: 1 }], ['temperature 0.7, top-p 0.95', { temperature: 0.7, topP: 0.95, seed: 1 }]];
  const best = new Map<string, { ms: number; bytes: number; chooseMs: number; model: number }>();
  try {
    await e.generate(prompts, { maxNewTokens: 2, stopIds: [] });
    for (let r = 0; r < reps; r++) {
      for (const [name, s] of modes) {
        Object.assign(times, emptyTimes());
        const m = await marks.during(() => e.generate(prompts, { stopIds: [], maxNewTokens: N, ...(s ? { sampling: s } : {}) }));
        const step = { ...medianIntervals(m), model: median(times.decodeSteps.filter((d) => d.batch === B).map((d) => d.s * 1000)) };
        const prev = best.get(name);
        if (!prev || step.ms < prev.ms) best.set(name, step);
      }
    }
  } finally {
    await e.dispose();
    if (!flag('keep')) rmSync(work, { recursive: true, force: true });
  }
  const rows = modes.map(([name]) => {
    const b = best.get(name)!;
    return { device, context: P, hostDeviceBytesPerStep: Math.round(b.bytes), stepMs: Number(b.ms.toFixed(3)), modelStepMs: Number(b.model.toFixed(3)), rows: B, sampling: name, chooseMs: Number(b.chooseMs.toFixed(3)) };
  });
  const g = rows[0]!;
  const over = (r: typeof g) => (r === g ? '—' : `${(100 * (r.chooseMs - g.chooseMs) / g.stepMs).toFixed(1)} %`);
  const out = flag('json');
  if (out) writeFileSync(out, JSON.stringify({ rows }, null, 2) + '\n');
  process.stdout.write([`decode step of ${B} rows, prompt ${P}, ${device}: from one decode step's start to the next, median of a ${N}-token generate's ${N - 2}; model: engine.step of the ${B}-row decode steps, median; best of ${reps}, interleaved`, '',
    '| decoding | wall ms / step | model ms / step | choosing ms / step | choosing over greedy (share of its step) |', '| --- | --- | --- | --- | --- |',
    ...rows.map((r) => `| ${r.sampling} | ${r.stepMs.toFixed(2)} | ${r.modelStepMs.toFixed(2)} | ${r.chooseMs.toFixed(2)} | ${over(r)} |`)].join('\n') + '\n');
}

const root = flag('child');
if (root !== undefined) await child(root);
else if (flag('contexts') !== undefined) await contexts(flag('contexts')!);
else if (process.argv.includes('--sampling')) await sampling();
else await main();
