/**
 * `npm run check:gpu [-- --device cuda|webgpu|all] [--dtypes f16,f32,bf16w] [--no-speed]`: the GPU checklist a user
 * runs on their GPU host (see docs/engine.md, "GPU"), for each device asked (default all: cuda, then webgpu). One run
 * prints one line per check, each `ok`, `FAIL` or `info`:
 *
 *   1. the device's execution provider starts: onnxruntime-node's CUDA provider (a separate install: else one clear
 *      line saying to run `npm run install:cuda`), or its bundled WebGPU provider (else one clear line: no adapter,
 *      install the GPU's Vulkan driver). A device that does not start is a report, not a failure (exit 0);
 *   2. parity, per dtype, on a tiny random llama checkpoint (BF16 storage, like real models) with steering:
 *      cuda <dtype> vs cpu f32 — all-layer hidden states and logits (max |Δ| / max |value|; bounds: f32 1e-3 for
 *      TF32/cuBLAS reductions, f16 1e-2, bf16w 5e-2 — the f16/bf16 rounding of activations and weights), the worst
 *      per-layer cosine of the last-position hidden states (what refusal directions are built from), and 16 greedy
 *      tokens (equal, or the first difference is a near-tie on the CPU: top-2 logit gap ≤ the measured logit error);
 *      for f16 also the CPU emulation of f16 numerics (`f16sim`: activations rounded to f16 around each linear) vs
 *      cpu f32 — the expected size of the f16 error — and the device's f16 vs that emulation (summation order on
 *      cuda; WebGPU's f16 Gemm also accumulates in f16, so more there, growing with the inner dimension); a dtype the
 *      device refuses by name (bf16w on webgpu) is an `info` line;
 *   3. speed and memory, per dtype, on a SmolLM2-135M-shaped random checkpoint: prefill 1×512 tokens/s, decode
 *      tokens/s (prompt 128, with steering), and the GPU memory this process holds after a prefill (nvidia-smi, when
 *      present); `ok` when f16 holds less GPU memory than f32. Not on a software WebGPU adapter (no /dev/dri render
 *      node: Mesa's lavapipe, a CPU emulation whose speed says nothing about a GPU).
 * Exit 1 when a device starts and any line says FAIL. `--as cpu` runs the same checklist with the CPU standing in for the
 * GPU (tests this script on a host without one; bf16w then fails by design: no bf16 MatMul on the CPU).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { COMPUTE_DTYPES, linearType, type ComputeDType } from '../src/engine/graph/precision.ts';
import { SafekeepError } from '../src/util/errors.ts';

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** max |a − b| / max |b| */
function relMax(a: Float32Array, b: Float32Array): number {
  let m = 0;
  let d = 0;
  for (let i = 0; i < b.length; i++) {
    m = Math.max(m, Math.abs(b[i]!));
    const x = Math.abs(a[i]! - b[i]!);
    d = Number.isNaN(x) ? Infinity : Math.max(d, x);
  }
  return d / (m || 1);
}

function cosine(a: Float32Array, b: Float32Array): number {
  let ab = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) { ab += a[i]! * b[i]!; aa += a[i]! * a[i]!; bb += b[i]! * b[i]!; }
  return ab / Math.sqrt(aa * bb || 1);
}

/**
 * GPU memory in MiB from nvidia-smi: held by this process, or — when this process is not listed (containers often see
 * other PIDs) — used on the whole device (then only meaningful on an otherwise idle GPU); null without nvidia-smi
 */
