/**
 * `npm run bench:engine [-- --threads N[,M…] --rounds R --reps R --low-memory --keep DIR]`: the engine on a SmolLM2-135M-shaped random checkpoint
 * (30 layers, hidden 576, 9 heads / 3 KV heads, head_dim 64, intermediate 1536, vocab 49152, tied), written to a
 * temp dir by a child process (so its JS buffers do not count in the measured RSS). The measuring child prints:
 * - prefill tokens/s: forward of 1×512 tokens, hidden states (all layers) and logits at the last position;
 * - decode tokens/s: prompt 128, greedy `generate()` (step logits + first-token hidden on), timed as
 *   t(48 new) − t(2 new); and a raw step loop capturing the all-layer hidden state of every new token;
 * - engine prefill GFLOP/s (linear layers + attention matmuls as computed) vs raw onnxruntime MatMul GFLOP/s
 *   (a chain of 8 MatMuls [512, 576]×[576, 1536]×[1536, 576]…, constant weights) measured in the same process with
 *   the same threads, runs interleaved with the engine's; best of --reps (default 3) since the machine may be shared;
 * - peak RSS vs the f32 weight bytes.
 * Targets: prefill ≥ 70 % of the GEMM rate (the linear layers dominate, so the graph should run near raw MatMul
 * speed); RSS ≤ 1.3 × f32 weight bytes (one pre-packed copy of the weights, little else).
 * Threads: default = the engine's own choice (src/engine/runtime/threads.ts, printed); `--threads 1,2,4 [--rounds R]` measures
 * each count in a fresh child per round (order alternating, best kept) and prints a table marking the default.
 */
import { engineEnv } from '../src/cli/env.ts';
import { spawnSync } from 'node:child_process';
import { SMOLLM2_SHAPE, best, flag, interleavedBest, peakRss, rawMatmulSession } from './common.ts';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadCheckpoint, parameterCount } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { steeringMatrix } from '../src/engine/run/batch.ts';
import { createEngineFromCheckpoint } from '../src/engine/engine.ts';
import { machineThreads } from '../src/engine/runtime/threads.ts';

const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;

async function measure(dir: string, threads: number): Promise<void> {
  const ck = await loadCheckpoint(dir);
  const c = ck.config;
  const params = parameterCount(ck);
  const weightBytes = params * 4;
  const rssBefore = process.memoryUsage().rss;
  const t0 = performance.now();
  const lowMemory = process.argv.includes('--low-memory');
  const engine = await createEngineFromCheckpoint(ck, { ...engineEnv(), threads, cacheDir: join(dir, 'cache'), lowMemory });
  const startS = (performance.now() - t0) / 1000;
  const rssSession = process.memoryUsage().rss;

  // prefill 1×512, hidden states + logits at the last position
  const T = 512;
  const reps = Number(flag('reps') ?? 3);
  const prompt = Array.from({ length: T }, (_, i) => 3 + ((i * 7919) % (c.vocabSize - 3)));
  await engine.forward([prompt.slice(0, 64)], { hiddenAt: 'last', logitsAt: 'last' });
  const d = c.hiddenSize;
  const linearPerToken = 2 * c.numLayers * (d * c.numHeads * c.headDim * 2 + d * c.numKvHeads * c.headDim * 2 + 3 * d * c.intermediateSize);
  const attn = c.numLayers * 2 * 2 * T * T * c.numHeads * c.headDim; // QKᵀ and PV over the full T×T as computed
  const flops = linearPerToken * T + attn + 2 * d * c.vocabSize;
  await engine.forward([prompt], { hiddenAt: 'last', logitsAt: 'last' }); // full-size activations before the RSS snapshot
  // decode: prompt 128; time(generate N) - time(generate 1) = N-1 decode steps
  const p128 = prompt.slice(0, 128);
  const nNew = 48;
  await engine.generate([p128], { maxNewTokens: 4, stopIds: [] });
  const genOpts = { stopIds: [], returnFirstTokenHidden: true, returnStepLogits: true };
  const t1 = await best(reps, () => engine.generate([p128], { ...genOpts, maxNewTokens: 2 }));
  const tN = await best(reps, () => engine.generate([p128], { ...genOpts, maxNewTokens: nNew }));
  const decodeTps = (nNew - 2) / (tN - t1);
  // raw step loop with the all-layer hidden state of every new token captured
  const steer = steeringMatrix(c.numLayers, d);
  let out = await engine.step({ ids: BigInt64Array.from(p128, BigInt), batch: 1, width: 128, starts: [0], past: null, steer, hiddenIndex: [127], logitsIndex: [127] });
  const tStep = performance.now();
  for (let k = 0; k < nNew; k++) {
    out = await engine.step({ ids: BigInt64Array.from([BigInt(3 + k)]), batch: 1, width: 1, starts: [0], past: out.present, steer, hiddenIndex: [0], logitsIndex: [0] });
  }
  const stepTps = nNew / ((performance.now() - tStep) / 1000);
  const peakEngine = peakRss(); // VmHWM, before the GEMM session (its weights would count)
  const rssAfterRuns = process.memoryUsage().rss;
  const gemm = await rawMatmulSession(threads, T, d, c.intermediateSize, 8);
  // interleaved so both see the same machine load
  const [prefillS, gemmS] = await interleavedBest(reps, () => engine.forward([prompt], { hiddenAt: 'last', logitsAt: 'last' }), () => gemm.run());
  await gemm.release();
  const prefillTps = T / prefillS;
  const engineGflops = flops / prefillS / 1e9;
  const gemmGflops = gemm.flops / gemmS / 1e9;

  await engine.dispose();

  const lines = [
    `model: SmolLM2-135M shape, ${(params / 1e6).toFixed(1)} M params, f32 weights ${mb(weightBytes)}; threads ${threads}${lowMemory ? '; --low-memory (no pre-packed weights)' : ''}`,
    `session start: ${startS.toFixed(2)} s (graph ${engine.graphCached ? 'cached' : 'built'})`,
    `prefill 1×${T} (hidden+logits at last position): ${prefillTps.toFixed(0)} tokens/s (${(prefillS * 1000).toFixed(0)} ms)`,
    `engine prefill: ${engineGflops.toFixed(1)} GFLOP/s; raw ORT MatMul chain [512,576]×[576,1536]: ${gemmGflops.toFixed(1)} GFLOP/s → ${(100 * engineGflops / gemmGflops).toFixed(0)} % (target ≥ 70 %)`,
    `decode (prompt 128, ${nNew} new, generate()): ${decodeTps.toFixed(1)} tokens/s; step loop with all-layer hidden per token: ${stepTps.toFixed(1)} tokens/s`,
    `RSS (target: session ≤ 1.3 × f32 weight bytes): process before session ${mb(rssBefore)}; after session ${mb(rssSession)} (session ${((rssSession - rssBefore) / weightBytes).toFixed(2)} ×); after prefill 512 + decode ${mb(rssAfterRuns)} (${((rssAfterRuns - rssBefore) / weightBytes).toFixed(2)} ×); peak incl. session creation ${mb(peakEngine)} (${((peakEngine - rssBefore) / weightBytes).toFixed(2)} ×, whole process ${(peakEngine / weightBytes).toFixed(2)} ×)`,
  ];
  process.stdout.write(lines.join('\n') + '\n');
  const json = flag('json');
  if (json) {
    writeFileSync(json, JSON.stringify({ threads, params, prefillTps, engineGflops, gemmGflops, decodeTps, stepTps, peakRss: peakEngine, rssBefore, rssSession, rssAfterRuns, weightBytes }, null, 2));
  }
}

