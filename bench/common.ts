/**
 * What the benchmarks share: the SmolLM2-135M shape they time, `--flag value` lookup, a raw onnxruntime MatMul chain
 * (the GEMM yardstick), best-of timing, peak RSS.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import * as ort from 'onnxruntime-node';
import { GraphBuilder } from '../src/engine/graph/onnx/builder.ts';
import { DataType } from '../src/engine/graph/onnx/proto.ts';

/** SmolLM2-135M's shape (random weights): the engine benchmarks' workload, comparable with bench/compare-hf.md */
export const SMOLLM2_SHAPE = {
  numLayers: 30, hiddenSize: 576, numHeads: 9, numKvHeads: 3, headDim: 64, intermediateSize: 1536, vocabSize: 49152,
  tieWordEmbeddings: true, ropeScaling: null, ropeTheta: 100000, seed: 1,
} as const;

/** the value after `--name` on the command line */
export function flag(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** A session running a chain of `depth` MatMuls [M, K]×[K, N] then [M, N]×[N, K] (constant weights). */
export async function rawMatmulSession(threads: number, M: number, K: number, N: number, depth: number) {
  const g = new GraphBuilder();
  let x = g.input('x', DataType.FLOAT, [M, K]);
  for (let i = 0; i < depth; i++) {
    const [a, b] = i % 2 === 0 ? [K, N] : [N, K];
    const w = new Float32Array(a * b).map((_, j) => Math.sin(j + i) * 0.05);
    x = g.op('MatMul', [x, g.initializer({ dataType: DataType.FLOAT, dims: [a, b], raw: new Uint8Array(w.buffer) }, 'w')]);
  }
  g.output('y', x, DataType.FLOAT, [M, depth % 2 === 0 ? K : N]);
  const s = await ort.InferenceSession.create(g.encode('gemm', { '': 17 }), {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    extra: { session: { intra_op: { allow_spinning: '0' } } }, // as the engine's sessions (session.ts)
  });
  const feed = { x: new ort.Tensor('float32', new Float32Array(M * K).map((_, i) => Math.cos(i)), [M, K]) };
  await s.run(feed);
  return { flops: 2 * M * K * N * depth, run: () => s.run(feed), release: () => s.release() };
}

/** the median (the mean of the two middle values of an even count) */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return (s[(s.length - 1) >> 1]! + s[s.length >> 1]!) / 2;
}

/** best of `reps` timings (s); the machine may be shared, the best run is the least disturbed one */
export async function best(reps: number, f: () => Promise<unknown>): Promise<number> {
  let b = Infinity;
  for (let i = 0; i < reps; i++) {
    const t = performance.now();
    await f();
    b = Math.min(b, (performance.now() - t) / 1000);
  }
  return b;
}

/**
 * Best times of `a` (one run per round) and `b` (best of 3 per round) over `rounds` interleaved rounds, so both see the
 * same machine load: the engine against the raw-GEMM yardstick. → [a s, b s]
 */
export async function interleavedBest(rounds: number, a: () => Promise<unknown>, b: () => Promise<unknown>): Promise<[number, number]> {
  let aS = Infinity;
  let bS = Infinity;
  for (let i = 0; i < rounds; i++) {
    aS = Math.min(aS, await best(1, a));
    bS = Math.min(bS, await best(3, b));
  }
  return [aS, bS];
}

/**
 * Peak RSS of this process image: VmHWM from /proc/self/status (Linux). Not getrusage's maxRSS: Linux carries the
 * parent's high-water mark across fork+exec into ru_maxrss, so a child spawned by a big parent reports the parent's.
 */
export function peakRss(): number {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
    if (m) return Number(m[1]) * 1024;
  } catch { /* not Linux */ }
  return process.resourceUsage().maxRSS * 1024;
}


/**
 * The read-bandwidth yardstick: a session reducing a 256 MiB f32 tensor (ReduceMax over every value: one compare per
 * value, so memory-bound) with the engine's thread options; bytes read per run. Fed from JS once, read in place.
 */