function gpuMemoryMiB(): number | null {
  const smi = (query: string): string | null => {
    try {
      return execFileSync('nvidia-smi', [query, '--format=csv,noheader,nounits'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    } catch {
      return null;
    }
  };
  const apps = smi('--query-compute-apps=pid,used_memory');
  if (apps === null) return null;
  let sum = 0;
  let seen = false;
  for (const row of apps.split('\n')) {
    const [pid, mem] = row.split(',').map((x) => x.trim());
    if (Number(pid) === process.pid) { sum += Number(mem); seen = true; }
  }
  if (seen) return sum;
  const device = smi('--query-gpu=memory.used');
  const first = device?.split('\n')[0]?.trim();
  return first ? Number(first) : null;
}

type Dut = 'cuda' | 'webgpu' | 'cpu';
/** the device under test (set per device by main): cuda, webgpu, or `--as cpu` to exercise this script on a host without a GPU */
let DUT: Dut = 'cuda';

const BOUND: Partial<Record<ComputeDType, number>> = { f32: 1e-3, bf16: 1e-3, f16: 1e-2, bf16w: 5e-2 };
let failed = false;
/** the graph cache of this run (a temp folder) */
let cacheDir = '';
function line(status: 'ok' | 'FAIL' | 'info', text: string): void {
  if (status === 'FAIL') failed = true;
  process.stdout.write(`[${status.padEnd(4)}] ${text}\n`);
}

async function parity(dir: string, dtype: ComputeDType, cpu32: OnnxEngine, cpuSame: OnnxEngine | null): Promise<void> {
  let gpu: OnnxEngine;
  try {
    gpu = await createEngine(dir, { cacheDir, device: DUT, dtype });
  } catch (e) {
    const refused = DUT === 'webgpu' && linearType(dtype) === 'bf16' && e instanceof SafekeepError;
    line(refused ? 'info' : 'FAIL', `${DUT} ${dtype}: ${refused ? 'refused by name' : 'the session does not start'} — ${(e as Error).message.split('\n')[0]}`);
    return;
  }
  try {
    const V = cpu32.vocabSize;
    const seqs = [Array.from({ length: 40 }, (_, i) => (i * 37) % V), [5, 6, 7, 8, 9], Array.from({ length: 17 }, (_, i) => V - 1 - i)];
    const steer = { layer: 2, vector: Array.from({ length: cpu32.dModel }, (_, i) => Math.sin(i)), alpha: 1.5 };
    const a = await cpu32.forward(seqs, { steer });
    const b = await gpu.forward(seqs, { steer });
    let hid = 0;
    let log = 0;
    let cos = 1;
    const L1 = cpu32.numLayers + 1;
    const d = cpu32.dModel;
    seqs.forEach((s, i) => {
      hid = Math.max(hid, relMax(b[i]!.hidden, a[i]!.hidden));
      log = Math.max(log, relMax(b[i]!.logits, a[i]!.logits));
      const T = s.length;
      for (let l = 0; l < L1; l++) {
        const at = (h: Float32Array) => h.subarray((l * T + T - 1) * d, (l * T + T) * d);
        cos = Math.min(cos, cosine(at(b[i]!.hidden), at(a[i]!.hidden)));
      }
    });
    const bound = BOUND[dtype] ?? 1e-2;
    line(hid <= bound && log <= bound ? 'ok' : 'FAIL',
      `${DUT} ${dtype} vs cpu f32: hidden ${hid.toExponential(2)}, logits ${log.toExponential(2)} (max |Δ|/max|v| ≤ ${bound}); worst per-layer cosine ${cos.toFixed(6)}`);
    if (cpuSame) {
      const c = await cpuSame.forward(seqs, { steer });
      let expected = 0;
      let w = 0;
      seqs.forEach((_, i) => {
        expected = Math.max(expected, relMax(c[i]!.hidden, a[i]!.hidden), relMax(c[i]!.logits, a[i]!.logits));
        w = Math.max(w, relMax(b[i]!.hidden, c[i]!.hidden), relMax(b[i]!.logits, c[i]!.logits));
      });
      line('info', `cpu f16sim (the CPU's emulation of f16 numerics) vs cpu f32: ${expected.toExponential(2)} — the expected size of the error above; ${DUT} ${dtype} vs cpu f16sim: ${w.toExponential(2)} (${DUT === 'webgpu' ? 'WebGPU\'s f16 Gemm also accumulates in f16: larger, growing with the inner dimension' : 'summation order only'})`);
    }
    const n = 16;
    const ga = await cpu32.generate([seqs[0]!], { maxNewTokens: n, stopIds: [], steer, returnStepLogits: true });
    const gb = await gpu.generate([seqs[0]!], { maxNewTokens: n, stopIds: [], steer });
    const x = ga[0]!.generatedIds;
    const y = gb[0]!.generatedIds;
    const k = x.findIndex((t, i) => t !== y[i]);
    if (k < 0) line('ok', `${DUT} ${dtype}: ${n} greedy tokens equal to cpu f32 (with steering)`);
    else {
      // a difference is acceptable only at a near-tie: the CPU's top-2 gap at that step within the logit error seen
      const row = ga[0]!.stepLogits!.subarray(k * V, (k + 1) * V);
      const sorted = Float32Array.from(row).sort().reverse();
      let maxAbs = 0;
      for (const v of row) maxAbs = Math.max(maxAbs, Math.abs(v));
      const gap = (sorted[0]! - sorted[1]!) / (maxAbs || 1);
      line(gap <= Math.max(log, 1e-6) * 2 ? 'ok' : 'FAIL', `${DUT} ${dtype}: greedy tokens differ from cpu f32 at step ${k} (cpu top-2 gap ${gap.toExponential(2)} of max|logit|, logit error ${log.toExponential(2)}: ${gap <= Math.max(log, 1e-6) * 2 ? 'a near-tie' : 'NOT a near-tie'})`);
    }
  } finally {
    await gpu.dispose();
  }
}

async function speed(dir: string, dtype: ComputeDType): Promise<number | null> {
  const before = gpuMemoryMiB();
  let gpu: OnnxEngine;
  try {
    gpu = await createEngine(dir, { cacheDir, device: DUT, dtype });
  } catch (e) {
    if (DUT === 'webgpu' && linearType(dtype) === 'bf16' && e instanceof SafekeepError) return null;
    line('FAIL', `${DUT} ${dtype} (135M shape): the session does not start — ${(e as Error).message.split('\n')[0]}`);
    return null;
  }
  try {
    const V = gpu.vocabSize;
    const prompt = Array.from({ length: 512 }, (_, i) => 3 + ((i * 7919) % (V - 3)));
    const steer = { layer: Math.floor(gpu.numLayers / 2), vector: Array.from({ length: gpu.dModel }, (_, i) => Math.cos(i)), alpha: 2 };
    await gpu.forward([prompt], { hiddenAt: 'last', logitsAt: 'last' });
    const reps = 5;
    let t = performance.now();
    for (let r = 0; r < reps; r++) await gpu.forward([prompt], { hiddenAt: 'last', logitsAt: 'last' });
    const prefill = (reps * prompt.length) / ((performance.now() - t) / 1000);
    const gen = async (k: number) => { const s = performance.now(); await gpu.generate([prompt.slice(0, 128)], { maxNewTokens: k, stopIds: [], steer }); return performance.now() - s; };
    await gen(2);
    const short = await gen(2);
    t = await gen(66);
    const decode = 64 / ((t - short) / 1000);
    const after = gpuMemoryMiB();
    const mem = before !== null && after !== null ? after - before : null;
    line('info', `${DUT} ${dtype} (SmolLM2-135M shape): prefill 1×512 ${prefill.toFixed(0)} tokens/s; decode with steering ${decode.toFixed(1)} tokens/s; GPU memory ${mem === null ? 'n/a (no nvidia-smi)' : `${mem} MiB`}`);
    return mem;
  } finally {
    await gpu.dispose();
  }
}

/** a WebGPU adapter with no GPU behind it: no /dev/dri render node (Mesa's lavapipe runs on the CPU) */
const softwareAdapter = (): boolean => !existsSync('/dev/dri') || !readdirSync('/dev/dri').some((n) => n.startsWith('renderD'));

async function main(): Promise<number> {
  const asked = flag('device') ?? 'all';
  if (!['cuda', 'webgpu', 'all'].includes(asked)) throw new SafekeepError(`--device must be cuda, webgpu or all, got '${asked}'`);
  const devices: Dut[] = flag('as') === 'cpu' ? ['cpu'] : asked === 'all' ? ['cuda', 'webgpu'] : [asked as Dut];
  const dtypes = (flag('dtypes') ?? 'f16,f32,bf16w').split(',').map((s) => s.trim()) as ComputeDType[];
  for (const d of dtypes) {
    if (!COMPUTE_DTYPES.includes(d) || d === 'q8' || d === 'q4') throw new SafekeepError(`--dtypes: ${d} is not one of f32, bf16, f16, bf16w`);
  }
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-gpu-'));
  cacheDir = join(tmp, 'cache');
  const cpu: OnnxEngine[] = [];
  let started = 0;
  try {
    const tiny = join(tmp, 'tiny');
    await writeRandomCheckpoint(tiny, 'llama', { seed: 4, numLayers: 4, hiddenSize: 256, numHeads: 8, numKvHeads: 2, intermediateSize: 512, vocabSize: 1000, std: 0.05, dtype: 'BF16' });
    const cpu32 = await createEngine(tiny, { cacheDir, device: 'cpu', dtype: 'f32' });
    cpu.push(cpu32);
    let big: string | null = null;
    for (const device of devices) {
      DUT = device;
      try {
        const probe = await createEngine(tiny, { cacheDir, device: DUT, dtype: 'f32' });
        await probe.dispose();
      } catch (e) {
        if (e instanceof SafekeepError) {
          process.stdout.write(`check:gpu: ${DUT} is not available on this host — ${e.message}\n`);
          continue;
        }
        throw e;
      }
      started++;
      line('ok', DUT === 'cuda' ? 'onnxruntime CUDA execution provider starts' : DUT === 'webgpu' ? 'onnxruntime WebGPU execution provider starts (an adapter was found)' : 'device under test: cpu (--as cpu: checks this script, not a GPU)');
      for (const d of dtypes) {
        const same = d === 'f16' ? await createEngine(tiny, { cacheDir, device: 'cpu', dtype: 'f16sim' }) : null;
        if (same) cpu.push(same);
        await parity(tiny, d, cpu32, same);
      }
      if (process.argv.includes('--no-speed')) continue;
      if (DUT === 'webgpu' && softwareAdapter()) {
        line('info', 'webgpu: no /dev/dri render node, so the adapter is a software one (Mesa\'s lavapipe): speed and memory not measured');
        continue;
      }
      if (big === null) {
        big = join(tmp, 'smol');
        process.stderr.write('writing a SmolLM2-135M-shaped random BF16 checkpoint ...\n');
        await writeRandomCheckpoint(big, 'llama', {
          seed: 1, numLayers: 30, hiddenSize: 576, numHeads: 9, numKvHeads: 3, headDim: 64, intermediateSize: 1536, vocabSize: 49152,
          tieWordEmbeddings: true, ropeScaling: null, ropeTheta: 100000, dtype: 'BF16',
        });
      }
      const mem = new Map<ComputeDType, number | null>();
      for (const d of dtypes) mem.set(d, await speed(big, d));
      const m16 = mem.get('f16');
      const m32 = mem.get('f32');
      if (m16 != null && m32 != null) {
        line(m16 < m32 ? 'ok' : 'FAIL', `${DUT}: GPU memory f16 ${m16} MiB < f32 ${m32} MiB (weights: ~270 vs ~540 MiB; the rest is activations, KV, workspace)`);
      }
    }
    if (started === 0) {
      process.stdout.write('Nothing to check; the CPU path is covered by npm test.\n');
      return 0;
    }
    process.stdout.write(failed ? 'check:gpu: FAIL (see the lines above)\n' : 'check:gpu: all checks passed\n');
    return failed ? 1 : 0;
  } finally {
    for (const e of cpu) await e.dispose();
    rmSync(tmp, { recursive: true, force: true });
  }
}

try {
  process.exitCode = await main();
} catch (e) {
  if (!(e instanceof SafekeepError)) throw e;
  process.stderr.write(`check:gpu: ${e.message}\n`);
  process.exitCode = 2;
}
