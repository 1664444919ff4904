/**
 * `--dtype f16` (precision.ts) on the CPU provider. There onnxruntime has no f16 Gemm and runs the f16 graph as f32
 * math on the f16-rounded weights (activation casts dropped, see precision.ts), so what is checkable here is:
 *   1. exactly which tensors are rounded: an F32 checkpoint under f16 equals the Float64 oracle on a MIXED
 *      checkpoint whose linear weights (q/k/v/o, gate/up/down, lm_head — also a tied embedding as lm_head) are the
 *      same draws stored as F16 (torch `.to(float16)`, round-to-nearest-even) while embeddings, norms and biases
 *      stay F32 (≤ 1e-5 × max|value|) — and it differs from the all-F32 oracle by far more than that;
 *   2. F16 and BF16 storage under f16: the stored values exactly (≤ 1e-5 × max|value|);
 *   3. the graph: every linear layer reads a 16-bit weight and 16-bit activations and hands f32 back (the GPU holds
 *      2 bytes per weight); bf16w the same with bf16; f32 has no 16-bit tensor at all;
 *   4. Hugging Face's own f32 outputs (../shared fixtures) within the f16 weight-rounding error, same greedy ids.
 *   5. `f16sim`, the CPU emulation of what a GPU computes under f16 (activations rounded to f16 before and after each
 *      linear): one linear layer equals round16(Σ round16(x)·round16(w)) computed in f64 (≤ 1 f16 ulp), and on
 *      whole models the error vs the oracle is that of f16 activations — visible (> 1e-5) and inside the 1e-2 bound
 *      that check:gpu applies to cuda f16, with the same greedy ids.
 * The f16 activation rounding on a real GPU is measured by `npm run check:gpu` there.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import onnxProto from 'onnx-proto';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Checkpoint, Family, TensorEntry } from '../src/checkpoint/types.ts';
import { engineOptions } from '../src/cli/engine-flags.ts';
import { createEngine, createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { buildModelGraph } from '../src/engine/graph/decoder.ts';
import * as ort from 'onnxruntime-node';
import { GraphBuilder } from '../src/engine/graph/onnx/builder.ts';
import { DataType } from '../src/engine/graph/onnx/proto.ts';
import { castStored, linearAs } from '../src/engine/graph/precision.ts';
import { f16BitsToF32, f32ToF16Bits } from '../src/checkpoint/dtype.ts';
import { linear, referenceForward, referenceGenerate, rmsNorm } from '../src/engine/reference.ts';
import { resolveWeightFiles } from '../src/engine/runtime/weight-files.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { parseArgs } from '../src/cli/args.ts';
import { TINY_MODELS, readAllF32, tempCache } from './helpers/engine.ts';
import { sharedPath } from './helpers/shared.ts';

/** max |a − b| / max |b| */
function relDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let d = 0;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const x = Math.abs(a[i]! - b[i]!);
    d = Number.isNaN(x) ? Infinity : Math.max(d, x);
    m = Math.max(m, Math.abs(b[i]!));
  }
  return d / m;
}

const EXACT = 1e-5;
const LINEAR = /(_proj\.weight|^lm_head\.weight)$/;

const CASES = (['llama', 'qwen2', 'qwen3'] as const).map((family) => ({ family, opts: TINY_MODELS[family] }));

function prompts(vocab: number): number[][] {
  let s = 4242;
  const next = () => { s = (s * 1103515245 + 12345) % 2147483648; return 3 + (s % (vocab - 3)); };
  return [9, 4, 13].map((n) => Array.from({ length: n }, next));
}

/** the F32 checkpoint with every linear weight taken from the F16-stored draws (an object for the oracle only) */
function mixed(f32: Checkpoint, f16: Checkpoint): Checkpoint {
  const tensors = new Map<string, TensorEntry>();
  for (const [name, e] of f32.tensors) tensors.set(name, LINEAR.test(name) ? f16.tensors.get(name)! : e);
  return { ...f32, tensors };
}

/** oracle logits [T, V] from oracle hidden[L] with the lm_head weight given (tied models: the f16-rounded embedding) */
function headLogits(ck: Checkpoint, hidden: Float64Array, T: number, head: Float32Array): Float64Array {
  const { numLayers: L, hiddenSize: d, vocabSize: V, rmsNormEps } = ck.config;
  const norm = Float64Array.from(readTensorF32(ck.tensors.get('model.norm.weight')!));
  const W = Float64Array.from(head);
  const out = new Float64Array(T * V);
  for (let t = 0; t < T; t++) out.set(linear(W, rmsNorm(hidden.subarray((L * T + t) * d, (L * T + t + 1) * d), norm, rmsNormEps)), t * V);
  return out;
}