export async function readBandwidthSession(threads: number, bytes = 256 * 2 ** 20) {
  const n = bytes / 4;
  const g = new GraphBuilder();
  const x = g.input('x', DataType.FLOAT, [n / 1024, 1024]);
  g.output('y', g.op('ReduceMax', [x], { keepdims: 0 }), DataType.FLOAT, []);
  const s = await ort.InferenceSession.create(g.encode('bandwidth', { '': 17 }), {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    extra: { session: { intra_op: { allow_spinning: '0' } } }, // as the engine's sessions (session.ts)
  });
  const feed = { x: new ort.Tensor('float32', new Float32Array(n).map((_, i) => i % 7), [n / 1024, 1024]) };
  await s.run(feed);
  return { bytes, run: () => s.run(feed), release: () => s.release() };
}

/**
 * Bytes one decode step must read (the decode roofline's numerator): every linear weight as stored for the dtype
 * (f32: 4 B/param; q8/q4: codes + f32 block scales + packed zero points, block 32), lm_head included (the tied
 * embedding read whole), plus the KV cache at `kvSlots` filled slots (f32 K and V). Embedding rows, norms and
 * activations are negligible.
 */
export function decodeStepBytes(c: { numLayers: number; hiddenSize: number; numHeads: number; numKvHeads: number; headDim: number; intermediateSize: number; vocabSize: number },
  dtype: string, kvSlots: number, asymmetric = true): number {
  const d = c.hiddenSize;
  const perLayer = d * (c.numHeads + 2 * c.numKvHeads) * c.headDim + c.numHeads * c.headDim * d + 3 * d * c.intermediateSize;
  const params = c.numLayers * perLayer + c.vocabSize * d;
  const bits = dtype === 'q8' ? 8 : dtype === 'q4' ? 4 : 32;
  const perParam = bits === 32 ? 4 : bits / 8 + 4 / 32 + (asymmetric ? bits / 8 / 32 : 0);
  return params * perParam + c.numLayers * 2 * c.numKvHeads * kvSlots * c.headDim * 4;
}

/** the 1-minute load average (NaN off Linux): printed with every figure, since the machine may be shared */
export function loadavg(): number {
  try {
    return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
  } catch {
    return NaN;
  }
}

/** The last JSON line of a child's stdout and the child's wall time, or an error with its stderr tail. */
export function runChild(cmd: string, args: string[], what: string, env: NodeJS.ProcessEnv = process.env): { json: Record<string, unknown>; wallS: number } {
  const t = performance.now();
  const r = spawnSync(cmd, args, { encoding: 'utf8', env, maxBuffer: 64 << 20 });
  const wallS = (performance.now() - t) / 1000;
  const line = r.stdout?.trim().split('\n').filter((l) => l.startsWith('{')).at(-1);
  if (r.status !== 0 || !line) throw new Error(`${what} failed (exit ${r.status ?? `signal ${r.signal}`}): ${(r.stderr ?? '').trim().split('\n').slice(-8).join('\n')}`);
  return { json: JSON.parse(line) as Record<string, unknown>, wallS };
}

/**
 * The end of a side-by-side bench: the machine line (CPUs, the load its measuring processes saw), the table on
 * stdout, and the results as JSON in `file` (temp file + rename).
 */
export function finishBench(file: string, results: Record<string, unknown>, out: string[], loads: number[]): void {
  const seen = loads.filter(Number.isFinite);
  const lo = Math.min(...seen);
  const hi = Math.max(...seen);
  out.push('', `machine: ${availableParallelism()} CPUs; 1-min load average seen by the measuring processes ${lo}–${hi}${hi > 1.5 ? ' (figures taken under load: shared machine; read the ratios)' : ''}`);
  process.stdout.write(out.join('\n') + '\n');
  writeFileSync(`${file}.tmp`, JSON.stringify({ ...results, loads: [lo, hi], table: out }, null, 1) + '\n');
  renameSync(`${file}.tmp`, file);
  process.stdout.write(`→ ${file}\n`);
}
