/**
 * `npm run bench:llama [-- --shape smollm2|llama3.2-1b --threads 1,2 --dtypes f32,q8,q4 --rounds R --reps R
 *    --rows prefill,decode --model DIR --safekeep-quant default|SCHEME:BLOCK,... --safekeep-spin off|on|both --std S
 *    --python PATH --keep DIR --check-only --no-check --llama-fa auto|on|off --llama-kv default|f32]`: llama.cpp (through node-llama-cpp 3.21.1's prebuilt CPU
 * binary, installed into .cache/llama-node/ by `npm run bench:llama:setup` or on first use) and safekeep side by
 * side, in the same run, on the same checkpoint, at the same bits and threads. One fresh process per figure, the two
 * sides interleaved (order alternating), best of --rounds kept (default 3), each figure printed with the 1-minute
 * load average its process saw and the process's CPU time / wall time over the timed runs (how many cores it kept
 * busy), ratios safekeep / llama.cpp. Writes bench/llama-results.json (git-ignored).
 *
 * Bits per weight are printed for both sides from the bytes they store (bench/llama/gguf_bpw.py: every 2-D GGUF
 * tensor's size; safekeep: its quantized store's codes + scales + zero points over every quantized matrix), so "the
 * same bits per weight" is shown: safekeep sym block 64 with f32 scales is 4.5 / 8.5 bits, as Q4_0 / Q8_0 (blocks of
 * 32, f16 scales). `--safekeep-quant` (default `sym:64,default`: that matched store, then safekeep's default store —
 * sym block 32, 5 / 9 bits) times several of safekeep's stores in the same run (f32 once); `--safekeep-spin both` times safekeep with and without spinning workers (llama.cpp's threads always
 * busy-wait between ops). With f32 and q8/q4 in one run it also prints each side's q8/f32 and q4/f32 decode ratio.
 *
 * The checkpoint: --model DIR (a Llama-family folder), else a random one of --shape: smollm2 (default; SmolLM2-135M,
 * bench/common.ts SMOLLM2_SHAPE, f32) or llama3.2-1b (Llama-3.2-1B: d 2048, 16 layers, 32/8 heads, ffn 8192, vocab
 * 128256, tied, BF16 as released); weights std --std, default 0.03, written to a temp folder or --keep DIR: at 0.1
 * thirty random layers amplify f32 rounding to ~1e-3 in log p, at 0.02 attention is too flat for the negative control
 * to fail; speed does not depend on the values). bench/llama/to_gguf.py (numpy +
 * gguf-py, no torch) converts it to GGUF F32, Q8_0 and Q4_0 — every linear weight and the (tied) embedding at that
 * type — as llama.cpp's convert_hf_to_gguf does (the Q/K RoPE permute included).
 *
 * Pairs: safekeep f32 / q8 / q4 (symmetric blocks of 64 and its default 32, f32 scales, int8 activations — engine-config.ts) against
 * llama.cpp F32 / Q8_0 / Q4_0 (symmetric blocks of 32, f16 scales; llama.cpp's defaults otherwise: F16 KV cache,
 * flash attention 'auto', its threads busy-wait between ops; --llama-fa / --llama-kv change the first two).
 *
 * Rows:
 * - prefill 1×512 tokens/s: safekeep `forward([ids], {hiddenAt: 'none', logitsAt: 'last'})`; llama.cpp the 512 ids
 *   as one batch (batch size 512, logits at the last position), after clearing the sequence;
 * - decode tokens/s at prompt 128, greedy: 48 new tokens, timed from the first token's choice to the 48th's (47
 *   decode steps, the steps t(48 new) − t(2 new) counts, measured inside one run; see decodeFigure): safekeep
 *   `generate([p128], {maxNewTokens: 48, stopIds: []})` (the plain path: no steering, no step logits); llama.cpp
 *   `sequence.evaluate(p128, {temperature: 0})` (greedy, sampling in C++), stopped after 48 tokens.
 *
 * Measured (src/engine/README.md "Decode against llama.cpp at the same bits per weight"; shared 2-vCPU AVX2 EPYC
 * under load, 1 thread, same-run ratios): Llama-3.2-1B shape q4 sym 64 (4.5 bits, as Q4_0) 1.08× llama.cpp in one
 * run (load 1.1–3.2) and 0.95× in another (load 4.4–5.4), q8 sym 64 (8.5 bits) 1.01× / 0.73× (1.02× by CPU time in
 * both), the default store (sym 32) 1.09× / 1.10×; SmolLM2 shape q4 0.90–0.97×, q8 0.70×, and safekeep's q4 decode
 * 3.10× (sym 64) / 3.33× (default) its f32 decode. At 2 threads (load 3.1–5.3, one run) the 1B shape's q4 was 0.87×
 * and q8 0.61×, with the processes getting unequal shares of the shared cores (see the CPU column).
 *
 * Correctness first (unless --no-check): at f32 both sides must compute the same function on the same ids — the
 * next-token log-probabilities at all 128 prompt positions (llama.cpp: `controlledEvaluate` with the full
 * probability list; flash attention off and an F32 KV cache for this check, since llama.cpp's CPU flash attention
 * rounds through f16 — shown as a second, informational row with the timed settings) and 16 greedy tokens. Top-1
 * must agree at every position, the 16 greedy ids must be equal and max |Δ log p| ≤ CHECK_TOL, else the bench says
 * NOT EQUAL and stops before timing anything (exit 1). A negative
 * control runs the same check on a GGUF written without the Q/K permute, to show the check can fail. q8/q4 are
 * compared too, for information only (different quantizers: they are not expected to be equal).
 */