for (const { family, opts } of CASES) {
  describe(`--dtype f16 vs the Float64 oracle: ${family}`, () => {
    let tmp: string;
    let cache: ReturnType<typeof tempCache>;
    let ck: Record<'F32' | 'F16' | 'BF16', Checkpoint>;
    let mix: Checkpoint;
    let seqs: number[][];
    let steer: { layer: number; vector: number[]; alpha: number };
    const engines: OnnxEngine[] = [];

    before(async () => {
      cache = tempCache();
      tmp = mkdtempSync(join(tmpdir(), `safekeep-f16-${family}-`));
      const loaded: Partial<Record<'F32' | 'F16' | 'BF16', Checkpoint>> = {};
      for (const dt of ['F32', 'F16', 'BF16'] as const) {
        await writeRandomCheckpoint(join(tmp, dt), family, { ...opts, seed: 11, dtype: dt });
        loaded[dt] = await loadCheckpoint(join(tmp, dt));
      }
      ck = loaded as Record<'F32' | 'F16' | 'BF16', Checkpoint>;
      mix = mixed(ck.F32, ck.F16);
      seqs = prompts(ck.F32.config.vocabSize);
      steer = { layer: 1, vector: Array.from({ length: ck.F32.config.hiddenSize }, (_, i) => Math.cos(i + 2)), alpha: 2 };
    });
    after(async () => {
      for (const e of engines) await e.dispose();
      cache?.cleanup();
      if (tmp) rmSync(tmp, { recursive: true, force: true });
    });

    test('F32 checkpoint: linear weights (only) rounded to f16 — equals the mixed oracle, differs from the f32 one', async () => {
      const engine = await createEngineFromCheckpoint(ck.F32, { cacheDir: cache.dir, dtype: 'f16', threads: 2 });
      engines.push(engine);
      const tied = ck.F32.config.tieWordEmbeddings;
      const head16 = readTensorF32(ck.F16.tensors.get(tied ? 'model.embed_tokens.weight' : 'lm_head.weight')!);
      let gap = Infinity;
      for (const s of [undefined, steer]) {
        const out = await engine.forward(seqs, { steer: s });
        for (let i = 0; i < seqs.length; i++) {
          const T = seqs[i]!.length;
          const ref = referenceForward(mix, seqs[i]!, { steer: s });
          const logits = headLogits(ck.F32, ref.hidden, T, head16);
          const hd = relDiff(out[i]!.hidden, ref.hidden);
          const ld = relDiff(out[i]!.logits, logits);
          assert.ok(hd <= EXACT, `seq ${i} hidden vs mixed oracle: ${hd}`);
          assert.ok(ld <= EXACT, `seq ${i} logits vs mixed oracle: ${ld}`);
          const full = referenceForward(ck.F32, seqs[i]!, { steer: s });
          gap = Math.min(gap, relDiff(out[i]!.hidden, full.hidden), relDiff(out[i]!.logits, full.logits));
        }
      }
      assert.ok(gap > 20 * EXACT, `the f16 rounding is visible against the all-f32 oracle (smallest gap ${gap})`);
      if (!tied) {
        // greedy decode with the KV cache against the oracle on the same rounded weights
        for (const s of [undefined, steer]) {
          const gen = await engine.generate(seqs, { maxNewTokens: 5, stopIds: [], steer: s, returnStepLogits: true, returnFirstTokenHidden: true });
          for (let i = 0; i < seqs.length; i++) {
            const ref = referenceGenerate(mix, seqs[i]!, { maxNewTokens: 5, stopIds: [], steer: s });
            assert.deepEqual(gen[i]!.generatedIds, ref.generatedIds, `seq ${i} greedy ids`);
            assert.ok(relDiff(gen[i]!.stepLogits!, ref.stepLogits) <= EXACT, `seq ${i} step logits`);
            assert.ok(relDiff(gen[i]!.firstTokenHidden!, ref.firstTokenHidden!) <= EXACT, `seq ${i} first token hidden`);
          }
        }
      }
    });

    for (const storage of ['F16', 'BF16'] as const) {
      test(`${storage} checkpoint: the stored values exactly`, async () => {
        const engine = await createEngineFromCheckpoint(ck[storage], { cacheDir: cache.dir, dtype: 'f16', threads: 2 });
        engines.push(engine);
        const out = await engine.forward(seqs, { steer });
        for (let i = 0; i < seqs.length; i++) {
          const ref = referenceForward(ck[storage], seqs[i]!, { steer });
          assert.ok(relDiff(out[i]!.hidden, ref.hidden) <= EXACT, `seq ${i} hidden ${relDiff(out[i]!.hidden, ref.hidden)}`);
          assert.ok(relDiff(out[i]!.logits, ref.logits) <= EXACT, `seq ${i} logits ${relDiff(out[i]!.logits, ref.logits)}`);
        }
      });
    }
  });
}

