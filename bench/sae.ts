/**
 * `npm run bench:sae [-- --d-in 1024 --expansion 16 --tokens 256 --threads 2 --rounds 5 --base DIR --part encode|forward]`: sparse-autoencoder cost.
 *
 * 1. Encoding cached activations, x [N, d_in] → acts [N, d_sae] (standard SAE, f32, d_sae = expansion × d_in):
 *    `SaeEncoder` (onnxruntime, the graph the engine splices in), `sae.encode` (TypeScript), against the dense
 *    matmul bound of this machine — onnxruntime's MatMul of the same [N, d_in] × [d_in, d_sae] with the weight as a
 *    constant (pre-packed), the fastest dense product here (bench/common.ts `rawMatmulSession`). Same process,
 *    interleaved rounds, best of each. Target: within 1.5× of the bound.
 * 2. Capture with an SAE in a forward: a random Llama-shaped checkpoint (d = --model-d, --layers 32 as Llama-3.1-8B
 *    has), runWithCache of T tokens without hooks vs the hooked graph alone (the stream at the point captured, no
 *    SAE), vs an SAE of d_sae = 16 × d capturing its activations at blocks.1.resid_post, vs its reconstruction
 *    spliced in. Interleaved rounds (trees and forwards in turn), each forward's best of 2 per round; the overhead
 *    over the forward without SAE of the best times and the median of the rounds' own ratios (a round's forwards
 *    ran within a second of each other: the ratio is robust to the load drifting). Target: capture ≤ +10 %. One SAE's share of a forward's FLOPs is about (2·d·16d) / (L · 2·(4d² + 3·d·4d)) ≈ 1/L (encode; the
 *    splice doubles it), so the depth matters more than the width.
 *
 * `--base DIR`: the same workload, interleaved in the same process, on another checkout's engine (e.g. a worktree
 * of the commit before a change, with node_modules beside it): the before/after comparison on the same machine load.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolve } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import * as thisEngine from '../src/engine/engine.ts';
import * as thisEncoder from '../src/engine/runtime/sae-encoder.ts';
import { encode } from '../src/sae/math.ts';
import { best, flag, loadavg, rawMatmulSession } from './common.ts';
import type { Sae } from '../src/sae/types.ts';
import { randomSae } from './random-sae.ts';

const dIn = Number(flag('d-in') ?? 1024);
const expansion = Number(flag('expansion') ?? 16);
const N = Number(flag('tokens') ?? 256);
const threads = Number(flag('threads') ?? 2);
const rounds = Number(flag('rounds') ?? 5);
const modelD = Number(flag('model-d') ?? 256);
const T = Number(flag('seq') ?? 128);
const layers = Number(flag('layers') ?? 32);
const baseDir = flag('base');

/** the engine and encoder of this checkout, and of --base's */
interface Tree { name: string; createEngine: typeof thisEngine.createEngine; SaeEncoder: typeof thisEncoder.SaeEncoder }
const trees: Tree[] = [{ name: 'this checkout', createEngine: thisEngine.createEngine, SaeEncoder: thisEncoder.SaeEncoder }];
if (baseDir) {
  const root = resolve(baseDir);
  const e = (await import(join(root, 'src/engine/engine.ts'))) as typeof thisEngine;
  const enc = (await import(join(root, 'src/engine/runtime/sae-encoder.ts'))) as typeof thisEncoder;
  trees.push({ name: `base ${baseDir}`, createEngine: e.createEngine, SaeEncoder: enc.SaeEncoder });
}
const pct = (t: number, ref: number) => `${t / ref >= 1 ? '+' : ''}${(100 * (t / ref - 1)).toFixed(1)} %`;
const ms = (t: number) => `${(t * 1e3).toFixed(2)} ms`;

async function encodeBench(): Promise<void> {
  const m = expansion * dIn;
  const sae = randomSae(dIn, m, 1);
  const x = Float32Array.from({ length: N * dIn }, (_, i) => Math.sin(i * 0.37));
  const encs = await Promise.all(trees.map((t) => t.SaeEncoder.open(sae, { threads })));
  const bound = await rawMatmulSession(threads, N, dIn, m, 1);
  for (const enc of encs) await enc.encode(x, N);
  const load0 = loadavg();
  let tBound = Infinity, tJs = Infinity;
  const tOrt = encs.map(() => Infinity);
  for (let r = 0; r < rounds; r++) {
    tBound = Math.min(tBound, await best(2, bound.run));
    for (const [i, enc] of encs.entries()) tOrt[i] = Math.min(tOrt[i]!, await best(2, () => enc.encode(x, N)));
    if (r === 0) tJs = await best(1, async () => encode(sae, x, N));
  }
  const gflops = (t: number) => (bound.flops / t / 1e9).toFixed(1);
  console.log(`encode x [${N}, ${dIn}] → acts [${N}, ${m}] (standard, f32), ${threads} threads, best of ${rounds} interleaved rounds × 2, load ${load0.toFixed(2)} → ${loadavg().toFixed(2)}:`);
  console.log(`  dense matmul bound (onnxruntime MatMul, constant weight) ${ms(tBound)}  ${gflops(tBound)} GFLOP/s`);
  for (const [i, t] of trees.entries()) {
    console.log(`  SaeEncoder, ${t.name.padEnd(30)}  ${ms(tOrt[i]!)}  ${gflops(tOrt[i]!)} GFLOP/s  ${(tOrt[i]! / tBound).toFixed(2)}× the bound (target ≤ 1.5×)`);
  }
  console.log(`  sae.encode (TypeScript)                   ${ms(tJs)}  ${gflops(tJs)} GFLOP/s  ${(tJs / tBound).toFixed(2)}× the bound`);
  for (const enc of encs) await enc.release();
  await bound.release();
}