import { engineEnv } from '../src/cli/env.ts';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SMOLLM2_SHAPE, finishBench, flag, loadavg, runChild } from './common.ts';
import { ensureLlamaNode, loadLlamaCpp, NODE_LLAMA_CPP_VERSION, type NlcSequence } from './llama/setup.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngineFromCheckpoint } from '../src/engine/engine.ts';
import { resolveEngineConfig } from '../src/engine/engine-config.ts';
import { quantizedWeights } from '../src/engine/runtime/quant-store.ts';
import type { ComputeDType } from '../src/engine/graph/precision.ts';

const here = dirname(fileURLToPath(import.meta.url));
const me = fileURLToPath(import.meta.url);
const python = flag('python') ?? 'python3';
const toGguf = join(here, 'llama', 'to_gguf.py');
const ggufBpw = join(here, 'llama', 'gguf_bpw.py');

/**
 * Llama-3.2-1B's shape (random weights, BF16 as the released checkpoint): 16 layers, d 2048, 32 / 8 heads, head_dim
 * 64, ffn 8192, vocab 128256, tied, llama3 RoPE scaling (factor 32).
 */
const LLAMA32_1B_SHAPE = {
  numLayers: 16, hiddenSize: 2048, numHeads: 32, numKvHeads: 8, headDim: 64, intermediateSize: 8192, vocabSize: 128256,
  tieWordEmbeddings: true, ropeTheta: 500000, seed: 1, maxPositionEmbeddings: 131072, dtype: 'BF16',
  ropeScaling: { factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 },
} as const;
const SHAPES = {
  smollm2: { shape: SMOLLM2_SHAPE, what: 'SmolLM2-135M shape (30 layers, d 576, 9/3 heads, head_dim 64, ffn 1536, vocab 49152, tied), random f32 weights' },
  'llama3.2-1b': { shape: LLAMA32_1B_SHAPE, what: 'Llama-3.2-1B shape (16 layers, d 2048, 32/8 heads, head_dim 64, ffn 8192, vocab 128256, tied), random BF16 weights' },
} as const;
type ShapeName = keyof typeof SHAPES;

type Dtype = 'f32' | 'q8' | 'q4';
const GGUF_TYPE: Record<Dtype, string> = { f32: 'f32', q8: 'q8_0', q4: 'q4_0' };
const LLAMA_NAME: Record<Dtype, string> = { f32: 'F32', q8: 'Q8_0', q4: 'Q4_0' };

const PREFILL_T = 512;
const DECODE_PROMPT = 128;
const DECODE_N = 48;
const CHECK_GREEDY = 16;
/**
 * f32 pass bound on max |Δ log p| (all positions and tokens), llama.cpp without flash attention and with an F32 KV
 * cache: measured 1.5e-5 at the default std 0.03, 8.5e-4 at std 0.1 (thirty random layers amplify f32 rounding)
 */
const CHECK_TOL = 1e-3;

/** the bench's token ids (as bench:engine and bench:hf): deterministic, spread over the vocabulary */
const promptIds = (n: number, vocab: number) => Array.from({ length: n }, (_, i) => 3 + ((i * 7919) % (vocab - 3)));

interface Timing {
  prefillTps: number; decodeTps: number; prefillLoad: number; decodeLoad: number;
  /** process CPU time / wall time over the timed prefill (resp. decode) runs: cores kept busy */
  prefillCpu: number; decodeCpu: number;
  /**
   * by CPU time instead of wall time (least CPU per call over the reps): prefill tokens per CPU second, decode CPU ms
   * per step = (cpu(48 new) − cpu(2 new)) / 46. At 1 thread this is the compute itself, hardly moved by the load
   * (a descheduled process uses no CPU); at 2 threads it also counts spinning.
   */
  prefillCpuTps?: number; decodeCpuMs?: number;
  /** llama.cpp: the context's thread count after the runs */
  threadsSeen?: number;
  /** q8/q4: bits per weight of the matrices as stored (safekeep's quantized store; llama.cpp's GGUF) */
  bpw?: number;
  /** safekeep q8/q4: the store's scheme and block, e.g. `sym, block 64` */
  quant?: string;
}

/** time `f`: best wall s and least CPU s per call over `reps`, and the CPU/wall ratio over all its runs */
async function timed(reps: number, f: () => Promise<unknown>): Promise<{ s: number; cpuS: number; cpu: number }> {
  const c0 = process.cpuUsage();
  const w0 = performance.now();
  let s = Infinity;
  let cpuS = Infinity;
  for (let i = 0; i < reps; i++) {
    const c = process.cpuUsage();
    const t = performance.now();
    await f();
    s = Math.min(s, (performance.now() - t) / 1000);
    const dc = process.cpuUsage(c);
    cpuS = Math.min(cpuS, (dc.user + dc.system) / 1e6);
  }
  const c = process.cpuUsage(c0);
  return { s, cpuS, cpu: (c.user + c.system) / 1000 / (performance.now() - w0) };
}

/** a mark inside one generation: wall ms and process CPU µs */
interface Mark { t: number; cpu: NodeJS.CpuUsage }
const mark = (): Mark => ({ t: performance.now(), cpu: process.cpuUsage() });

/**
 * decode figure: each rep generates DECODE_N tokens and is timed from the first token's choice (end of the prefill)
 * to the last one's: DECODE_N − 1 decode steps. Best of reps by wall time and, separately, by CPU time; CPU/wall over
 * all reps. (The same steps as t(48 new) − t(2 new), but one run per figure: a difference of two best-ofs turns load
 * that hit only the shorter runs into impossible speeds — it reported 615 tok/s for F32 at 2 threads here.)
 */
async function decodeFigure(reps: number, gen: () => Promise<[Mark, Mark]>): Promise<{ tps: number; cpuMs: number; cpu: number }> {
  let s = Infinity;
  let cpuS = Infinity;
  let wall = 0;
  let cpu = 0;
  for (let i = 0; i < reps; i++) {
    const [a, b] = await gen();
    const w = (b.t - a.t) / 1000;
    const c = (b.cpu.user + b.cpu.system - a.cpu.user - a.cpu.system) / 1e6;
    s = Math.min(s, w);
    cpuS = Math.min(cpuS, c);
    wall += w;
    cpu += c;
  }
  const steps = DECODE_N - 1;
  return { tps: steps / s, cpuMs: (1000 * cpuS) / steps, cpu: cpu / wall };
}