async function main(): Promise<void> {
  // default: the engine's own choice (src/engine/runtime/threads.ts); `--threads 1,2,4` measures each count (one child per
  // count, in rounds of --rounds, default 2, best kept) and marks the default, to check it is the fastest or a tie
  const chosen = machineThreads();
  const runDir = flag('run');
  if (runDir) return measure(runDir, Number(flag('threads') ?? chosen.threads));
  const counts = (flag('threads') ?? String(chosen.threads)).split(',').map(Number);
  if (!counts.every((t) => Number.isInteger(t) && t > 0)) throw new Error(`--threads: positive integers, got ${flag('threads')}`);
  process.stderr.write(`threads ${counts.join(', ')}; the engine's default here: ${chosen.threads} (${chosen.why})\n`);
  const keep = flag('keep');
  const dir = keep ?? mkdtempSync(join(tmpdir(), 'safekeep-bench-'));
  try {
    if (!(keep && existsSync(join(dir, 'model', 'model.safetensors')))) {
      process.stderr.write(`writing random checkpoint to ${dir} ...\n`);
      await writeRandomCheckpoint(join(dir, 'model'), 'llama', SMOLLM2_SHAPE);
    }
    // the child measures (it re-reads --threads, --reps, --low-memory, --json); --keep stays with the parent
    const passOn = (t: number, json?: string) => [
      ...process.argv.slice(2).filter((a, i, all) => !['--keep', '--threads', '--rounds', '--json'].includes(a) && !['--keep', '--threads', '--rounds', '--json'].includes(all[i - 1] ?? '')),
      '--threads', String(t), ...(json ? ['--json', json] : flag('json') ? ['--json', flag('json')!] : []),
    ];
    const child = (t: number, json?: string) =>
      spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--run', join(dir, 'model'), ...passOn(t, json)], { stdio: 'inherit' });
    if (counts.length === 1) {
      const r = child(counts[0]!);
      if (r.status !== 0) process.exitCode = r.status ?? 1;
      return;
    }
    const bestOf = new Map<number, { prefill: number; decode: number }>(counts.map((t) => [t, { prefill: 0, decode: 0 }]));
    const rounds = Number(flag('rounds') ?? 2);
    for (let round = 0; round < rounds; round++) {
      for (const t of round % 2 ? [...counts].reverse() : counts) {
        const json = join(dir, `threads-${t}.json`);
        const r = child(t, json);
        if (r.status !== 0) { process.exitCode = r.status ?? 1; return; }
        const j = JSON.parse(readFileSync(json, 'utf8')) as { prefillTps: number; decodeTps: number };
        const b = bestOf.get(t)!;
        b.prefill = Math.max(b.prefill, j.prefillTps);
        b.decode = Math.max(b.decode, j.decodeTps);
      }
    }
    const top = { prefill: Math.max(...[...bestOf.values()].map((b) => b.prefill)), decode: Math.max(...[...bestOf.values()].map((b) => b.decode)) };
    process.stdout.write(`\nthreads sweep (best of ${rounds} rounds × --reps):\n`);
    for (const t of counts) {
      const b = bestOf.get(t)!;
      process.stdout.write(`  ${String(t).padStart(3)} threads${t === chosen.threads ? ' (default)' : '          '}: prefill ${b.prefill.toFixed(0)} tok/s (${(100 * b.prefill / top.prefill).toFixed(0)} %), decode ${b.decode.toFixed(1)} tok/s (${(100 * b.decode / top.decode).toFixed(0)} %)\n`);
    }
  } finally {
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}

await main();