// ---- f16sim: the GPU's f16 numerics emulated on the CPU -------------------------------------------------------------

describe('f16sim (CPU emulation of f16 on a GPU)', () => {
  const r16 = (v: number): number => f16BitsToF32(f32ToF16Bits(Float32Array.of(v)))[0]!;
  /** spacing of f16 numbers at |v| */
  const ulp16 = (v: number): number => Math.max(2 ** -24, 2 ** (Math.floor(Math.log2(Math.max(Math.abs(v), 2 ** -14))) - 10));

  test('one linear layer: round16(Σ round16(x)·round16(w)) within 1 f16 ulp, bias added in f32', async () => {
    const M = 6, K = 300, N = 20;
    let s = 99;
    const rnd = () => { s = (s * 1103515245 + 12345) % 2147483648; return s / 2147483648 - 0.5; };
    const W = Float32Array.from({ length: N * K }, () => rnd() * 0.2);
    const X = Float32Array.from({ length: M * K }, () => rnd() * 4);
    const B = Float32Array.from({ length: N }, () => rnd());
    const g = new GraphBuilder();
    const x = g.input('x', DataType.FLOAT, [M, K]);
    const w = castStored(g, g.f32(W, [N, K]), 'F32', 'f16sim', 'w');
    g.output('y', linearAs(g, x, w, 'f16sim', 'lin', g.f32(B)), DataType.FLOAT, [M, N]);
    const session = await ort.InferenceSession.create(g.encode('t'), { graphOptimizationLevel: 'all', logSeverityLevel: 3 });
    const y = (await session.run({ x: new ort.Tensor('float32', X, [M, K]) })).y!.data as Float32Array;
    let exact = 0;
    for (let i = 0; i < M; i++) {
      for (let j = 0; j < N; j++) {
        let acc = 0;
        for (let k = 0; k < K; k++) acc += r16(X[i * K + k]!) * r16(W[j * K + k]!);
        const want = Math.fround(r16(acc) + B[j]!);
        const got = y[i * N + j]!;
        assert.ok(Math.abs(got - want) <= ulp16(acc) * 1.0001, `[${i},${j}] ${got} vs ${want} (ulp ${ulp16(acc)})`);
        if (got === want) exact++;
      }
    }
    assert.ok(exact >= 0.9 * M * N, `${exact} of ${M * N} bit-exact`);
  });

  for (const family of ['llama', 'qwen3'] as const) {
    test(`${family}: activation rounding visible, within the check:gpu bound (1e-2), same greedy ids`, async (t) => {
      const cache = tempCache();
      const tmp = mkdtempSync(join(tmpdir(), `safekeep-f16sim-${family}-`));
      try {
        const opts = CASES.find((c) => c.family === family)!.opts;
        // BF16 storage: every weight is exactly an f16 too, so all the error is the activation rounding
        await writeRandomCheckpoint(tmp, family, { ...opts, seed: 11, dtype: 'BF16' });
        const ck = await loadCheckpoint(tmp);
        const engine = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, dtype: 'f16sim', threads: 2 });
        try {
          const seqs = prompts(ck.config.vocabSize);
          const out = await engine.forward(seqs);
          let worst = 0;
          let least = Infinity;
          seqs.forEach((s, i) => {
            const ref = referenceForward(ck, s);
            const e = Math.max(relDiff(out[i]!.hidden, ref.hidden), relDiff(out[i]!.logits, ref.logits));
            worst = Math.max(worst, e);
            least = Math.min(least, e);
          });
          t.diagnostic(`f16sim vs Float64 oracle: ${least.toExponential(2)}–${worst.toExponential(2)} × max|value|`);
          assert.ok(least > 20 * EXACT, `activation rounding visible (${least})`);
          assert.ok(worst <= 1e-2, `within the check:gpu bound (${worst})`);
          const gen = await engine.generate(seqs, { maxNewTokens: 6, stopIds: [] });
          seqs.forEach((s, i) => assert.deepEqual(gen[i]!.generatedIds, referenceGenerate(ck, s, { maxNewTokens: 6, stopIds: [] }).generatedIds));
        } finally {
          await engine.dispose();
        }
      } finally {
        cache.cleanup();
        rmSync(tmp, { recursive: true, force: true });
      }
    });
  }
});