// ---------------------------------------------------------------------------------------------------------------
// children: one figure set per fresh process

async function safekeepEngine(dir: string, dtype: Dtype, threads: number, cacheDir: string) {
  const ck = await loadCheckpoint(dir);
  const engine = await createEngineFromCheckpoint(ck, { ...engineEnv(), dtype: dtype as ComputeDType, threads, cacheDir, quiet: true });
  return { engine, vocab: ck.config.vocabSize };
}

/**
 * safekeep q8/q4: bits per weight of every quantized matrix (the linears, lm_head included) from the bytes its store
 * holds — codes, scales and zero points — in the store this engine config reads (the one the timing child opened)
 */
async function storeBits(dir: string, dtype: Dtype, cacheDir: string): Promise<Pick<Timing, 'bpw' | 'quant'>> {
  const q = resolveEngineConfig({ ...engineEnv(), dtype: dtype as ComputeDType, cacheDir }).quant;
  if (!q) return {};
  const store = quantizedWeights(await loadCheckpoint(dir), q.bits, q.scheme, q.block, cacheDir, true);
  let bytes = 0;
  let weights = 0;
  for (const [name, [n, k]] of Object.entries(store.index.linears)) {
    for (const part of ['codes', 'scales', 'zp']) bytes += store.index.tensors[`${name}.${part}`]?.length ?? 0;
    weights += n * k;
  }
  return { bpw: (8 * bytes) / weights, quant: `${q.scheme}, block ${q.block}` };
}

async function safekeepTime(dir: string, dtype: Dtype, threads: number, reps: number, cacheDir: string, rows: string[]): Promise<Timing> {
  const { engine, vocab } = await safekeepEngine(dir, dtype, threads, cacheDir);
  const ids = promptIds(PREFILL_T, vocab);
  const p128 = ids.slice(0, DECODE_PROMPT);
  const r: Timing = { prefillTps: NaN, decodeTps: NaN, prefillLoad: NaN, decodeLoad: NaN, prefillCpu: NaN, decodeCpu: NaN, ...(await storeBits(dir, dtype, cacheDir)) };
  if (rows.includes('prefill')) {
    await engine.forward([ids.slice(0, 64)], { hiddenAt: 'none', logitsAt: 'last' });
    await engine.forward([ids], { hiddenAt: 'none', logitsAt: 'last' });
    const p = await timed(reps, () => engine.forward([ids], { hiddenAt: 'none', logitsAt: 'last' }));
    Object.assign(r, { prefillTps: PREFILL_T / p.s, prefillCpu: p.cpu, prefillCpuTps: PREFILL_T / p.cpuS, prefillLoad: loadavg() });
  }
  if (rows.includes('decode')) {
    await engine.generate([p128], { maxNewTokens: 4, stopIds: [] });
    // the plain path; haltAfterPrefill (never halting) only marks the end of the prefill: it adds the last prompt
    // token's hidden states to the prefill's outputs and changes nothing in the decode steps (run/generate.ts)
    const d = await decodeFigure(reps, async () => {
      let a: Mark | null = null;
      await engine.generate([p128], { maxNewTokens: DECODE_N, stopIds: [], haltAfterPrefill: () => { a = mark(); return false; } });
      return [a!, mark()];
    });
    Object.assign(r, { decodeTps: d.tps, decodeCpu: d.cpu, decodeCpuMs: d.cpuMs, decodeLoad: loadavg() });
  }
  await engine.dispose();
  return r;
}

/**
 * llama.cpp context options: flash attention 'auto' (llama.cpp's default: on for this model on CPU) or on/off; the
 * KV cache at llama.cpp's default (F16) or F32
 */
interface LlamaCtxOpts { fa: 'auto' | 'on' | 'off'; kvF32: boolean }

