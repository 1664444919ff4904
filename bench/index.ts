/**
 * `npm run bench [-- --threads N --reps R --pairs P --dtypes f32,q8,q4 --device cpu|cuda|webgpu --keep DIR]`: one table
 * on the machine at hand (`--device`: the engine's; the GEMM and read-bandwidth yardsticks stay on the CPU, so their
 * fractions mean something on the CPU only; on a GPU pass e.g. `--dtypes f16,f32`), for f32, q8 and q4 (each measured in its own child process, after its quantized weights were made by
 * another child, so peak RSS is the engine's alone):
 * - prefill 1×512 tokens/s (hidden states of all layers + logits at the last position) and its GFLOP/s vs a raw
 *   onnxruntime MatMul chain (f32, same threads, runs interleaved);
 * - decode tokens/s with steering (prompt 128, greedy `generate()`, t(48 new) − t(2 new));
 * - extraction throughput on the bundled pair set in the agent configuration (schema tools), rendered with the real
 *   Llama-3.1 tokenizer and template (../shared/templates, else the npm tokenizer's own template) and run with
 *   shared-prefix KV reuse as `safekeep extract` does (last-token hidden states, batches of 16, one prefix cache):
 *   prompts/s (and the same prompts through plain `forward`, no reuse), and computed/prompt tokens;
 * - peak RSS of the measuring child (VmHWM);
 * - next to each figure its fraction of the machine's limit measured in the same child: prefill and extraction
 *   GFLOP/s over the raw GEMM yardstick, decode's bytes per step (weights as stored + KV) × tok/s over a 256 MiB
 *   read-bandwidth probe (bench/common.ts) run interleaved with the decode reps; and the load average at each.
 * Model: SmolLM2-135M shape (30 layers, d 576, 9/3 heads, intermediate 1536, vocab 49152, tied), random weights.
 * Token ids of the workload are taken modulo the model's vocabulary (prefix structure unchanged). --pairs (default
 * 16, round-robin over categories) bounds the run time; the full-set ratio is printed from the plan as well.
 * Writes bench/results.json (git-ignored).
 */
import { spawnSync } from 'node:child_process';
import { SMOLLM2_SHAPE, best, decodeStepBytes, flag, interleavedBest, loadavg, peakRss, rawMatmulSession, readBandwidthSession } from './common.ts';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { loadPairSet } from '../src/data/load.ts';
import { createEngineFromCheckpoint } from '../src/engine/engine.ts';
import type { ComputeDType } from '../src/engine/graph/precision.ts';
import { resolveEngineConfig } from '../src/engine/engine-config.ts';
import { engineEnv } from '../src/cli/env.ts';
import { plannedReuse, prefixPlan } from '../src/engine/run/prefix.ts';
import { PrefixCache } from '../src/engine/run/prefix-cache.ts';
import { quantizedWeights } from '../src/engine/runtime/quant-store.ts';
import { stratifiedSubset } from '../src/experiments/extract.ts';
import { PromptBuilder } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { installTokenizer, loadPromptTokenizer } from '../src/prompts/tokenizer.ts';

const here = dirname(fileURLToPath(import.meta.url));
export interface BenchRow {
  dtype: ComputeDType;
  prefillTps: number;
  engineGflops: number;
  gemmGflops: number;
  decodeSteerTps: number;
  /** bytes a decode step reads (weights as stored + KV at the mean context, decodeStepBytes) */
  decodeStepBytes: number;
  /** the read-bandwidth probe in the same process, interleaved with the decode runs (bytes/s) */
  readBandwidth: number;
  /** extraction's linear-layer GFLOP/s over the computed tokens */
  extractGflops: number;
  /** 1-min load average at the prefill / decode / extraction measurements */
  loads: number[];
  extractPromptsPerS: number;
  /** the same workload through plain `forward` (no reuse) */
  extractNoReusePromptsPerS: number;
  extractTokensPerS: number;
  promptTokens: number;
  computedTokens: number;
  peakRssBytes: number;
  sessionStartS: number;
}