// ---- the graph itself ---------------------------------------------------------------------------------------------

interface PNode { opType: string; input: string[]; output: string[]; attribute: { name: string; i?: number | { toNumber(): number } }[] }
interface PInit { name: string; dataType: number }
const decode = (bytes: Uint8Array): { node: PNode[]; initializer: PInit[] } =>
  (onnxProto as unknown as { onnx: { ModelProto: { decode(b: Uint8Array): { graph: { node: PNode[]; initializer: PInit[] } } } } }).onnx.ModelProto.decode(bytes).graph;
const castTo = (n: PNode): number => {
  const v = n.attribute.find((a) => a.name === 'to')?.i;
  return typeof v === 'number' ? v : v ? v.toNumber() : -1;
};

describe('the 16-bit linear graph', () => {
  let tmp: string;
  let ckpt: Checkpoint;
  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-f16-graph-'));
    await writeRandomCheckpoint(tmp, 'qwen2', { seed: 3, numLayers: 2, hiddenSize: 32, numHeads: 4, numKvHeads: 2, intermediateSize: 64, vocabSize: 89, tieWordEmbeddings: true, dtype: 'BF16' });
    ckpt = await loadCheckpoint(tmp);
  });
  after(() => { if (tmp) rmSync(tmp, { recursive: true, force: true }); });

  const graphOf = (dtype: 'f32' | 'f16' | 'bf16w', fused: boolean) => {
    const { realFiles } = resolveWeightFiles(ckpt);
    return decode(buildModelGraph(ckpt, { dtype, attention: 'mha', fuse: fused, quant: null }, realFiles));
  };

  for (const [dtype, T, op] of [['f16', DataType.FLOAT16, 'Gemm'], ['bf16w', DataType.BFLOAT16, 'MatMul']] as const) {
    for (const fused of [false, true]) {
      test(`${dtype}${fused ? ', fused q/k/v + gate/up' : ''}: every linear reads 16-bit weights and activations, returns f32`, () => {
        const g = graphOf(dtype, fused);
        const producer = new Map<string, PNode>();
        const consumers = new Map<string, PNode[]>();
        for (const n of g.node) {
          for (const o of n.output) producer.set(o, n);
          for (const i of n.input) consumers.set(i, [...(consumers.get(i) ?? []), n]);
        }
        const inits = new Map(g.initializer.map((i) => [i.name, i.dataType]));
        /** element type of a weight-side value: follow Casts / Concat / Transpose back to initializers */
        const typeOf = (v: string): number => {
          if (inits.has(v)) return inits.get(v)!;
          const p = producer.get(v);
          assert.ok(p, `${v} has a producer`);
          if (p.opType === 'Cast') return castTo(p);
          if (p.opType === 'Concat' || p.opType === 'Transpose') {
            const ts = new Set(p.input.map(typeOf));
            assert.equal(ts.size, 1, `${p.opType} of one type`);
            return [...ts][0]!;
          }
          throw new Error(`unexpected ${p.opType} on the weight side of a linear`);
        };
        // the intervention's projection (graph/intervene.ts: two Gemms per hidden[l], value − h·r̂ then + delta·r̂) works on
        // the step's inputs, not a linear layer's weights
        const projections = g.node.filter((n) => n.opType === 'Gemm' && /to_value|projected/.test(n.output[0]!));
        assert.equal(projections.length, 2 * (ckpt.config.numLayers + 1), 'two projection Gemms per hidden state');
        const linears = g.node.filter((n) => (n.opType === 'Gemm' || n.opType === 'MatMul') && !projections.includes(n));
        const L = ckpt.config.numLayers;
        // per layer q,k,v (or qkv), o, gate,up (or gate_up), down; + lm_head
        assert.equal(linears.length, L * (fused ? 4 : 7) + 1, 'linear count');
        for (const n of linears) {
          assert.equal(n.opType, op);
          const x = producer.get(n.input[0]!);
          assert.ok(x && x.opType === 'Cast' && castTo(x) === T, `${n.output[0]} activation cast to ${T}`);
          assert.equal(typeOf(n.input[1]!), T, `${n.output[0]} weight type`);
          assert.equal(n.input.length, 2, `${n.output[0]}: bias/steering added in f32 after, not inside`);
          const outs = consumers.get(n.output[0]!) ?? [];
          assert.ok(outs.length === 1 && outs[0]!.opType === 'Cast' && castTo(outs[0]!) === DataType.FLOAT, `${n.output[0]} cast back to f32`);
        }
        // the 16-bit weights come from BF16 storage through exactly one rounding (bf16 → f32 → T), or none
        const sixteen = g.node.filter((n) => n.opType === 'Cast' && castTo(n) === T && inits.has(n.input[0]!));
        assert.equal(sixteen.length, 0, 'no direct BF16 → T cast on an initializer (always through exact f32)');
      });
    }
  }

  test('f32: no 16-bit values in the graph besides the BF16 initializers, Gemm straight on f32 weights', () => {
    const g = graphOf('f32', true);
    assert.ok(!g.node.some((n) => n.opType === 'Cast' && (castTo(n) === DataType.FLOAT16 || castTo(n) === DataType.BFLOAT16)));
    // 4 fused linears per layer + lm_head, and the two projection Gemms per hidden state (graph/intervene.ts)
    assert.equal(g.node.filter((n) => n.opType === 'Gemm').length, ckpt.config.numLayers * 4 + 1 + 2 * (ckpt.config.numLayers + 1));
  });

  test('bf16w on the CPU: one clear error; --device cuda defaults to f16, cpu to f32', async () => {
    const cache = tempCache();
    try {
      await assert.rejects(createEngineFromCheckpoint(ckpt, { cacheDir: cache.dir, dtype: 'bf16w', device: 'cpu', threads: 1 }),
        (e: unknown) => e instanceof SafekeepError && /--dtype bf16w runs only with --device cuda/.test(e.message));
    } finally {
      cache.cleanup();
    }
    const flags = { values: ['dtype', 'device', 'threads', 'model'] as string[] };
    assert.equal(engineOptions(parseArgs(['--device', 'cuda'], flags)).dtype, 'f16');
    assert.equal(engineOptions(parseArgs(['--device', 'cpu'], flags)).dtype, 'f32');
    assert.equal(engineOptions(parseArgs([], flags)).dtype, 'f32');
    assert.equal(engineOptions(parseArgs(['--device', 'cuda', '--dtype', 'f32'], flags)).dtype, 'f32');
    assert.throws(() => engineOptions(parseArgs(['--dtype', 'fp8'], flags)), /--dtype must be one of f32, bf16, f16, bf16w, q8, q4/);
  });
});

