/**
 * The f16 KV cache (`kvDType: 'f16'`, the GPU devices' default; `--kv-dtype`) on the CPU: the buffers are Uint16Array
 * f16 bits end to end (the engine's step, the scheduler's row buffer, prefix-cache blocks, shared-prefix reuse, packed
 * and chunked prefill), and the graph widens them to f32 for the attention math.
 *
 * Error bound against the f32 path: 2e-3 × max |value|, i.e. 4 f16 unit roundoffs (2⁻¹¹ = 4.9e-4). Each stored key
 * and value is one round-to-nearest-even (relative ≤ 2⁻¹¹); the attention output is a convex combination of the
 * values (error ≤ 2⁻¹¹ · max |v|) plus the scores' perturbation q·δk, and the residual stream adds one such error per
 * layer. Measured on the HF fixtures: llama3 3.8e-4, qwen3 8.0e-4 of max |hidden| (qwen3's q/k norms make larger
 * scores), same greedy ids. Since a step attends to the rounded new slots too, how the tokens are split into steps
 * does not matter beyond f32 summation order: the scheduler (chunked prefill, a shared decode batch, prefix-cache
 * hits) and shared-prefix reuse equal one plain step within 5e-4 of max |value|, about one f16 ulp (2⁻¹¹): the f32
 * path's tests use 1e-5, but here a summation-order difference of ~1e-7 can flip the f16 rounding of a stored key or
 * value, one f16 ulp of that element (measured up to 2.4e-5 downstream here, 1.2e-4 between webgpu and the CPU) —
 * 4× below the f16 KV's own error bound; a misplaced slot moves results by far more.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from '../src/cli/args.ts';
import { engineOptions } from '../src/cli/engine-flags.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine, createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { resolveEngineConfig } from '../src/engine/engine-config.ts';
import { Scheduler } from '../src/engine/run/scheduler.ts';
import type { GenerateOptions, GenerateResult } from '../src/engine/types.ts';
import { isSafekeepError } from '../src/util/errors.ts';
import { SMALL_GQA, tempCache } from './helpers/engine.ts';
import { prompt, rel } from './helpers/scheduler.ts';
import { sharedPath } from './helpers/shared.ts';

const BOUND = 2e-3;
/** a step split differently (chunks, batches, reused prefixes) vs one plain step, f16 KV */
const SPLIT = 5e-4;
const hfRoot = sharedPath('fixtures', 'hf-reference');

for (const tag of ['llama3-tiny-f32', 'qwen3-tiny-f32']) {
  test(`f16 KV vs f32 KV on ${tag}: hidden states and logits within ${BOUND} of max |value|, same greedy ids`, { skip: hfRoot ? false : 'needs ../shared/fixtures/hf-reference (set SAFEKEEP_SHARED)' }, async (t) => {
    const cache = tempCache();
    const inputs = JSON.parse(readFileSync(join(hfRoot!, 'inputs.json'), 'utf8')) as { seqs: number[][]; max_new_tokens: number };
    const model = join(hfRoot!, 'models', tag);
    const f32 = await createEngine(model, { cacheDir: cache.dir, threads: 1, kvDType: 'f32' });
    const f16 = await createEngine(model, { cacheDir: cache.dir, threads: 1, kvDType: 'f16' });
    try {
      assert.equal(f16.emptyCache(1).keys[0]!.type, 'float16');
      const a = await f32.forward(inputs.seqs);
      const b = await f16.forward(inputs.seqs);
      for (let i = 0; i < inputs.seqs.length; i++) {
        const h = rel(b[i]!.hidden, a[i]!.hidden);
        const l = rel(b[i]!.logits, a[i]!.logits);
        t.diagnostic(`seq${i}: hidden ${h.toExponential(2)}, logits ${l.toExponential(2)} of max |value|`);
        assert.ok(h <= BOUND && l <= BOUND, `seq${i}: hidden ${h}, logits ${l}`);
        assert.ok(h > 0, 'the f16 KV rounds something');
      }
      const o: GenerateOptions = { maxNewTokens: inputs.max_new_tokens, stopIds: [], returnStepLogits: true };
      const [ga] = await f32.generate([inputs.seqs[2]!], o);
      const [gb] = await f16.generate([inputs.seqs[2]!], o);
      assert.deepEqual(gb!.generatedIds, ga!.generatedIds);
      assert.ok(rel(gb!.stepLogits!, ga!.stepLogits!) <= BOUND, 'step logits');
    } finally {
      await f32.dispose();
      await f16.dispose();
      cache.cleanup();
    }
  });
}

