/**
 * `npm run check:gpu [-- --dtype f32|bf16]`: the GPU checklist a user runs on their CUDA host (nothing here can
 * test it). On a tiny random llama checkpoint (written to a temp folder) it checks, in order:
 *   1. onnxruntime-node's CUDA execution provider is installed and starts (else: one clear line, exit 0 — this is a
 *      report, not a failure; install with `npm ci --onnxruntime-node-install=cuda12`);
 *   2. parity vs CPU: all-layer hidden states and logits of a batch (max |Δ| relative to max |value|, expected
 *      ≤ 1e-3 for f32 — TF32/cuBLAS reductions differ from the CPU's), and greedy tokens equal for 16 steps;
 *   3. throughput on the GPU: prefill 1×512 tokens/s and decode tokens/s (prompt 128) with steering.
 * Exit 1 only when CUDA starts but the parity check fails.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import type { ComputeDType } from '../src/engine/graph.ts';
import { SafekeepError } from '../src/util/errors.ts';

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

function relMax(a: Float32Array, b: Float32Array): number {
  let m = 1;
  let d = 0;
  for (let i = 0; i < b.length; i++) { m = Math.max(m, Math.abs(b[i]!)); d = Math.max(d, Math.abs(a[i]! - b[i]!)); }
  return d / m;
}

async function main(): Promise<number> {
  const dtype = (flag('dtype') ?? 'f32') as ComputeDType;
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-gpu-'));
  process.env.SAFEKEEP_CACHE = join(tmp, 'cache');
  let cpu: OnnxEngine | null = null;
  let gpu: OnnxEngine | null = null;
  try {
    const dir = join(tmp, 'model');
    await writeRandomCheckpoint(dir, 'llama', { seed: 4, numLayers: 4, hiddenSize: 256, numHeads: 8, numKvHeads: 2, intermediateSize: 512, vocabSize: 1000, std: 0.05 });
    try {
      gpu = await createEngine(dir, { device: 'cuda', dtype });
    } catch (e) {
      if (e instanceof SafekeepError) {
        process.stdout.write(`check:gpu: CUDA is not available on this host — ${e.message}\nNothing to check; the CPU path is covered by npm test.\n`);
        return 0;
      }
      throw e;
    }
    cpu = await createEngine(dir, { device: 'cpu', dtype });
    const seqs = [Array.from({ length: 40 }, (_, i) => (i * 37) % 1000), [5, 6, 7, 8, 9], Array.from({ length: 17 }, (_, i) => 999 - i)];
    const steer = { layer: 2, vector: Array.from({ length: 256 }, (_, i) => Math.sin(i)), alpha: 1.5 };
    const a = await cpu.forward(seqs, { steer });
    const b = await gpu.forward(seqs, { steer });
    let worst = 0;
    seqs.forEach((_, i) => { worst = Math.max(worst, relMax(b[i]!.hidden, a[i]!.hidden), relMax(b[i]!.logits, a[i]!.logits)); });
    const ga = await cpu.generate([seqs[0]!], { maxNewTokens: 16, stopIds: [], steer });
    const gb = await gpu.generate([seqs[0]!], { maxNewTokens: 16, stopIds: [], steer });
    const sameTokens = JSON.stringify(ga[0]!.generatedIds) === JSON.stringify(gb[0]!.generatedIds);
    const ok = worst <= 1e-3 && sameTokens;
    process.stdout.write(`parity vs CPU (${dtype}): hidden+logits max |Δ|/max|v| = ${worst.toExponential(2)} (≤ 1e-3: ${worst <= 1e-3 ? 'ok' : 'FAIL'}); greedy 16 tokens ${sameTokens ? 'equal' : 'DIFFER'}\n`);
    const prompt = Array.from({ length: 512 }, (_, i) => (i * 7919) % 1000);
    await gpu.forward([prompt], { hiddenAt: 'last', logitsAt: 'last' });
    let t = performance.now();
    for (let r = 0; r < 5; r++) await gpu.forward([prompt], { hiddenAt: 'last', logitsAt: 'last' });
    const prefill = (5 * 512) / ((performance.now() - t) / 1000);
    const t2 = async (n: number) => { const s = performance.now(); await gpu!.generate([prompt.slice(0, 128)], { maxNewTokens: n, stopIds: [], steer }); return performance.now() - s; };
    await t2(2);
    const d2 = await t2(2);
    t = await t2(66);
    const decode = 64 / ((t - d2) / 1000);
    process.stdout.write(`GPU throughput (tiny 4-layer model, so launch-bound): prefill 1×512 ${prefill.toFixed(0)} tokens/s; decode with steering ${decode.toFixed(1)} tokens/s\n`);
    return ok ? 0 : 1;
  } finally {
    await cpu?.dispose();
    await gpu?.dispose();
    rmSync(tmp, { recursive: true, force: true });
  }
}

process.exitCode = await main();