// ---- Hugging Face's own outputs -----------------------------------------------------------------------------------

const hf = sharedPath('fixtures', 'hf-reference');
for (const tag of ['llama3-tiny-f32', 'qwen3-tiny-f32']) {
  describe(`--dtype f16 vs HF transformers (f32): ${tag}`, { skip: hf ? false : 'needs ../shared/fixtures/hf-reference (set SAFEKEEP_SHARED)' }, () => {
    let engine: OnnxEngine;
    let cache: ReturnType<typeof tempCache>;
    before(async () => {
      cache = tempCache();
      engine = await createEngine(join(hf!, 'models', tag), { cacheDir: cache.dir, dtype: 'f16', threads: 2 });
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
    });

    test('hidden states and logits within the f16 weight rounding; same greedy ids', async (t) => {
      const inputs = JSON.parse(readFileSync(join(hf!, 'inputs.json'), 'utf8')) as { seqs: number[][]; max_new_tokens: number };
      const meta = JSON.parse(readFileSync(join(hf!, 'refs', `${tag}.json`), 'utf8')) as { gen: { new_ids: number[] } };
      const refs = readAllF32(join(hf!, 'refs', `${tag}.safetensors`));
      const d = engine.dModel;
      let worst = 0;
      for (let i = 0; i < inputs.seqs.length; i++) {
        const [r] = await engine.forward([inputs.seqs[i]!]);
        const T = r!.length;
        const expected = new Float32Array((engine.numLayers + 1) * T * d);
        expected.set(refs.get(`seq${i}.hidden_states`)!.data.subarray(0, T * d), 0);
        expected.set(refs.get(`seq${i}.layer_outputs`)!.data, T * d);
        worst = Math.max(worst, relDiff(r!.hidden, expected), relDiff(r!.logits, refs.get(`seq${i}.logits`)!.data));
      }
      t.diagnostic(`f16 vs HF f32: max |Δ| / max |value| = ${worst.toExponential(2)}`);
      // f16 weights: relative rounding ≤ 2^-11 per weight; measured 9.4e-4 (llama3) and 1.5e-3 (qwen3); f32 gives ~1e-6
      assert.ok(worst <= 3e-3, `f16 vs HF ${worst}`);
      assert.ok(worst > 1e-5, `the f16 rounding is visible (${worst})`);
      const [g] = await engine.generate([inputs.seqs[0]!], { maxNewTokens: inputs.max_new_tokens, stopIds: [] });
      assert.deepEqual(g!.generatedIds, meta.gen.new_ids);
    });
  });
}