describe('f16 KV through the scheduler and shared-prefix reuse = one plain step (random llama, GQA)', () => {
  const { family, opts: modelOpts } = SMALL_GQA[0]!;
  let tmp: string;
  let cache: ReturnType<typeof tempCache>;
  let engine: OnnxEngine;
  const V = modelOpts.vocabSize!;
  const d = modelOpts.hiddenSize!;
  before(async () => {
    cache = tempCache();
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-kv16-'));
    await writeRandomCheckpoint(join(tmp, 'm'), family, { seed: 11, ...modelOpts });
    engine = await createEngineFromCheckpoint(await loadCheckpoint(join(tmp, 'm')), { cacheDir: cache.dir, threads: 1, kvDType: 'f16' });
  });
  after(async () => {
    await engine?.dispose();
    cache?.cleanup();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  test('chunked prefill, one decode batch with per-row steering, prefix-cache hits, packed prefill', async () => {
    const steer = { layer: 2, vector: Array.from({ length: d }, (_, i) => Math.sin(i + 1)), alpha: 3 };
    const base: GenerateOptions = { maxNewTokens: 6, stopIds: [], returnStepLogits: true, returnFirstTokenHidden: true };
    const shared = prompt(1, 40, V);
    const calls: [number[], GenerateOptions][] = [
      [prompt(2, 21, V), base], [prompt(3, 9, V), { ...base, steer }], [prompt(4, 3, V), base], [prompt(5, 4, V), base],
      [[...shared, ...prompt(6, 3, V)], base], [[...shared, ...prompt(7, 5, V)], { ...base, steer: { ...steer, positions: 'generated' } }],
    ];
    // each call alone, one plain prefill step and its decode steps
    const alone: GenerateResult[] = [];
    for (const [ids, o] of calls) alone.push((await engine.generate([ids], o))[0]!);
    const sched = new Scheduler(engine, { stepTokens: 8, blockTokens: 4, prefixAdmitAfter: 1 });
    const together = await Promise.all(calls.slice(0, 5).map((c) => sched.submit(...c)));
    const last = await sched.submit(...calls[5]!);
    [...together, last].forEach((r, i) => {
      assert.deepEqual(r.generatedIds, alone[i]!.generatedIds, `call ${i}: ids`);
      assert.ok(rel(r.stepLogits!, alone[i]!.stepLogits!) <= SPLIT, `call ${i}: step logits ${rel(r.stepLogits!, alone[i]!.stepLogits!)}`);
      assert.ok(rel(r.firstTokenHidden!, alone[i]!.firstTokenHidden!) <= SPLIT, `call ${i}: first-token hidden`);
    });
    assert.ok(sched.stats.prefillChunks > calls.length, 'chunked prefill');
    assert.ok(sched.stats.peakBatch >= 2, 'a shared decode batch');
    // short prompts arriving together: prefilled as the rows of one (left-padded) step
    const packer = new Scheduler(engine, { blockTokens: 4 });
    const packed = await Promise.all([calls[2]!, calls[3]!, calls[1]!].map((c) => packer.submit(...c)));
    assert.ok(packer.stats.packedSteps >= 1, 'a packed prefill step');
    packed.forEach((r, i) => {
      const want = alone[[2, 3, 1][i]!]!;
      assert.deepEqual(r.generatedIds, want.generatedIds, `packed ${i}: ids`);
      assert.ok(rel(r.stepLogits!, want.stepLogits!) <= SPLIT, `packed ${i}: step logits`);
    });
    assert.ok(sched.prefixStore!.stats.hit >= 40, `prefix-cache hits: ${sched.prefixStore!.stats.hit}`);
    assert.equal(sched.prefixStore!.blockBytes, 2 * modelOpts.numLayers! * modelOpts.numKvHeads! * 4 * (d / modelOpts.numHeads!) * 2, 'f16 blocks: 2 bytes per element');
  });

  test('forwardShared (prefix KV reused across prompts) = forward', async () => {
    const shared = prompt(8, 30, V);
    const prompts = [[...shared, ...prompt(9, 4, V)], [...shared, ...prompt(10, 7, V)], prompt(11, 12, V)];
    const plain = await engine.forward(prompts, { hiddenAt: 'last', logitsAt: 'last' });
    const reused = await engine.forwardShared(prompts, { hiddenAt: 'last', logitsAt: 'last' });
    assert.ok(reused.stats.computedTokens < prompts.reduce((s, p) => s + p.length, 0), 'a prefix was reused');
    reused.results.forEach((r, i) => {
      assert.ok(rel(r.hidden, plain[i]!.hidden) <= SPLIT, `prompt ${i}: hidden ${rel(r.hidden, plain[i]!.hidden)}`);
      assert.ok(rel(r.logits, plain[i]!.logits) <= SPLIT, `prompt ${i}: logits`);
    });
  });

  test('a bad kvDType: one SafekeepError', async () => {
    await assert.rejects(createEngine(join(tmp, 'm'), { cacheDir: cache.dir, kvDType: 'bf16' as 'f16' }), (e) => isSafekeepError(e) && /kvDType must be one of f32, f16/.test((e as Error).message));
  });
});

test('CLI: --kv-dtype f32|f16, the KV follows the compute dtype (webgpu: f16 weights and KV by default; --dtype f32 an f32 KV), bad values refused by name', async () => {
  const flags = { values: ['dtype', 'device', 'kv-dtype', 'threads', 'model'] as string[] };
  const opts = (argv: string[]) => engineOptions(parseArgs(argv, flags));
  assert.equal(opts(['--device', 'webgpu']).dtype, 'f16');
  assert.equal(opts(['--device', 'webgpu']).kvDType, undefined, 'the engine picks the device default');
  assert.equal(resolveEngineConfig({ device: 'webgpu' }).kvDType, 'f16');
  assert.equal(resolveEngineConfig({ device: 'cuda' }).kvDType, 'f16');
  assert.equal(resolveEngineConfig({}).kvDType, 'f32');
  // --dtype f32 on a GPU device: an f32 KV unless asked (the f16 KV put webgpu f32 3.5e-3 off HF)
  assert.equal(resolveEngineConfig({ device: 'webgpu', dtype: 'f32' }).kvDType, 'f32');
  assert.equal(resolveEngineConfig({ device: 'cuda', dtype: 'f32' }).kvDType, 'f32');
  for (const dtype of ['bf16', 'q8', 'q4'] as const) assert.equal(resolveEngineConfig({ device: 'webgpu', dtype }).kvDType, 'f32', dtype);
  // the CPU's f16 computes f32 math on f16-rounded weights: its KV stays f32; an f16 KV is an explicit choice
  assert.equal(resolveEngineConfig({ dtype: 'f16' }).kvDType, 'f32');
  assert.equal(resolveEngineConfig({ device: 'webgpu', dtype: 'f32', kvDType: 'f16' }).kvDType, 'f16');
  assert.equal(resolveEngineConfig({ device: 'webgpu' }).attention, 'matmul');
  assert.equal(opts(['--kv-dtype', 'f16']).kvDType, 'f16');
  assert.equal(opts(['--device', 'webgpu', '--kv-dtype', 'f32']).kvDType, 'f32');
  assert.throws(() => opts(['--kv-dtype', 'bf16']), /--kv-dtype must be one of f32, f16, got 'bf16'/);
  assert.throws(() => opts(['--device', 'metal']), /--device must be one of cpu, cuda, webgpu, got 'metal'/);
  assert.throws(() => resolveEngineConfig({ device: 'webgpu', attention: 'mha' }), (e) => isSafekeepError(e) && /'mha' is refused on webgpu/.test((e as Error).message));
});

test('an f16 KV is widened one layer at a time: each layer\'s past Casts run after the previous layer\'s attention (onnxruntime profile of a decode step)', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-kv16-order-'));
  const cache = tempCache();
  try {
    await writeRandomCheckpoint(join(tmp, 'm'), 'llama', { numLayers: 4, hiddenSize: 48, numHeads: 6, numKvHeads: 2, intermediateSize: 80, vocabSize: 97 });
    const prof = join(tmp, 'prof');
    const e = await createEngineFromCheckpoint(await loadCheckpoint(join(tmp, 'm')), { kvDType: 'f16', threads: 1, cacheDir: cache.dir, quiet: true, profile: prof });
    await e.generate([prompt(9, 12, 97)], { maxNewTokens: 3, stopIds: [] });
    await e.dispose();
    const file = readdirSync(tmp).find((f) => f.startsWith('prof'))!;
    const names = (JSON.parse(readFileSync(join(tmp, file), 'utf8')) as { name: string; cat: string }[])
      .filter((x) => x.cat === 'Node' && x.name.endsWith('_kernel_time')).map((x) => x.name.replace('_kernel_time', ''));
    // the last run (a decode step): every layer's widening Casts after the attention of the layer before
    const lastRun = names.slice(names.lastIndexOf('node/layers.0/past_k') - 200);
    for (let l = 1; l < 4; l++) {
      const prevAttn = lastRun.lastIndexOf(`node/layers.${l - 1}/attn`);
      for (const kv of ['past_k', 'past_v']) {
        const cast = lastRun.lastIndexOf(`node/layers.${l}/${kv}`);
        assert.ok(prevAttn >= 0 && cast > prevAttn, `layer ${l} ${kv} at ${cast}, layer ${l - 1} attention at ${prevAttn}`);
      }
    }
  } finally {
    cache.cleanup();
    rmSync(tmp, { recursive: true, force: true });
  }
});