async function llamaSession(gguf: string, threads: number, o: LlamaCtxOpts) {
  const llama = await loadLlamaCpp();
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
  const ctx = await model.createContext({
    contextSize: 1024, batchSize: PREFILL_T, sequences: 1, threads: { ideal: threads, min: threads },
    flashAttention: o.fa === 'auto' ? 'auto' : o.fa === 'on',
    ...(o.kvF32 ? { experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32' } : {}),
  });
  return { llama, ctx, seq: ctx.getSequence() };
}

const llamaOpts = (): LlamaCtxOpts => ({ fa: (flag('llama-fa') ?? 'auto') as LlamaCtxOpts['fa'], kvF32: flag('llama-kv') === 'f32' });
const llamaOptArgs = (o: LlamaCtxOpts) => ['--llama-fa', o.fa, '--llama-kv', o.kvF32 ? 'f32' : 'default'];

/** greedy tokens from llama.cpp after `prompt` (sampling in C++, temperature 0), the sequence cleared first */
async function llamaGreedy(seq: NlcSequence, prompt: number[], n: number): Promise<number[]> {
  await seq.clearHistory();
  const out: number[] = [];
  if (n <= 0) return out;
  for await (const t of seq.evaluate(prompt, { temperature: 0, yieldEogToken: true })) {
    out.push(t);
    if (out.length >= n) break;
  }
  return out;
}

async function llamaTime(gguf: string, threads: number, reps: number, vocab: number, rows: string[], o: LlamaCtxOpts): Promise<Timing> {
  const { llama, ctx, seq } = await llamaSession(gguf, threads, o);
  const ids = promptIds(PREFILL_T, vocab);
  const p128 = ids.slice(0, DECODE_PROMPT);
  // all ids in one batch, a token (so logits) only after the last one
  const prefill = async (x: number[]) => {
    await seq.clearHistory();
    await seq.controlledEvaluate([...x.slice(0, -1), [x.at(-1)!, { generateNext: { token: true, options: { temperature: 0 } } }]]);
  };
  const r: Timing = { prefillTps: NaN, decodeTps: NaN, prefillLoad: NaN, decodeLoad: NaN, prefillCpu: NaN, decodeCpu: NaN };
  if (rows.includes('prefill')) {
    await prefill(ids.slice(0, 64));
    await prefill(ids);
    const p = await timed(reps, () => prefill(ids));
    Object.assign(r, { prefillTps: PREFILL_T / p.s, prefillCpu: p.cpu, prefillCpuTps: PREFILL_T / p.cpuS, prefillLoad: loadavg() });
  }
  if (rows.includes('decode')) {
    await llamaGreedy(seq, p128, 4);
    const d = await decodeFigure(reps, async () => {
      await seq.clearHistory();
      let a: Mark | null = null;
      let k = 0;
      for await (const _ of seq.evaluate(p128, { temperature: 0, yieldEogToken: true })) {
        if (++k === 1) a = mark();
        if (k >= DECODE_N) break;
      }
      return [a!, mark()];
    });
    Object.assign(r, { decodeTps: d.tps, decodeCpu: d.cpu, decodeCpuMs: d.cpuMs, decodeLoad: loadavg() });
  }
  r.threadsSeen = ctx.currentThreads;
  await llama.dispose();
  return r;
}

/** log-softmax of each row of [n, V] logits, in place */
function logSoftmaxRows(x: Float32Array, V: number): Float32Array {
  for (let o = 0; o < x.length; o += V) {
    let m = -Infinity;
    for (let i = o; i < o + V; i++) m = Math.max(m, x[i]!);
    let s = 0;
    for (let i = o; i < o + V; i++) s += Math.exp(x[i]! - m);
    const lse = m + Math.log(s);
    for (let i = o; i < o + V; i++) x[i] = x[i]! - lse;
  }
  return x;
}

/** check child: next-token log-probs at every prompt position → `out` (f32 [128, V]); greedy ids on stdout */
async function safekeepCheck(dir: string, dtype: Dtype, cacheDir: string, out: string): Promise<{ greedy: number[] }> {
  const { engine, vocab } = await safekeepEngine(dir, dtype, 1, cacheDir);
  const p = promptIds(DECODE_PROMPT, vocab);
  const [f] = await engine.forward([p], { hiddenAt: 'none', logitsAt: 'all' });
  writeFileSync(out, logSoftmaxRows(f!.logits, vocab));
  const [g] = await engine.generate([p], { maxNewTokens: CHECK_GREEDY, stopIds: [] });
  await engine.dispose();
  return { greedy: g!.generatedIds };
}

async function llamaCheck(gguf: string, vocab: number, out: string, o: LlamaCtxOpts): Promise<{ greedy: number[] }> {
  const { llama, seq } = await llamaSession(gguf, 1, o);
  const p = promptIds(DECODE_PROMPT, vocab);
  await seq.clearHistory();
  // the full next-token distribution at every position: temperature 1 and no top-k/top-p/min-p filter = softmax(logits)
  const all = { generateNext: { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } } };
  const res = await seq.controlledEvaluate(p.map((t) => [t, all] as [number, Record<string, unknown>]));
  const lp = new Float32Array(p.length * vocab).fill(-Infinity);
  res.forEach((r, i) => {
    for (const [t, pr] of r?.next?.probabilities ?? []) lp[i * vocab + t] = Math.log(pr);
  });
  writeFileSync(out, lp);
  const greedy = await llamaGreedy(seq, p, CHECK_GREEDY);
  await llama.dispose();
  return { greedy };
}

// ---------------------------------------------------------------------------------------------------------------
// parent

/** last JSON line of a child's stdout, or an error with its stderr tail */
const run = (cmd: string, args: string[], what: string, env: NodeJS.ProcessEnv = process.env): Record<string, unknown> => runChild(cmd, args, what, env).json;

interface CheckResult {
  dtype: Dtype; gguf: string; top1Agree: number; positions: number; greedyEqual: number;
  /** max |Δ log p| over every position and token; and over each position's top-10 (safekeep's) tokens */
  maxAbsLogp: number; maxAbsLogpTop10: number;
  greedy: { safekeep: number[]; llama: number[] };
}

function compareCheck(dtype: Dtype, gguf: string, a: Float32Array, b: Float32Array, V: number, ga: number[], gb: number[]): CheckResult {
  let top1 = 0;
  let maxAll = 0;
  let maxTop = 0;
  const n = a.length / V;
  for (let p = 0; p < n; p++) {
    const o = p * V;
    let ia = 0;
    let ib = 0;
    for (let i = 0; i < V; i++) {
      if (a[o + i]! > a[o + ia]!) ia = i;
      if (b[o + i]! > b[o + ib]!) ib = i;
      const d = Math.abs(a[o + i]! - b[o + i]!);
      if (d > maxAll || Number.isNaN(d)) maxAll = Number.isNaN(d) ? Infinity : d;
    }
    if (ia === ib) top1++;
    const top = [...a.subarray(o, o + V).keys()].sort((x, y) => a[o + y]! - a[o + x]!).slice(0, 10);
    for (const i of top) maxTop = Math.max(maxTop, Math.abs(a[o + i]! - b[o + i]!));
  }
  let eq = 0;
  while (eq < ga.length && ga[eq] === gb[eq]) eq++;
  return { dtype, gguf, top1Agree: top1, positions: n, greedyEqual: eq, maxAbsLogp: maxAll, maxAbsLogpTop10: maxTop, greedy: { safekeep: ga, llama: gb } };
}

const fmt = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : '—');
/** a / b as `1.23×`, or — when a row was not run */
const ratio = (a: number | undefined, b: number | undefined) => fmt((a ?? NaN) / (b ?? NaN), 2) + (Number.isFinite((a ?? NaN) / (b ?? NaN)) ? '×' : '');

