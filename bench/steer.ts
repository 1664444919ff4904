/**
 * `npm run bench:steer [-- --reps N --new N]`: decode tokens/s with steering on vs off, measured in one process on
 * the same engine, runs interleaved (off, on, off, on …), best of --reps. SmolLM2-135M-shaped random checkpoint.
 * Target: steering overhead ≤ 5 % (steering rides in an existing Gemm bias, so it should cost next to nothing).
 *
 * `npm run bench:steer -- --workload sweep [--base REV --rounds 2 --prompts 8 --alphas 4 --new 32 --threads 2
 *   --positions all|generated --shape tiny --plain-steps 64 --json FILE]`: a
 * steering sweep (Table 3: every prompt at every α, all submitted at once) with the engine of REV (default: the
 * merge base with main, whose scheduler decodes each distinct steering set as its own group, one step each) against
 * the working tree's (every running sequence in one decode step, each row with its own steering), fresh processes,
 * old and new interleaved, best of --rounds. Each child also measures the plain path (no steering): one sequence's
 * decode step time and a batch of --prompts plain sequences, so a cost of the per-row inputs to unsteered decoding
 * shows in the same run (`--shape tiny`: 30 layers at d 64, where a step is its fixed cost). `--workload plain`: only the
 * unsteered decode step, both engines in one process, alternating blocks of steps (the steadiest comparison). Prints the figures with the load average; results as JSON in --json FILE (default: the temp folder).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { engineEnv } from '../src/cli/env.ts';
import { createEngine } from '../src/engine/engine.ts';
import { finishBench, flag as flagOf, loadavg, runChild, SMOLLM2_SHAPE } from './common.ts';

const flag = (name: string, def: number): number => {
  const v = flagOf(name);
  return v === undefined ? def : Number(v);
};

const repo = fileURLToPath(new URL('..', import.meta.url));

/** what the child needs from either engine version (both have this shape) */
interface SweepEngine {
  generate(ids: number[][], o: object): Promise<{ generatedIds: number[] }[]>;
  step(inp: { ids: BigInt64Array; batch: number; width: number; starts: number[]; past: unknown; steer: Float32Array; hiddenIndex: number[]; logitsIndex: number[] }): Promise<{ present: unknown }>;
  scheduler: { stats: { decodeSteps: number; decodeRows: number } };
  dispose(): Promise<void>;
}

/** `--shape tiny`: SmolLM2's 30 layers at d 64, so a decode step's time is its fixed cost (dispatch, feeds, JS) */
const TINY_SHAPE = { ...SMOLLM2_SHAPE, hiddenSize: 64, numHeads: 4, numKvHeads: 2, headDim: 16, intermediateSize: 128, vocabSize: 512 };

/** deterministic prompts of 40..72 tokens */
const sweepPrompts = (n: number, vocab: number): number[][] =>
  Array.from({ length: n }, (_, p) => Array.from({ length: 40 + ((p * 13) % 33) }, (_, i) => 3 + ((p * 7919 + i * 104729) % (vocab - 3))));

