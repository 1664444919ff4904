/**
 * `npm run bench:sae [-- --d-in 1024 --expansion 16 --tokens 256 --threads 2 --rounds 5]`: sparse-autoencoder cost.
 *
 * 1. Encoding cached activations, x [N, d_in] → acts [N, d_sae] (standard SAE, f32, d_sae = expansion × d_in):
 *    `SaeEncoder` (onnxruntime, the graph the engine splices in), `sae.encode` (TypeScript), against the dense
 *    matmul bound of this machine — onnxruntime's MatMul of the same [N, d_in] × [d_in, d_sae] with the weight as a
 *    constant (pre-packed), the fastest dense product here (bench/common.ts `rawMatmulSession`). Same process,
 *    interleaved rounds, best of each.
 * 2. Capture with an SAE in a forward: a random Llama-shaped checkpoint (d = --model-d, --layers 32 as Llama-3.1-8B
 *    has), runWithCache of T tokens without hooks vs with an SAE of d_sae = 16 × d capturing its activations at
 *    blocks.1.resid_post, and with the reconstruction spliced in. Interleaved, best of each. One SAE's share of a
 *    forward's FLOPs is about (2·d·16d) / (L · 2·(4d² + 3·d·4d)) ≈ 1/L, so the depth matters more than the width.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine } from '../src/engine/engine.ts';
import { SaeEncoder } from '../src/engine/runtime/sae-encoder.ts';
import { encode } from '../src/sae/math.ts';
import type { Sae } from '../src/sae/types.ts';
import { makeRng } from '../src/util/rng.ts';
import { best, flag, loadavg, rawMatmulSession } from './common.ts';

const dIn = Number(flag('d-in') ?? 1024);
const expansion = Number(flag('expansion') ?? 16);
const N = Number(flag('tokens') ?? 256);
const threads = Number(flag('threads') ?? 2);
const rounds = Number(flag('rounds') ?? 5);
const modelD = Number(flag('model-d') ?? 256);
const T = Number(flag('seq') ?? 128);
const layers = Number(flag('layers') ?? 32);

function randomSae(d: number, m: number, seed: number): Sae {
  const rng = makeRng(seed);
  const W_dec = Float32Array.from({ length: m * d }, () => rng.normal() / Math.sqrt(d));
  const W_enc = new Float32Array(d * m);
  for (let j = 0; j < m; j++) for (let i = 0; i < d; i++) W_enc[i * m + j] = W_dec[j * d + i]!;
  return {
    config: { architecture: 'standard', dIn: d, dSae: m, k: null, rescaleActsByDecoderNorm: false, applyBDecToInput: true, normalizeActivations: 'none', hookName: 'blocks.1.hook_resid_post', dtype: 'F32', layout: 'saelens', source: 'bench' },
    W_enc: { dtype: 'F32', rows: d, cols: m, data: W_enc }, W_dec: { dtype: 'F32', rows: m, cols: d, data: W_dec },
    b_enc: Float32Array.from({ length: m }, () => -0.5 + 0.1 * rng.normal()), b_dec: new Float32Array(d), threshold: null, bytes: 2 * m * d * 4,
  };
}

async function encodeBench(): Promise<void> {
  const m = expansion * dIn;
  const sae = randomSae(dIn, m, 1);
  const x = Float32Array.from({ length: N * dIn }, (_, i) => Math.sin(i * 0.37));
  const enc = await SaeEncoder.open(sae, { threads });
  const bound = await rawMatmulSession(threads, N, dIn, m, 1);
  await enc.encode(x, N);
  let tOrt = Infinity, tBound = Infinity, tJs = Infinity;
  for (let r = 0; r < rounds; r++) {
    tBound = Math.min(tBound, await best(2, bound.run));
    tOrt = Math.min(tOrt, await best(2, () => enc.encode(x, N)));
    if (r === 0) tJs = await best(1, async () => encode(sae, x, N));
  }
  const gflops = (t: number) => (bound.flops / t / 1e9).toFixed(1);
  console.log(`encode x [${N}, ${dIn}] → acts [${N}, ${m}] (standard, f32), ${threads} threads, load ${loadavg().toFixed(2)}:`);
  console.log(`  dense matmul bound (onnxruntime MatMul, constant weight) ${(tBound * 1e3).toFixed(2)} ms  ${gflops(tBound)} GFLOP/s`);
  console.log(`  SaeEncoder (onnxruntime, the spliced graph)              ${(tOrt * 1e3).toFixed(2)} ms  ${gflops(tOrt)} GFLOP/s  ${(tOrt / tBound).toFixed(2)}× the bound`);
  console.log(`  sae.encode (TypeScript)                                  ${(tJs * 1e3).toFixed(2)} ms  ${gflops(tJs)} GFLOP/s  ${(tJs / tBound).toFixed(2)}× the bound`);
  await enc.release();
  await bound.release();
}

async function captureBench(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-sae-'));
  try {
    await writeRandomCheckpoint(dir, 'llama', { seed: 3, numLayers: layers, hiddenSize: modelD, numHeads: 4, numKvHeads: 2, intermediateSize: 4 * modelD, vocabSize: 4096, ropeScaling: null });
    const engine = await createEngine(dir, { cacheDir: join(dir, '.cache'), threads, quiet: true });
    const sae = randomSae(modelD, 16 * modelD, 2);
    const ids = Array.from({ length: T }, (_, i) => (i * 7919) % 4096);
    const plain = () => engine.runWithCache(ids, { logitsAt: 'last' });
    // the hooked graph alone (the stream at the point as an output): what any hook costs, SAE or not
    const hooked = () => engine.runWithCache(ids, { logitsAt: 'last', names: ['blocks.1.resid_post'] });
    const capture = () => engine.runWithCache(ids, { logitsAt: 'last', saes: [{ sae }] });
    const spliced = () => engine.runWithCache(ids, { logitsAt: 'last', saes: [{ sae, splice: 'reconstruction', captureActs: false }] });
    await plain(); await hooked(); await capture(); await spliced();
    let a = Infinity, h = Infinity, b = Infinity, c = Infinity;
    for (let r = 0; r < rounds; r++) {
      a = Math.min(a, await best(2, plain));
      h = Math.min(h, await best(2, hooked));
      b = Math.min(b, await best(2, capture));
      c = Math.min(c, await best(2, spliced));
    }
    console.log(`forward of ${T} tokens, random Llama d=${modelD} (${layers} layers), SAE d_sae=${16 * modelD} at blocks.1.resid_post, ${threads} threads:`);
    console.log(`  no SAE ${(a * 1e3).toFixed(2)} ms; the stream at blocks.1.resid_post captured, no SAE ${(h * 1e3).toFixed(2)} ms (+${(100 * (h / a - 1)).toFixed(1)} %);`);
    console.log(`  SAE: capturing its activations ${(b * 1e3).toFixed(2)} ms (+${(100 * (b / a - 1)).toFixed(1)} %); reconstruction spliced in ${(c * 1e3).toFixed(2)} ms (+${(100 * (c / a - 1)).toFixed(1)} %)`);
    await engine.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await encodeBench();
await captureBench();