/** one way of running safekeep's side: a name, the SAFEKEEP_* environment it adds, its quant store and spin setting */
interface Variant { name: string; env: Record<string, string>; quant: string; spin: boolean }

/**
 * safekeep's sides: the configured engine (SAFEKEEP_* environment) by default; `--safekeep-quant sym:64,asym:32`
 * times each quantized store in the same run (q8/q4 rows; f32 once), `--safekeep-spin both` each with and without
 * spinning workers (llama.cpp's threads always busy-wait between ops)
 */
function safekeepVariants(): Variant[] {
  const spinFlag = flag('safekeep-spin') ?? (process.env.SAFEKEEP_SPIN === '1' ? 'on' : 'off');
  if (!['off', 'on', 'both'].includes(spinFlag)) throw new Error(`--safekeep-spin: off, on, both; got ${spinFlag}`);
  const spins = spinFlag === 'both' ? [false, true] : [spinFlag === 'on'];
  const quants = (flag('safekeep-quant') ?? 'sym:64,default').split(',');
  for (const q of quants) if (q !== 'default' && !/^(sym|asym):(32|64|128)$/.test(q)) throw new Error(`--safekeep-quant: default or SCHEME:BLOCK (sym|asym : 32|64|128), comma-separated; got ${q}`);
  return quants.flatMap((q) => spins.map((spin): Variant => {
    const [scheme, block] = q.split(':');
    return {
      name: `safekeep${q === 'default' ? ' (default store)' : ` ${scheme} block ${block}`}${spin ? ', spinning workers' : ''}`,
      env: { SAFEKEEP_SPIN: spin ? '1' : '0', ...(q === 'default' ? {} : { SAFEKEEP_QUANT_SCHEME: scheme!, SAFEKEEP_QUANT_BLOCK: block! }) },
      quant: q, spin,
    };
  }));
}

/** the variants timed for width d: f32 has no quant store, so one per spin setting */
const variantsFor = (vs: Variant[], d: Dtype): Variant[] => (d === 'f32' ? vs.filter((v) => v.quant === vs[0]!.quant) : vs);