/** one measurement in a fresh process: → stdout one JSON line */
async function sweepChild(): Promise<void> {
  const mod = await import(pathToFileURL(flagOf('engine')!).href) as { createEngineFromCheckpoint: (c: unknown, o: object) => Promise<SweepEngine> };
  const ck = await loadCheckpoint(flagOf('model')!);
  const c = ck.config;
  const engine = await mod.createEngineFromCheckpoint(ck, { threads: flag('threads', 2), cacheDir: flagOf('cache')! });
  const nPrompts = flag('prompts', 8);
  const nAlphas = flag('alphas', 4);
  const K = flag('new', 32);
  const prompts = sweepPrompts(nPrompts, c.vocabSize);
  const vector = Float32Array.from({ length: c.hiddenSize }, (_, i) => Math.sin(i));
  const alphas = Array.from({ length: nAlphas }, (_, i) => 2 * (i + 1));
  // 'generated': the prompts' prefill is unsteered, so the α runs of a prompt share its prefix-cache blocks
  const positions = flagOf('positions') === 'generated' ? 'generated' : 'all';
  // the sweep as `safekeep steer` submits it: one generate call per α, all in flight together
  const sweep = (maxNewTokens: number) => Promise.all(alphas.map((alpha) =>
    engine.generate(prompts, { maxNewTokens, stopIds: [], steer: { layer: 15, vector, alpha, positions } })));
  await sweep(2); // warm-up
  let t = performance.now();
  await sweep(1); // the prefills alone (each sequence's first token comes from its prefill)
  const prefillS = (performance.now() - t) / 1000;
  const s0 = { ...engine.scheduler.stats };
  t = performance.now();
  await sweep(K);
  const sweepS = (performance.now() - t) / 1000;
  const steps = engine.scheduler.stats.decodeSteps - s0.decodeSteps;
  // the plain path: the same prompts unsteered, as one batch; and one sequence's decode steps alone
  t = performance.now();
  await engine.generate(prompts, { maxNewTokens: 1, stopIds: [] });
  const plainPrefillS = (performance.now() - t) / 1000;
  t = performance.now();
  await engine.generate(prompts, { maxNewTokens: K, stopIds: [] });
  const plainBatchS = (performance.now() - t) / 1000;
  // one plain decode step on the step API (same call in both versions): B rows on a left-padded prompt batch; the
  // least wall time and the mean CPU time (user + system, all threads) over `steps` steps
  const steer = new Float32Array((c.numLayers + 1) * c.hiddenSize);
  const plainStep = async (B: number): Promise<{ ms: number; cpuMs: number }> => {
    const rows = prompts.slice(0, B);
    const W = Math.max(...rows.map((r) => r.length));
    const starts = rows.map((r) => W - r.length);
    const ids = new BigInt64Array(B * W);
    rows.forEach((r, b) => r.forEach((x, t) => { ids[b * W + starts[b]! + t] = BigInt(x); }));
    const last = Array.from({ length: B }, (_, b) => b);
    let out = await engine.step({ ids, batch: B, width: W, starts, past: null, steer, hiddenIndex: [], logitsIndex: last.map((b) => b * W + W - 1) });
    out = await engine.step({ ids: new BigInt64Array(B).fill(3n), batch: B, width: 1, starts, past: out.present, steer, hiddenIndex: [], logitsIndex: last });
    let ms = Infinity;
    const steps = flag('plain-steps', 64);
    const cpu0 = process.cpuUsage();
    for (let k = 0; k < steps; k++) {
      const ts = performance.now();
      out = await engine.step({ ids: new BigInt64Array(B).fill(BigInt(4 + k)), batch: B, width: 1, starts, past: out.present, steer, hiddenIndex: [], logitsIndex: last });
      ms = Math.min(ms, performance.now() - ts);
    }
    const cpu = process.cpuUsage(cpu0);
    return { ms, cpuMs: (cpu.user + cpu.system) / 1000 / steps };
  };
  const one = await plainStep(1);
  const eight = await plainStep(Math.min(8, nPrompts));
  await engine.dispose();
  const seqs = nPrompts * nAlphas;
  process.stdout.write(`${JSON.stringify({
    sweepS, prefillS, decodeS: sweepS - prefillS, steps, tokS: (seqs * K) / sweepS, decodeTokS: (seqs * (K - 1)) / (sweepS - prefillS),
    plainBatchDecodeTokS: (nPrompts * (K - 1)) / (plainBatchS - plainPrefillS), plainStepMs: one.ms, plainStepCpuMs: one.cpuMs, plain8StepMs: eight.ms, plain8StepCpuMs: eight.cpuMs, load: loadavg(),
  })}\n`);
}