/** the best wall and the best CPU seconds of `reps` runs (CPU: user + system of the process, every thread's work) */
async function bestWallAndCpu(reps: number, f: () => Promise<unknown>): Promise<[number, number]> {
  let w = Infinity, c = Infinity;
  for (let i = 0; i < reps; i++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await f();
    w = Math.min(w, (performance.now() - t0) / 1000);
    const u = process.cpuUsage(c0);
    c = Math.min(c, (u.user + u.system) / 1e6);
  }
  return [w, c];
}

/** the four forwards of one tree: no SAE, the hooked graph alone, SAE capture, SAE reconstruction spliced in */
async function forwardsOf(tree: Tree, dir: string, sae: Sae, ids: number[]) {
  const opts = { cacheDir: join(dir, '.cache'), threads, quiet: true };
  // two engines: an engine keeps HOOK_SESSIONS = 2 hook sessions, and three kept warm must not evict each other
  const engine = await tree.createEngine(dir, opts);
  const engine2 = await tree.createEngine(dir, opts);
  const runs = [
    () => engine.runWithCache(ids, { logitsAt: 'last' }),
    // the hooked graph alone (the stream at the point as an output): what any hook costs, SAE or not
    () => engine.runWithCache(ids, { logitsAt: 'last', names: ['blocks.1.resid_post'] }),
    () => engine.runWithCache(ids, { logitsAt: 'last', saes: [{ sae }] }),
    () => engine2.runWithCache(ids, { logitsAt: 'last', saes: [{ sae, splice: 'reconstruction', captureActs: false }] }),
  ];
  for (const run of runs) await run();
  return { runs, dispose: async () => { await engine.dispose(); await engine2.dispose(); } };
}

async function captureBench(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-sae-'));
  try {
    await writeRandomCheckpoint(dir, 'llama', { seed: 3, numLayers: layers, hiddenSize: modelD, numHeads: 4, numKvHeads: 2, intermediateSize: 4 * modelD, vocabSize: 4096, ropeScaling: null });
    const sae = randomSae(modelD, 16 * modelD, 2);
    const ids = Array.from({ length: T }, (_, i) => (i * 7919) % 4096);
    const each: Awaited<ReturnType<typeof forwardsOf>>[] = [];
    for (const tree of trees) each.push(await forwardsOf(tree, dir, sae, ids));
    // per clock (wall, CPU), tree, forward and round: the best of 2 runs
    const perRound = [0, 1].map(() => each.map(() => [[], [], [], []] as number[][]));
    const load0 = loadavg();
    for (let r = 0; r < rounds; r++) {
      // the trees take turns going first, and the four forwards their order, so no forward always follows another
      for (let k = 0; k < each.length; k++) {
        const i = (r + k) % each.length;
        for (let q = 0; q < 4; q++) {
          const j = (r + q) % 4;
          const [w, c] = await bestWallAndCpu(2, each[i]!.runs[j]!);
          perRound[0]![i]![j]!.push(w);
          perRound[1]![i]![j]!.push(c);
        }
      }
    }
    console.log(`forward of ${T} token${T === 1 ? "" : "s"}, random Llama d=${modelD} (${layers} layers), SAE d_sae=${16 * modelD} (16·d_in) at blocks.1.resid_post, ${threads} thread${threads === 1 ? "" : "s"}, ${rounds} interleaved rounds of best-of-2, load ${load0.toFixed(2)} → ${loadavg().toFixed(2)}`);
    console.log('  overhead over the forward without SAE: of the best times, and the median (min–max) of each round\'s own ratio;');
    console.log('  wall time, and CPU time (user + system of the process: the work done, not the waits for a core on a shared machine)');
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const rows = ['no SAE', 'hooked graph, no SAE (the stream captured)', 'SAE capturing its activations', 'SAE reconstruction spliced in'];
    for (const [i, tree] of trees.entries()) {
      for (const [clock, name] of ['wall', 'CPU'].entries()) {
        console.log(`  ${tree.name}, ${name}:`);
        const t = perRound[clock]![i]!;
        const plain = Math.min(...t[0]!);
        for (const [j, label] of rows.entries()) {
          const bestJ = Math.min(...t[j]!);
          if (j === 0) { console.log(`    ${label.padEnd(44)} ${ms(bestJ)}`); continue; }
          const ratios = t[j]!.map((x, r) => x / t[0]![r]!);
          const paired = `${pct(median(ratios), 1)} (${pct(Math.min(...ratios), 1)} … ${pct(Math.max(...ratios), 1)})`;
          const target = j === 2 ? `   target ≤ +10 %: ${bestJ / plain <= 1.1 ? 'met' : `missed by ${(100 * (bestJ / plain - 1.1)).toFixed(1)} points`} (best), ${median(ratios) <= 1.1 ? 'met' : 'missed'} (median)` : '';
          console.log(`    ${label.padEnd(44)} ${ms(bestJ)}  best ${pct(bestJ, plain)}, paired ${paired}${target}`);
        }
      }
    }
    for (const e of each) await e.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// --part encode | forward: one half only
const part = flag('part');
if (part !== 'forward') await encodeBench();
if (part !== 'encode') await captureBench();