async function measure(dir: string, dtype: ComputeDType, threads: number, reps: number, workloadPath: string): Promise<BenchRow> {
  const ck = await loadCheckpoint(dir);
  const c = ck.config;
  const t0 = performance.now();
  const device = (flag('device') ?? 'cpu') as 'cpu' | 'cuda' | 'webgpu';
  const engine = await createEngineFromCheckpoint(ck, { ...engineEnv(), dtype, threads, device, cacheDir: join(dir, '..', 'cache') });
  const sessionStartS = (performance.now() - t0) / 1000;
  const d = c.hiddenSize;
  const T = 512;
  const prompt = Array.from({ length: T }, (_, i) => 3 + ((i * 7919) % (c.vocabSize - 3)));
  await engine.forward([prompt.slice(0, 64)], { hiddenAt: 'last', logitsAt: 'last' });
  const linearPerToken = 2 * c.numLayers * (d * c.numHeads * c.headDim * 2 + d * c.numKvHeads * c.headDim * 2 + 3 * d * c.intermediateSize);
  const flops = linearPerToken * T + c.numLayers * 4 * T * T * c.numHeads * c.headDim + 2 * d * c.vocabSize;
  // decode with steering
  const steer = { layer: 15, vector: Float32Array.from({ length: d }, (_, i) => Math.sin(i)), alpha: 4 };
  const p128 = prompt.slice(0, 128);
  await engine.generate([p128], { maxNewTokens: 4, stopIds: [], steer });
  // interleaved with the read-bandwidth probe, so both see the same machine load
  const bw = await readBandwidthSession(threads);
  let t1 = Infinity;
  let tN = Infinity;
  let bwS = Infinity;
  for (let r = 0; r < reps; r++) {
    t1 = Math.min(t1, await best(1, () => engine.generate([p128], { maxNewTokens: 2, stopIds: [], steer })));
    tN = Math.min(tN, await best(1, () => engine.generate([p128], { maxNewTokens: 48, stopIds: [], steer })));
    bwS = Math.min(bwS, await best(3, () => bw.run()));
  }
  await bw.release();
  const decodeSteerTps = 46 / (tN - t1);
  const decodeLoad = loadavg();
  // extraction workload with shared-prefix reuse, as src/experiments/extract.ts runs it
  const ids = (JSON.parse(readFileSync(workloadPath, 'utf8')) as { ids: number[][] }).ids;
  const plan = prefixPlan(ids);
  const cache = new PrefixCache();
  let computedTokens = 0;
  let promptTokens = 0;
  const tx = performance.now();
  for (let s = 0; s < ids.length; s += 16) {
    const { stats } = await engine.forwardShared(ids.slice(s, s + 16), { hiddenAt: 'last', logitsAt: 'none', cache, boundaries: plan.slice(s, s + 16) });
    computedTokens += stats.computedTokens;
    promptTokens += stats.promptTokens;
  }
  const extractS = (performance.now() - tx) / 1000;
  const extractLoad = loadavg();
  const ty = performance.now();
  for (let s = 0; s < ids.length; s += 16) await engine.forward(ids.slice(s, s + 16), { hiddenAt: 'last', logitsAt: 'none' });
  const plainS = (performance.now() - ty) / 1000;
  // prefill vs raw GEMM, interleaved
  const gemm = await rawMatmulSession(threads, T, d, c.intermediateSize, 8);
  // interleaved so both see the same machine load
  const [prefillS, gemmS] = await interleavedBest(reps, () => engine.forward([prompt], { hiddenAt: 'all', logitsAt: 'last' }), () => gemm.run());
  await gemm.release();
  await engine.dispose();
  return {
    dtype, prefillTps: T / prefillS, engineGflops: flops / prefillS / 1e9, gemmGflops: gemm.flops / gemmS / 1e9, decodeSteerTps,
    decodeStepBytes: decodeStepBytes(c, dtype, 128 + 24, resolveEngineConfig({ ...engineEnv(), dtype: dtype === 'q4' ? 'q4' : 'q8' }).quant!.scheme === 'asym'), readBandwidth: bw.bytes / bwS,
    extractGflops: linearPerToken * computedTokens / extractS / 1e9, loads: [loadavg(), decodeLoad, extractLoad],
    extractPromptsPerS: ids.length / extractS, extractNoReusePromptsPerS: ids.length / plainS, extractTokensPerS: promptTokens / extractS, promptTokens, computedTokens,
    peakRssBytes: peakRss(), sessionStartS,
  };
}