/** the sweep with the old code (REV's src/) and the working tree's, fresh children, interleaved, best of --rounds */
async function sweepMain(): Promise<void> {
  const rounds = flag('rounds', 2);
  const tiny = flagOf('shape') === 'tiny';
  const rev = flagOf('base') ?? execFileSync('git', ['-C', repo, 'merge-base', 'HEAD', 'main'], { encoding: 'utf8' }).trim();
  const dir = mkdtempSync(join(tmpdir(), 'bench-steer-sweep-'));
  try {
    process.stderr.write(`writing the SmolLM2-shaped random checkpoint ...\n`);
    await writeRandomCheckpoint(join(dir, 'm'), 'llama', { ...(tiny ? TINY_SHAPE : SMOLLM2_SHAPE), seed: 3 });
    const old = join(dir, 'base');
    mkdirSync(old);
    execFileSync('tar', ['-x', '-C', old], { input: execFileSync('git', ['-C', repo, 'archive', rev, 'src', 'package.json'], { maxBuffer: 1 << 30 }) });
    symlinkSync(join(repo, 'node_modules'), join(old, 'node_modules'));
    const variants = [
      { name: `groups (${rev.slice(0, 7)}: a decode step per steering set)`, engine: join(old, 'src', 'engine', 'engine.ts'), cache: join(dir, 'cache-old') },
      { name: 'per-row (working tree: one decode step)', engine: resolve(repo, 'src', 'engine', 'engine.ts'), cache: join(dir, 'cache-new') },
    ];
    const pass = ['threads', 'prompts', 'alphas', 'new', 'plain-steps', 'positions'].flatMap((f) => (flagOf(f) ? [`--${f}`, flagOf(f)!] : []));
    if (flagOf('workload') === 'plain') {
      const args = ['--import', 'tsx', fileURLToPath(import.meta.url), '--plain-child', '--model', join(dir, 'm'), '--rounds', String(flag('rounds', 6)),
        '--engine-old', variants[0]!.engine, '--cache-old', variants[0]!.cache, '--engine-new', variants[1]!.engine, '--cache-new', variants[1]!.cache, ...pass];
      process.stderr.write(`one process, both engines, alternating blocks of ${flag('plain-steps', 64)} steps × ${flag('rounds', 6)} rounds ...\n`);
      const m = runChild(process.execPath, args, 'plain-path child').json as Record<string, number>;
      const out = [
        `plain decode step (no steering), ${tiny ? '30 layers at d 64 (the step is its fixed cost)' : 'SmolLM2-135M shape'}, f32, ${flag('threads', 2)} threads: both engines in one process, alternating blocks of ${flag('plain-steps', 64)} steps, best of ${flag('rounds', 6)} blocks`,
        '| engine | 1 row: least step ms | 1 row: CPU ms / step | 8 rows: least step ms | 8 rows: CPU ms / step |',
        '| --- | --- | --- | --- | --- |',
        `| ${variants[0]!.name} | ${m.old1Ms!.toFixed(3)} | ${m.old1CpuMs!.toFixed(3)} | ${m.old8Ms!.toFixed(3)} | ${m.old8CpuMs!.toFixed(3)} |`,
        `| ${variants[1]!.name} | ${m.new1Ms!.toFixed(3)} | ${m.new1CpuMs!.toFixed(3)} | ${m.new8Ms!.toFixed(3)} | ${m.new8CpuMs!.toFixed(3)} |`,
        `| new / old | ${(m.new1Ms! / m.old1Ms!).toFixed(3)} | ${(m.new1CpuMs! / m.old1CpuMs!).toFixed(3)} | ${(m.new8Ms! / m.old8Ms!).toFixed(3)} | ${(m.new8CpuMs! / m.old8CpuMs!).toFixed(3)} |`,
      ];
      finishBench(flagOf('json') ?? join(tmpdir(), 'safekeep-bench-steer-plain.json'), { base: rev, ...m }, out, [m.load!]);
      return;
    }
    const best = variants.map(() => null as Record<string, number> | null);
    const loads: number[] = [];
    for (let r = 0; r < rounds; r++) {
      for (const [i, v] of variants.entries()) {
        process.stderr.write(`round ${r + 1}/${rounds}: ${v.name} ... (load ${loadavg()})\n`);
        const { json } = runChild(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--sweep-child', '--model', join(dir, 'm'), '--engine', v.engine, '--cache', v.cache, ...pass], v.name);
        const m = json as Record<string, number>;
        loads.push(m.load!);
        const b = best[i];
        // best of the rounds per figure: rates (…tokS) the largest, times the smallest
        best[i] = b ? Object.fromEntries(Object.entries(m).map(([k, x]) => [k, /toks$/i.test(k) ? Math.max(x, b[k]!) : Math.min(x, b[k]!)])) : m;
      }
    }
    const [o, n] = best as Record<string, number>[];
    const K = flag('new', 32);
    const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
    const out = [
      `steering sweep: ${flag('prompts', 8)} prompts (40-72 tokens) × ${flag('alphas', 4)} alphas, steer positions ${flagOf('positions') ?? 'all'}, ${K} new tokens, ${tiny ? '30 layers at d 64 (the step is its fixed cost)' : 'SmolLM2-135M shape'} (random), f32, ${flag('threads', 2)} threads, best of ${rounds} interleaved fresh processes`,
      '| engine | sweep s | decode steps | tok/s | decode-only tok/s | plain generate, batch: decode tok/s | plain step 1 row: ms (CPU ms) | plain step 8 rows: ms (CPU ms) |',
      '| --- | --- | --- | --- | --- | --- | --- | --- |',
      ...variants.map((v, i) => { const m = best[i]!; return `| ${v.name} | ${m.sweepS!.toFixed(2)} | ${m.steps} | ${m.tokS!.toFixed(1)} | ${m.decodeTokS!.toFixed(1)} | ${m.plainBatchDecodeTokS!.toFixed(1)} | ${m.plainStepMs!.toFixed(2)} (${m.plainStepCpuMs!.toFixed(2)}) | ${m.plain8StepMs!.toFixed(2)} (${m.plain8StepCpuMs!.toFixed(2)}) |`; }),
      `| new / old | ${ratio(o!.sweepS!, n!.sweepS!)} faster | | ${ratio(n!.tokS!, o!.tokS!)} | ${ratio(n!.decodeTokS!, o!.decodeTokS!)} | ${ratio(n!.plainBatchDecodeTokS!, o!.plainBatchDecodeTokS!)} | ${ratio(n!.plainStepMs!, o!.plainStepMs!)} (${ratio(n!.plainStepCpuMs!, o!.plainStepCpuMs!)}) of old | ${ratio(n!.plain8StepMs!, o!.plain8StepMs!)} (${ratio(n!.plain8StepCpuMs!, o!.plain8StepCpuMs!)}) of old |`,
    ];
    finishBench(flagOf('json') ?? join(tmpdir(), 'safekeep-bench-steer-sweep.json'), { base: rev, rounds, variants: variants.map((v, i) => ({ name: v.name, ...best[i] })) }, out, loads);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `--workload plain`: the unsteered decode step of REV's engine and the working tree's in ONE process, alternating
 * blocks of --plain-steps steps (old, new, old, new … --rounds times), so both see the same load: the least step time
 * and the CPU time per step of each engine's best block, for 1 and 8 rows.
 */
async function plainChild(): Promise<void> {
  const ck = await loadCheckpoint(flagOf('model')!);
  const c = ck.config;
  const engines = await Promise.all(['old', 'new'].map(async (v) => {
    const mod = await import(pathToFileURL(flagOf(`engine-${v}`)!).href) as { createEngineFromCheckpoint: (c: unknown, o: object) => Promise<SweepEngine> };
    return mod.createEngineFromCheckpoint(ck, { threads: flag('threads', 2), cacheDir: flagOf(`cache-${v}`)! });
  }));
  const prompts = sweepPrompts(8, c.vocabSize);
  const steer = new Float32Array((c.numLayers + 1) * c.hiddenSize);
  const steps = flag('plain-steps', 64);
  const out: Record<string, number> = {};
  for (const B of [1, 8]) {
    const rows = prompts.slice(0, B);
    const W = Math.max(...rows.map((r) => r.length));
    const starts = rows.map((r) => W - r.length);
    const ids = new BigInt64Array(B * W);
    rows.forEach((r, b) => r.forEach((x, t) => { ids[b * W + starts[b]! + t] = BigInt(x); }));
    const last = Array.from({ length: B }, (_, b) => b);
    // each engine decodes from its own prefill; every block restarts from that past (the same context length)
    const pasts = await Promise.all(engines.map(async (e) => {
      const p = await e.step({ ids, batch: B, width: W, starts, past: null, steer, hiddenIndex: [], logitsIndex: last.map((b) => b * W + W - 1) });
      return (await e.step({ ids: new BigInt64Array(B).fill(3n), batch: B, width: 1, starts, past: p.present, steer, hiddenIndex: [], logitsIndex: last })).present;
    }));
    const best = engines.map(() => ({ ms: Infinity, cpuMs: Infinity }));
    for (let r = 0; r < flag('rounds', 6); r++) {
      for (const [i, e] of engines.entries()) {
        let past = pasts[i];
        const cpu0 = process.cpuUsage();
        for (let k = 0; k < steps; k++) {
          const t = performance.now();
          past = (await e.step({ ids: new BigInt64Array(B).fill(BigInt(4 + k)), batch: B, width: 1, starts, past, steer, hiddenIndex: [], logitsIndex: last })).present;
          best[i]!.ms = Math.min(best[i]!.ms, performance.now() - t);
        }
        const cpu = process.cpuUsage(cpu0);
        best[i]!.cpuMs = Math.min(best[i]!.cpuMs, (cpu.user + cpu.system) / 1000 / steps);
      }
    }
    best.forEach((b, i) => { out[`${i ? 'new' : 'old'}${B}Ms`] = b.ms; out[`${i ? 'new' : 'old'}${B}CpuMs`] = b.cpuMs; });
  }
  for (const e of engines) await e.dispose();
  process.stdout.write(`${JSON.stringify({ ...out, load: loadavg() })}\n`);
}

/** steering on vs off in one process (the original bench) */
async function overheadMain(): Promise<void> {
  const reps = flag('reps', 3);
  const newTokens = flag('new', 32);
  const dir = mkdtempSync(join(tmpdir(), 'bench-steer-'));
  const cacheDir = process.env.SAFEKEEP_CACHE ?? join(dir, '.graphs');
  try {
    await writeRandomCheckpoint(join(dir, 'm'), 'llama', { ...SMOLLM2_SHAPE, seed: 3 });
    const eng = await createEngine(join(dir, 'm'), { ...engineEnv(), cacheDir });
    const prompt = Array.from({ length: 128 }, (_, i) => 3 + ((i * 7919) % 49000));
    const vector = Float32Array.from({ length: SMOLLM2_SHAPE.hiddenSize }, (_, i) => Math.sin(i));
    const steer = { layer: 15, vector, alpha: 4 };
    /** decode-only seconds: t(new) − t(1 new) removes the prefill */
    const decodeTps = async (on: boolean): Promise<number> => {
      const opts = { stopIds: [] as number[], ...(on ? { steer } : {}) };
      let t = performance.now();
      await eng.generate([prompt], { ...opts, maxNewTokens: 1 });
      const prefill = performance.now() - t;
      t = performance.now();
      await eng.generate([prompt], { ...opts, maxNewTokens: newTokens });
      const total = performance.now() - t;
      return (newTokens - 1) / ((total - prefill) / 1000);
    };
    await decodeTps(false); // warm-up
    await decodeTps(true);
    const off: number[] = [];
    const on: number[] = [];
    for (let r = 0; r < reps; r++) {
      off.push(await decodeTps(false));
      on.push(await decodeTps(true));
    }
    await eng.dispose();
    const best = (x: number[]): number => Math.max(...x);
    const overhead = (1 - best(on) / best(off)) * 100;
    console.log(`decode tokens/s (prompt 128, ${newTokens} new, best of ${reps}): steering off ${best(off).toFixed(1)}, on ${best(on).toFixed(1)}`);
    console.log(`steering overhead: ${overhead.toFixed(1)} % (target ≤ 5 %)   runs off=[${off.map((x) => x.toFixed(1)).join(', ')}] on=[${on.map((x) => x.toFixed(1)).join(', ')}]`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv.includes('--sweep-child')) await sweepChild();
else if (process.argv.includes('--plain-child')) await plainChild();
else if (flagOf('workload') === 'sweep' || flagOf('workload') === 'plain') await sweepMain();
else await overheadMain();