async function main(): Promise<void> {
  const mode = flag('mode');
  if (mode) {
    const threads = Number(flag('threads') ?? 1);
    const reps = Number(flag('reps') ?? 3);
    const rows = (flag('rows') ?? 'prefill,decode').split(',');
    let r: unknown;
    if (mode === 'safekeep-time') r = await safekeepTime(flag('model')!, flag('dtype') as Dtype, threads, reps, flag('cache')!, rows);
    else if (mode === 'llama-time') r = await llamaTime(flag('gguf')!, threads, reps, Number(flag('vocab')), rows, llamaOpts());
    else if (mode === 'safekeep-check') r = await safekeepCheck(flag('model')!, flag('dtype') as Dtype, flag('cache')!, flag('out')!);
    else if (mode === 'llama-check') r = await llamaCheck(flag('gguf')!, Number(flag('vocab')), flag('out')!, llamaOpts());
    else if (mode === 'llama-info') {
      const llama = await loadLlamaCpp();
      r = { release: llama.llamaCppRelease, buildType: llama.buildType, systemInfo: llama.systemInfo.trim() };
      await llama.dispose();
    } else throw new Error(`unknown --mode ${mode}`);
    process.stdout.write(JSON.stringify(r) + '\n');
    return;
  }

  const pyCheck = spawnSync(python, ['-c', 'import gguf, numpy; print(gguf.__name__)'], { encoding: 'utf8' });
  if (pyCheck.status !== 0) {
    process.stdout.write(`bench:llama: skipped — ${python} cannot import gguf and numpy (bench/llama/to_gguf.py writes the GGUF files); pip install gguf numpy\n`);
    return;
  }
  ensureLlamaNode();
  const threadsList = (flag('threads') ?? [...new Set([1, Math.min(2, availableParallelism())])].join(',')).split(',').map(Number);
  const dtypes = (flag('dtypes') ?? 'f32,q8,q4').split(',') as Dtype[];
  if (!dtypes.every((d) => d in GGUF_TYPE)) throw new Error(`--dtypes: f32, q8, q4; got ${flag('dtypes')}`);
  const rounds = Number(flag('rounds') ?? 3);
  const reps = Number(flag('reps') ?? 3);
  const rows = (flag('rows') ?? 'prefill,decode').split(',');
  const keep = flag('keep');
  const work = keep ? resolve(keep) : mkdtempSync(join(tmpdir(), 'safekeep-bench-llama-'));
  mkdirSync(work, { recursive: true });
  const cacheDir = join(work, 'cache');
  const env = { ...process.env, SAFEKEEP_QUIET: '1', SAFEKEEP_CACHE: cacheDir };
  const node = (args: string[], what: string) => run(process.execPath, ['--import', 'tsx', me, ...args], what, env);
  const out: string[] = [];
  const loads: number[] = [];
  try {
    const info = node(['--mode', 'llama-info'], 'llama.cpp info') as { release: { repo: string; release: string }; buildType: string; systemInfo: string };
    const std = Number(flag('std') ?? 0.03);
    const shapeName = (flag('shape') ?? 'smollm2') as ShapeName;
    if (!(shapeName in SHAPES)) throw new Error(`--shape: ${Object.keys(SHAPES).join(', ')}; got ${shapeName}`);
    const modelDir = flag('model') ? resolve(flag('model')!) : join(work, `${shapeName}-shape-std${std}`);
    const modelWhat = flag('model') ? modelDir : `${SHAPES[shapeName].what}, std ${std}`;
    if (!flag('model') && !existsSync(join(modelDir, 'model.safetensors'))) {
      process.stderr.write(`writing a random checkpoint, ${modelWhat}, to ${modelDir} ...\n`);
      await writeRandomCheckpoint(modelDir, 'llama', { ...SHAPES[shapeName].shape, std });
    }
    const variants = safekeepVariants();
    const vocab = (JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;
    const gguf = (d: Dtype, control = false) => join(work, `model-${GGUF_TYPE[d]}${control ? '-no-permute' : ''}.gguf`);
    const convert = (d: Dtype, control = false) => {
      if (existsSync(gguf(d, control))) return;
      process.stderr.write(`converting to GGUF ${LLAMA_NAME[d]}${control ? ' without the Q/K permute (negative control)' : ''} ...\n`);
      run(python, [toGguf, modelDir, gguf(d, control), '--type', GGUF_TYPE[d], ...(control ? ['--no-permute'] : [])], 'to_gguf.py');
    };
    for (const d of dtypes) convert(d);
    const head = `bench:llama — llama.cpp (${info.release.repo} ${info.release.release}, node-llama-cpp ${NODE_LLAMA_CPP_VERSION} ${info.buildType} CPU binary) vs safekeep (onnxruntime), fresh process per figure, interleaved, best of ${rounds} rounds × ${reps} reps`;
    out.push(head);
    process.stderr.write(`${head}\n`);
    const results: Record<string, unknown> = { date: new Date().toISOString(), llamaCpp: info, nodeLlamaCpp: NODE_LLAMA_CPP_VERSION, rounds, reps, model: modelWhat, llamaContext: llamaOpts(), safekeepVariants: variants.map((v) => v.name) };

    // correctness: the same function at f32 (and, for information, the quantized pairs)
    if (!process.argv.includes('--no-check')) {
      convert('f32'); // the check compares at f32 even when only quantized types are timed
      const checks: Record<string, CheckResult> = {};
      const f = (p: string) => { const b = readFileSync(p); return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4); };
      const skRuns = new Map<Dtype, { file: string; greedy: number[] }>();
      const sk = (d: Dtype) => {
        if (!skRuns.has(d)) {
          const file = join(work, `check-safekeep-${d}.f32`);
          process.stderr.write(`check: safekeep ${d}, next-token log-probs at ${DECODE_PROMPT} positions + ${CHECK_GREEDY} greedy tokens ...\n`);
          const r = node(['--mode', 'safekeep-check', '--model', modelDir, '--dtype', d, '--cache', cacheDir, '--out', file], `safekeep check ${d}`) as { greedy: number[] };
          skRuns.set(d, { file, greedy: r.greedy });
        }
        return skRuns.get(d)!;
      };
      const ll = (d: Dtype, o: LlamaCtxOpts, tag: string, control = false) => {
        const file = join(work, `check-llama-${d}-${tag}.f32`);
        process.stderr.write(`check: llama.cpp ${LLAMA_NAME[d]} (${tag}), the same ...\n`);
        const r = node(['--mode', 'llama-check', '--gguf', gguf(d, control), '--vocab', String(vocab), '--out', file, ...llamaOptArgs(o)], `llama.cpp check ${d}`) as { greedy: number[] };
        return { file, greedy: r.greedy };
      };
      const pair = (key: string, d: Dtype, a: { file: string; greedy: number[] }, b: { file: string; greedy: number[] }) =>
        (checks[key] = compareCheck(d, key, f(a.file), f(b.file), vocab, a.greedy, b.greedy));
      const line = (c: CheckResult, what: string) => `| ${what} | ${c.top1Agree}/${c.positions} | ${c.greedyEqual}/${CHECK_GREEDY} | ${c.maxAbsLogpTop10.toExponential(1)} | ${c.maxAbsLogp.toExponential(1)} |`;
      const exact: LlamaCtxOpts = { fa: 'off', kvF32: true };
      const timedO = llamaOpts();
      const timedTag = `${timedO.fa === 'auto' ? 'flash attention auto' : `flash attention ${timedO.fa}`}, ${timedO.kvF32 ? 'F32' : 'F16'} KV`;
      out.push('', `correctness: safekeep vs llama.cpp, the same ids (prompt ${DECODE_PROMPT}): next-token log-probabilities at every prompt position and ${CHECK_GREEDY} greedy tokens`);
      out.push('| pair | top-1 equal at prompt positions | greedy ids equal (first k of 16) | max abs Δ log p, top-10 tokens | max abs Δ log p, all tokens |', '| --- | --- | --- | --- | --- |');
      const f32 = pair('f32', 'f32', sk('f32'), ll('f32', exact, 'exact'));
      out.push(line(f32, 'f32 / F32 — llama.cpp without flash attention, F32 KV cache'));
      out.push(line(pair('f32-timed', 'f32', sk('f32'), ll('f32', timedO, 'timed')), `f32 / F32 — llama.cpp as timed (${timedTag})`));
      convert('f32', true);
      const ctl = pair('f32-control', 'f32', sk('f32'), ll('f32', exact, 'control', true));
      out.push(line(ctl, 'f32 / F32 **written without the Q/K permute** (negative control: must differ)'));
      rmSync(gguf('f32', true), { force: true });
      const quant: string[] = [];
      for (const d of dtypes.filter((x) => x !== 'f32')) {
        const l = ll(d, timedO, 'timed');
        out.push(line(pair(d, d, sk(d), l), `${d} / ${LLAMA_NAME[d]} — as timed (different quantizers: information)`));
        const s0 = pair(`${d}-safekeep-vs-f32`, d, sk('f32'), sk(d));
        const l0 = pair(`${d}-llama-vs-f32`, d, sk('f32'), l);
        quant.push(`| ${d} | safekeep ${d} | ${s0.top1Agree}/${s0.positions} | ${s0.maxAbsLogpTop10.toFixed(3)} |`, `| ${d} | llama.cpp ${LLAMA_NAME[d]} | ${l0.top1Agree}/${l0.positions} | ${l0.maxAbsLogpTop10.toFixed(3)} |`);
      }
      const ok = f32.top1Agree === f32.positions && f32.greedyEqual === CHECK_GREEDY && f32.maxAbsLogp <= CHECK_TOL;
      out.push(ok ? `f32: the same function (top-1 at every position, all greedy ids equal, max abs Δ log p ≤ ${CHECK_TOL}).` : `f32: NOT EQUAL — the GGUF does not compute the same function (needs top-1 everywhere, 16/16 greedy, max abs Δ log p ≤ ${CHECK_TOL}); no timing.`);
      if (ctl.top1Agree === ctl.positions && ctl.greedyEqual === CHECK_GREEDY) out.push('negative control UNEXPECTEDLY EQUAL: this checkpoint cannot tell the RoPE layouts apart (weights too small?)');
      if (quant.length) {
        out.push('', 'quantization error of each side, against the f32 reference (safekeep f32 = llama.cpp F32 above):');
        out.push('| bits | side | top-1 equal to f32 | max abs Δ log p vs f32, top-10 tokens |', '| --- | --- | --- | --- |', ...quant);
      }
      results.checks = checks;
      if (!process.argv.includes('--check-only')) process.stderr.write(out.join('\n') + '\n');
      if (!ok) { process.exitCode = 1; process.stdout.write(out.join('\n') + '\n'); return; }
    }
    if (process.argv.includes('--check-only')) { process.stdout.write(out.join('\n') + '\n'); return; }

    // safekeep's quantized weights and graphs cached before any timing (a first q8/q4 run quantizes), and the bits
    // per weight each side stores: "the same bits per weight" shown from the bytes, not assumed
    const skEnv = (v: Variant) => ({ ...env, ...v.env });
    const llamaBits: Partial<Record<Dtype, { bpw: number; types: string }>> = {};
    const skBits = new Map<string, { bpw?: number; quant?: string }>();
    const bitsKey = (d: Dtype, v: Variant) => `${d}:${v.quant}`;
    for (const d of dtypes) {
      const g = run(python, [ggufBpw, gguf(d)], 'gguf_bpw.py') as { bpw: number; types: Record<string, number> };
      llamaBits[d] = { bpw: g.bpw, types: Object.entries(g.types).map(([t, n]) => `${n} ${t}`).join(', ') };
      for (const v of variantsFor(variants, d)) {
        if (skBits.has(bitsKey(d, v))) continue;
        const w = run(process.execPath, ['--import', 'tsx', me, '--mode', 'safekeep-time', '--model', modelDir, '--dtype', d, '--cache', cacheDir, '--threads', '1', '--reps', '1', '--rows', 'none'], `safekeep warm-up ${d}`, skEnv(v)) as unknown as Timing;
        skBits.set(bitsKey(d, v), { ...(w.bpw !== undefined ? { bpw: w.bpw } : {}), ...(w.quant ? { quant: w.quant } : {}) });
      }
    }
    results.bitsPerWeight = { llama: llamaBits, safekeep: Object.fromEntries(skBits) };

    const bestOf: Record<string, Record<string, Timing | null>> = {};
    const keyOf = (d: Dtype, t: number) => `${d}@${t}`;
    const keepBest = (prev: Timing | null, m: Timing): Timing => !prev ? m : {
      prefillTps: Math.max(prev.prefillTps, m.prefillTps) || prev.prefillTps,
      prefillLoad: m.prefillTps > prev.prefillTps ? m.prefillLoad : prev.prefillLoad,
      prefillCpu: m.prefillTps > prev.prefillTps ? m.prefillCpu : prev.prefillCpu,
      decodeTps: Math.max(prev.decodeTps, m.decodeTps) || prev.decodeTps,
      decodeLoad: m.decodeTps > prev.decodeTps ? m.decodeLoad : prev.decodeLoad,
      decodeCpu: m.decodeTps > prev.decodeTps ? m.decodeCpu : prev.decodeCpu,
      prefillCpuTps: Math.max(prev.prefillCpuTps ?? NaN, m.prefillCpuTps ?? NaN) || prev.prefillCpuTps || m.prefillCpuTps,
      decodeCpuMs: Math.min(prev.decodeCpuMs ?? NaN, m.decodeCpuMs ?? NaN) || prev.decodeCpuMs || m.decodeCpuMs,
      ...(m.threadsSeen !== undefined ? { threadsSeen: m.threadsSeen } : {}),
    };
    let flip = 0;
    for (let r = 0; r < rounds; r++) {
      for (const d of dtypes) {
        for (const t of threadsList) {
          const k = keyOf(d, t);
          bestOf[k] ??= {};
          const all: (Variant | 'llama')[] = ['llama', ...variantsFor(variants, d)];
          const sides = (r + flip++) % 2 === 0 ? all : [...all].reverse();
          for (const v of sides) {
            const side = v === 'llama' ? 'llama' : v.name;
            process.stderr.write(`round ${r + 1}/${rounds}, ${d}, ${t} thread(s): ${v === 'llama' ? `llama.cpp ${LLAMA_NAME[d]}` : `${side} ${d}`} (load ${loadavg()}) ...\n`);
            const m = (v === 'llama'
              ? node(['--mode', 'llama-time', '--gguf', gguf(d), '--vocab', String(vocab), '--threads', String(t), '--reps', String(reps), '--rows', rows.join(','), ...llamaOptArgs(llamaOpts())], `llama.cpp ${d}`)
              : run(process.execPath, ['--import', 'tsx', me, '--mode', 'safekeep-time', '--model', modelDir, '--dtype', d, '--cache', cacheDir, '--threads', String(t), '--reps', String(reps), '--rows', rows.join(',')], `${side} ${d}`, skEnv(v))) as unknown as Timing;
            for (const x of [m.prefillLoad, m.decodeLoad]) if (Number.isFinite(x)) loads.push(x);
            if (m.threadsSeen !== undefined && m.threadsSeen !== t) process.stderr.write(`  warning: llama.cpp context ran ${m.threadsSeen} threads, asked ${t}\n`);
            bestOf[k]![side] = keepBest(bestOf[k]![side] ?? null, m);
          }
        }
      }
    }
    const lopts = llamaOpts();
    const bpwCell = (d: Dtype, v: Variant) => (d === 'f32' ? '32 / 32' : `${fmt(llamaBits[d]!.bpw, 2)} / ${fmt(skBits.get(bitsKey(d, v))?.bpw ?? NaN, 2)}`);
    const rowName = (d: Dtype, v: Variant) => (d === 'f32' ? v.name.replace(/ (sym|asym) block \d+/, '') : v.name);
    out.push('', `speed: ${modelWhat}; llama.cpp flash attention ${lopts.fa}, ${lopts.kvF32 ? 'F32' : 'F16'} KV cache; CPU = process CPU time / wall time over the timed runs; bits/weight from the stored bytes of every matrix (GGUF tensor sizes; safekeep's codes + scales + zero points)`);
    for (const d of dtypes.filter((x) => x !== 'f32')) {
      const sk = variantsFor(variants, d).map((v) => `${v.quant === 'default' ? `safekeep ${d} (${skBits.get(bitsKey(d, v))?.quant})` : `safekeep ${d} ${v.quant}`} ${fmt(skBits.get(bitsKey(d, v))?.bpw ?? NaN, 3)}`);
      out.push(`bits/weight, ${d}: llama.cpp ${LLAMA_NAME[d]} ${fmt(llamaBits[d]!.bpw, 3)} (${llamaBits[d]!.types}); ${[...new Set(sk)].join('; ')}`);
    }
    out.push('| row | threads | safekeep as | bits/weight (llama / safekeep) | llama.cpp | safekeep | safekeep / llama.cpp | CPU (llama / safekeep) | load (llama / safekeep) |', '| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
    for (const d of dtypes) {
      for (const t of threadsList) {
        for (const v of variantsFor(variants, d)) {
          const { llama: l, [v.name]: s } = bestOf[keyOf(d, t)]!;
          const head = `| ${d} / ${LLAMA_NAME[d]}`;
          const mid = `| ${t} | ${rowName(d, v)} | ${bpwCell(d, v)} |`;
          if (rows.includes('prefill')) out.push(`${head} prefill 1×${PREFILL_T} (tok/s) ${mid} ${fmt(l!.prefillTps, 0)} | ${fmt(s!.prefillTps, 0)} | ${ratio(s!.prefillTps, l!.prefillTps)} | ${fmt(l!.prefillCpu, 2)} / ${fmt(s!.prefillCpu, 2)} | ${l!.prefillLoad} / ${s!.prefillLoad} |`);
          if (rows.includes('decode')) out.push(`${head} decode, prompt ${DECODE_PROMPT} (tok/s; ms/step) ${mid} ${fmt(l!.decodeTps)}; ${fmt(1000 / l!.decodeTps, 2)} | ${fmt(s!.decodeTps)}; ${fmt(1000 / s!.decodeTps, 2)} | ${ratio(s!.decodeTps, l!.decodeTps)} | ${fmt(l!.decodeCpu, 2)} / ${fmt(s!.decodeCpu, 2)} | ${l!.decodeLoad} / ${s!.decodeLoad} |`);
        }
      }
    }
    if (rows.includes('decode') && dtypes.includes('f32') && dtypes.some((d) => d !== 'f32')) {
      out.push('', 'decode speed-up of each width over f32 on its own side (the same run):');
      out.push('| threads | side | q8 / f32 | q4 / f32 |', '| --- | --- | --- | --- |');
      /** decode tok/s of `side` at width d over its f32 twin (the same spin setting) */
      const over = (d: Dtype, t: number, side: string, f32Side: string) => (dtypes.includes(d) ? ratio(bestOf[keyOf(d, t)]![side]?.decodeTps, bestOf[keyOf('f32', t)]![f32Side]?.decodeTps) : '—');
      for (const t of threadsList) {
        out.push(`| ${t} | llama.cpp | ${over('q8', t, 'llama', 'llama')} | ${over('q4', t, 'llama', 'llama')} |`);
        for (const v of variants) {
          const f = variantsFor(variants, 'f32').find((x) => x.spin === v.spin)!.name;
          out.push(`| ${t} | ${v.name} | ${over('q8', t, v.name, f)} | ${over('q4', t, v.name, f)} |`);
        }
      }
    }
    if (threadsList.includes(1)) {
      out.push('', '1 thread by CPU time (least process CPU time per call; the compute itself, which the load hardly moves):');
      out.push('| bits | safekeep as | prefill 1×512, tok per CPU s (llama.cpp / safekeep) | safekeep / llama.cpp | decode CPU ms/step (llama.cpp / safekeep) | safekeep / llama.cpp (speed) |', '| --- | --- | --- | --- | --- | --- |');
      for (const d of dtypes) {
        for (const v of variantsFor(variants, d)) {
          const { llama: l, [v.name]: s } = bestOf[keyOf(d, 1)]!;
          out.push(`| ${d} / ${LLAMA_NAME[d]} | ${rowName(d, v)} | ${fmt(l!.prefillCpuTps ?? NaN, 0)} / ${fmt(s!.prefillCpuTps ?? NaN, 0)} | ${ratio(s!.prefillCpuTps, l!.prefillCpuTps)} | ${fmt(l!.decodeCpuMs ?? NaN, 2)} / ${fmt(s!.decodeCpuMs ?? NaN, 2)} | ${ratio(l!.decodeCpuMs, s!.decodeCpuMs)} |`);
        }
      }
    }
    results.speed = bestOf;
    finishBench(join(here, 'llama-results.json'), results, out, loads);
  } finally {
    if (!keep) rmSync(work, { recursive: true, force: true });
  }
}

await main();