async function workload(path: string, pairs: number, vocab: number): Promise<{ fullRatio: number; n: number }> {
  const tokDir = mkdtempSync(join(tmpdir(), 'safekeep-bench-tok-'));
  try {
    const tplPath = join(here, '..', '..', 'shared', 'templates', 'llama-3.1-instruct.jinja');
    await installTokenizer(tokDir, 'llama3', existsSync(tplPath) ? { template: readFileSync(tplPath, 'utf8') } : {});
    const b = new PromptBuilder(await loadPromptTokenizer(tokDir), { texts: loadPromptTexts() });
    const set = await loadPairSet('pairs');
    const render = (ps: typeof set.pairs) => ps.flatMap((p) => (['harmful', 'benign'] as const).map((k) => b.render(p[k].prompt, p.tools, 'agent', 'schema').ids!.map((x) => x % vocab)));
    const full = plannedReuse(render(set.pairs));
    const ids = render(stratifiedSubset(set.pairs, pairs));
    writeFileSync(path, JSON.stringify({ ids }));
    return { fullRatio: full.ratio, n: set.pairs.length };
  } finally {
    rmSync(tokDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const threads = Number(flag('threads') ?? availableParallelism());
  const reps = Number(flag('reps') ?? 3);
  const mode = flag('mode');
  if (mode === 'quantize') {
    const ck = await loadCheckpoint(flag('run')!);
    const dtype = flag('dtype') as 'q8' | 'q4';
    const cfg = resolveEngineConfig({ ...engineEnv(), dtype, cacheDir: join(flag('run')!, '..', 'cache') });
    quantizedWeights(ck, cfg.quant!.bits, cfg.quant!.scheme, cfg.quant!.block, cfg.cacheDir, cfg.quiet);
    return;
  }
  if (mode === 'measure') {
    const row = await measure(flag('run')!, flag('dtype') as ComputeDType, threads, reps, flag('workload')!);
    process.stdout.write(JSON.stringify(row) + '\n');
    return;
  }
  const dtypes = (flag('dtypes') ?? 'f32,q8,q4').split(',') as ComputeDType[];
  const keep = flag('keep');
  const root = keep ?? mkdtempSync(join(tmpdir(), 'safekeep-bench-'));
  const me = fileURLToPath(import.meta.url);
  try {
    const model = join(root, 'model');
    if (!existsSync(join(model, 'model.safetensors'))) {
      process.stderr.write(`writing a SmolLM2-135M-shaped random checkpoint to ${model} ...\n`);
      await writeRandomCheckpoint(model, 'llama', SMOLLM2_SHAPE);
    }
    const wl = join(root, 'workload.json');
    const { fullRatio, n } = await workload(wl, Number(flag('pairs') ?? 16), SMOLLM2_SHAPE.vocabSize);
    const rows: BenchRow[] = [];
    const env = { ...process.env, SAFEKEEP_QUIET: '1' };
    for (const dtype of dtypes) {
      if (dtype === 'q8' || dtype === 'q4') {
        const q = spawnSync(process.execPath, ['--import', 'tsx', me, '--mode', 'quantize', '--run', model, '--dtype', dtype], { stdio: 'inherit', env });
        if (q.status !== 0) throw new Error(`quantize ${dtype} failed`);
      }
      process.stderr.write(`measuring ${dtype} ...\n`);
      const m = spawnSync(process.execPath, ['--import', 'tsx', me, '--mode', 'measure', '--run', model, '--dtype', dtype, '--workload', wl,
        '--threads', String(threads), '--reps', String(reps), '--device', flag('device') ?? 'cpu'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], env });
      if (m.status !== 0) throw new Error(`measure ${dtype} failed`);
      rows.push(JSON.parse(m.stdout.trim().split('\n').at(-1)!) as BenchRow);
    }
    const pct = (x: number) => `${(100 * x).toFixed(0)} %`;
    const head = ['dtype', 'prefill tok/s', 'GFLOP/s', 'of GEMM', 'decode+steer tok/s', 'MB/step', 'of read BW', 'extract prompts/s', 'of GEMM', 'no reuse', 'extract tok/s', 'computed/prompt', 'peak RSS MiB', 'GEMM GFLOP/s', 'BW GB/s', 'load'];
    const table = [head, ...rows.map((r) => [
      r.dtype, r.prefillTps.toFixed(0), r.engineGflops.toFixed(1), pct(r.engineGflops / r.gemmGflops), r.decodeSteerTps.toFixed(1),
      (r.decodeStepBytes / 1e6).toFixed(0), pct(r.decodeSteerTps * r.decodeStepBytes / r.readBandwidth),
      r.extractPromptsPerS.toFixed(2), pct(r.extractGflops / r.gemmGflops), r.extractNoReusePromptsPerS.toFixed(2), r.extractTokensPerS.toFixed(0), (r.computedTokens / r.promptTokens).toFixed(3), (r.peakRssBytes / 2 ** 20).toFixed(0),
      r.gemmGflops.toFixed(1), (r.readBandwidth / 1e9).toFixed(1), r.loads.map((x) => x.toFixed(1)).join('/'),
    ])];
    const widths = head.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
    process.stdout.write(`SmolLM2-135M shape, random weights, on ${flag('device') ?? 'cpu'}, ${threads} thread(s), best of ${reps}; extraction: ${rows[0]?.promptTokens ?? 0} prompt tokens of agent.schema prompts (${Number(flag('pairs') ?? 16)} of ${n} pairs)\n`);
    for (const row of table) process.stdout.write(row.map((c, i) => c.padStart(widths[i]!)).join('  ') + '\n');
    process.stdout.write('of GEMM: GFLOP/s over the raw onnxruntime f32 MatMul chain measured in the same process (prefill: linear + attention FLOPs; extraction: linear FLOPs of the computed tokens); of read BW: bytes a decode step reads (weights as stored + KV) × tok/s over the 256 MiB read probe run interleaved with decode; load: 1-min load average at prefill/decode/extraction\n');
    process.stdout.write(`full bundled set (${n} pairs, agent.schema): planned computed/prompt tokens ${fullRatio.toFixed(3)} (target ≤ 0.6)\n`);
    const out = join(here, 'results.json');
    writeFileSync(`${out}.tmp`, JSON.stringify({ date: new Date().toISOString(), threads, reps, pairs: Number(flag('pairs') ?? 16), fullSetRatio: fullRatio, rows }, null, 1) + '\n');
    const { renameSync } = await import('node:fs');
    renameSync(`${out}.tmp`, out);
    process.stdout.write(`→ ${out}\n`);
  } finally {
    if (!keep) rmSync(root, { recursive: true, force: true });
  }
}

await main();
