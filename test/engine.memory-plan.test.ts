/**
 * The memory planner (src/engine/runtime/memory.ts) against hand-computed values: Llama-3.1-8B's parameter count (8.03 B,
 * from its published shape) and KV bytes per token; q4/q8 store bytes of a 4096×4096 linear by hand and against a
 * real quantized store written by quant-store.ts; one step's bytes term by term on a tiny config; the plan's
 * arithmetic (base, prefix share, step bytes, largest batch and chunk that fit); sizes like 6GB/6GiB/500MB; and the
 * clear errors for a budget below the weights, through the API and through the CLI (exit 2, one line).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import type { ModelConfig } from '../src/checkpoint/types.ts';
import {
  ACTIVATION_UNITS, ARENA_SLACK, chunkTokens, kvBytesPerToken, linearParams, normParams, otherParams, parseBytes, planMemory, PREFIX_CACHE_MAX,
  DEFAULT_QUANT_LAYOUT, fitsStep, PREFIX_CACHE_SHARE, quantLinearBytes, quantStoreBytes, RUNTIME_BYTES, SCORE_COPIES, STEP_FIXED, stepBytes, WEIGHT_PEAK, weightBytes,
} from '../src/engine/runtime/memory.ts';
import { quantizedWeights } from '../src/engine/runtime/quant-store.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { repoRoot } from './helpers/shared.ts';

const base: Omit<ModelConfig, 'numLayers' | 'hiddenSize' | 'intermediateSize' | 'numHeads' | 'numKvHeads' | 'headDim' | 'vocabSize'> = {
  family: 'llama', rmsNormEps: 1e-5, ropeTheta: 500000, rope: { type: 'default' }, maxPositionEmbeddings: 131072,
  tieWordEmbeddings: false, qkvBias: false, qkNorm: false, bosTokenId: 1, eosTokenIds: [2], padTokenId: null,
  attentionWindows: [], configKeys: { read: [], ignored: [] },
};
/** Llama-3.1-8B (config.json of meta-llama/Llama-3.1-8B) */
const LLAMA8B: ModelConfig = { ...base, numLayers: 32, hiddenSize: 4096, intermediateSize: 14336, numHeads: 32, numKvHeads: 8, headDim: 128, vocabSize: 128256 };
/** a config small enough to count by hand */
const TINY: ModelConfig = { ...base, numLayers: 2, hiddenSize: 8, intermediateSize: 16, numHeads: 2, numKvHeads: 1, headDim: 4, vocabSize: 10 };

describe('memory model arithmetic', () => {
  test('Llama-3.1-8B: 8,030,261,248 parameters, 256 KiB of f32 KV per token', () => {
    // per layer: q 4096², k and v 1024·4096 each, o 4096², gate/up/down 3·14336·4096, two norms; embed + lm_head; final norm
    const perLayer = 4096 * 4096 + 2 * 1024 * 4096 + 4096 * 4096 + 3 * 14336 * 4096;
    assert.equal(linearParams(LLAMA8B), 32 * perLayer + 128256 * 4096);
    assert.equal(otherParams(LLAMA8B), 32 * 2 * 4096 + 4096 + 128256 * 4096);
    assert.equal(linearParams(LLAMA8B) + otherParams(LLAMA8B), 8_030_261_248);
    assert.equal(kvBytesPerToken(LLAMA8B), 2 * 32 * 8 * 128 * 4);
    assert.equal(kvBytesPerToken(LLAMA8B), 262_144);
    assert.equal(kvBytesPerToken(LLAMA8B, 2), 131_072, 'an f16 KV: 2 bytes per element');
  });

  test('an f16 KV is counted at 2 bytes: the past and present KV terms halve, the plan fits a longer prompt', () => {
    const shape = { batch: 2, width: 1, past: 1000, hidden: 2, logits: 2, present: true };
    const kv32 = stepBytes(LLAMA8B, shape);
    const kv16 = stepBytes(LLAMA8B, { ...shape, kvElement: 2 });
    const S = 1001;
    assert.equal(kv32 - kv16, (2 * 1000 + 2 * 2 * S + 2 * 1) * kvBytesPerToken(LLAMA8B, 2));
    const budget = RUNTIME_BYTES + weightBytes(LLAMA8B, 'q4') + 2 ** 30;
    const p32 = planMemory(LLAMA8B, 'q4', budget);
    const p16 = planMemory(LLAMA8B, 'q4', budget, { kvElement: 2 });
    assert.equal(p32.kvElement, 4);
    assert.equal(p16.kvElement, 2);
    const out = { hiddenPerToken: false, logitsPerToken: false };
    // a prompt whose f32 KV alone is too big for the step budget fits with its KV in f16
    const n = 1500;
    assert.throws(() => chunkTokens(LLAMA8B, p32, n, 0, out), /KV cache alone is 375 MiB/);
    assert.ok(chunkTokens(LLAMA8B, p16, n, 0, out) >= 1);
    assert.equal(fitsStep(LLAMA8B, p16, shape), stepBytes(LLAMA8B, { ...shape, kvElement: 2 }) <= p16.stepBytes);
  });

  test('q4/q8 store bytes of a 4096×4096 linear: codes + f32 block scales + packed zero points', () => {
    // q4: 4096·4096/2 codes + 4096·128 scales·4 + 4096·(128·4/8) zero points
    assert.equal(quantLinearBytes([4096, 4096], 4), 8_388_608 + 2_097_152 + 262_144);
    assert.equal(quantLinearBytes([4096, 4096], 4, false), 8_388_608 + 2_097_152);
    assert.equal(quantLinearBytes([4096, 4096], 8), 16_777_216 + 2_097_152 + 524_288);
    // K not a multiple of 32: blocks are padded (80 → 3 blocks of 32)
    assert.equal(quantLinearBytes([10, 80], 4), 10 * 3 * 16 + 10 * 3 * 4 + 10 * 2);
  });

  test('weights: f32 = WEIGHT_PEAK.f32 × linear f32 bytes + norms and embedding in storage (no embedding when the host reads its rows); BF16 storage adds its pages; q4 = WEIGHT_PEAK.quant × store', () => {
    const lin = linearParams(TINY);
    const other = normParams(TINY) + 10 * 8; // norms + the embedding's pages (a Gather on the mapped file)
    assert.equal(normParams(TINY), otherParams(TINY) - 10 * 8);
    assert.equal(normParams(TINY), 2 * 2 * 8 + 8);
    assert.equal(weightBytes(TINY, 'f32'), WEIGHT_PEAK.f32 * lin * 4 + other * 4);
    assert.equal(weightBytes(TINY, 'f32', { storage: 'BF16' }), WEIGHT_PEAK.f32 * lin * 4 + lin * 2 + other * 2);
    assert.equal(weightBytes(TINY, 'f32', { lowMemory: true }), WEIGHT_PEAK.lowMemory * lin * 4 + other * 4);
    assert.equal(weightBytes(TINY, 'q4'), WEIGHT_PEAK.quant * quantStoreBytes(TINY, 4) + other * 4);
    // rows read by the host (the CPU's default): the table is never mapped, only the norms stay
    assert.equal(weightBytes(TINY, 'f32', { hostEmbeddings: true }), WEIGHT_PEAK.f32 * lin * 4 + normParams(TINY) * 4);
    assert.equal(weightBytes(TINY, 'q4', { hostEmbeddings: true }), WEIGHT_PEAK.quant * quantStoreBytes(TINY, 4) + normParams(TINY) * 4);
  });

  test('one step, term by term (B 2, T 3, P 5, 2 hidden rows, 1 logit row)', () => {
    const u = ACTIVATION_UNITS;
    const perToken = 4 * (u.residual * 8 + u.qkv * (2 + 2 * 1) * 4 + u.mlp * 16);
    const S = 8;
    const common = 6 * perToken + 2 * 3 * S * 4 /* bias */ + 2 * 2 * 1 * S * 4 * 4 /* this layer's K, V */;
    const kv = 2 * 2 * 1 * 4 * 4;
    const tail = 2 * 5 * kv /* past */ + 3 * 3 * 2 * 8 * 4 /* hidden */ + 2 * 1 * 10 * 4 /* logits */;
    const shape = { batch: 2, width: 3, past: 5, hidden: 2, logits: 1 };
    const scoresMatmul = SCORE_COPIES.matmul * 2 * 2 * 3 * S * 4;
    assert.ok(Math.abs(stepBytes(TINY, shape, 'matmul') - (STEP_FIXED + ARENA_SLACK * (common + scoresMatmul) + tail)) < 1e-6);
    const scoresMha = SCORE_COPIES.mha * 2 * 2 * 3 * S * 4 + 2 * 2 * 2 * S * 4 * 4; // + K/V repeated per query head
    assert.ok(Math.abs(stepBytes(TINY, shape, 'mha') - (STEP_FIXED + ARENA_SLACK * (common + scoresMha) + tail)) < 1e-6);
    const scoresOnnx = SCORE_COPIES.onnx * 2 * 2 * 3 * S * 4; // K/V heads read in place: no repeated copies
    assert.ok(Math.abs(stepBytes(TINY, shape, 'onnx') - (STEP_FIXED + ARENA_SLACK * (common + scoresOnnx) + tail)) < 1e-6);
    assert.equal(stepBytes(TINY, shape), stepBytes(TINY, shape, 'onnx'), 'the default is the CPU default kernel');
    // the present KV, when copied out, adds 2·B·S·kv (onnxruntime's outputs and their JS copies) + B·T·kv (the new
    // slots stacked into the one new_kv output)
    assert.ok(Math.abs(stepBytes(TINY, { ...shape, present: true }, 'mha') - stepBytes(TINY, shape, 'mha') - (2 * 2 * S * kv + 2 * 3 * kv)) < 1e-6);
    // sets fed one per row: stacked steer and projection dirs [S, (L+1)·d] and values [S, L+1], f32 (L 2, d 8)
    assert.equal(stepBytes(TINY, { ...shape, sets: 4 }) - stepBytes(TINY, shape), 4 * (2 * 3 * 8 + 3) * 4);
    assert.equal(stepBytes(TINY, { ...shape, sets: 0 }), stepBytes(TINY, shape));
  });

  test('plan: base, prefix share, step bytes; the largest batch and chunk that fit', () => {
    const budget = 9 * 2 ** 30;
    const p = planMemory(LLAMA8B, 'q4', budget, { storage: 'BF16' });
    const w = weightBytes(LLAMA8B, 'q4', { storage: 'BF16' });
    assert.equal(p.weightBytes, w);
    assert.equal(p.baseBytes, RUNTIME_BYTES + w);
    const free = budget - p.baseBytes;
    const minStep = stepBytes(LLAMA8B, { batch: 1, width: 64, past: 0, hidden: 1, logits: 1 });
    assert.equal(p.prefixCacheBytes, Math.floor(Math.min(PREFIX_CACHE_MAX, PREFIX_CACHE_SHARE * (free - minStep))));
    assert.equal(p.stepBytes, free - p.prefixCacheBytes);
    assert.equal(p.baseBytes + p.prefixCacheBytes + p.stepBytes, budget);
    const tokens = (n: number) => stepBytes(LLAMA8B, { batch: n, width: 1, past: 0, hidden: 1, logits: 1 });
    assert.ok(tokens(p.maxBatchTokens) <= p.stepBytes && (p.maxBatchTokens === 4096 || tokens(p.maxBatchTokens + 1) > p.stepBytes), JSON.stringify(p));
    const chunk = (t: number) => stepBytes(LLAMA8B, { batch: 1, width: t, past: 0, hidden: 1, logits: 1, present: true });
    assert.ok(chunk(p.maxChunkTokens) <= p.stepBytes && (p.maxChunkTokens === p.maxBatchTokens || chunk(p.maxChunkTokens + 1) > p.stepBytes));
    // a longer prompt: the last chunk (span = the whole prompt) must fit, so chunks get shorter as prompts grow
    const c1k = chunkTokens(LLAMA8B, p, 1000, 0, { hiddenPerToken: false, logitsPerToken: false });
    const c3k = chunkTokens(LLAMA8B, p, 2000, 0, { hiddenPerToken: false, logitsPerToken: false });
    assert.ok(c3k < c1k && c1k <= p.maxChunkTokens, `${c3k} ${c1k}`);
    const last = (n: number, t: number) => stepBytes(LLAMA8B, { batch: 1, width: t, past: n - t, hidden: 1, logits: 1, present: true });
    assert.ok(last(2000, c3k) <= p.stepBytes && last(2000, c3k + 1) > p.stepBytes);
    // a bigger budget never plans smaller steps
    const q = planMemory(LLAMA8B, 'q4', 2 * budget, { storage: 'BF16' });
    // the runtime bytes given are what the plan leaves aside
    assert.equal(planMemory(LLAMA8B, 'q4', budget, { storage: 'BF16', runtimeBytes: 2 ** 30 }).baseBytes, 2 ** 30 + w);
    assert.ok(q.maxBatchTokens >= p.maxBatchTokens && q.maxChunkTokens >= p.maxChunkTokens && q.prefixCacheBytes >= p.prefixCacheBytes);
  });

  test('budget too small: the weights alone; no room for one step; a prompt whose KV does not fit', () => {
    const w = weightBytes(LLAMA8B, 'f32', { storage: 'BF16' });
    assert.throws(() => planMemory(LLAMA8B, 'f32', 16e9, { storage: 'BF16' }), (e: unknown) => e instanceof SafekeepError
      && /^--max-memory 14\.90 GiB is too small: the weights alone need \d+\.\d\d GiB \(llama 32 layers, d_model 4096, f32\) plus 256 MiB runtime; raise it or use a smaller --dtype \(q8, q4\)$/.test(e.message)
      && e.message.includes(`${(w / 2 ** 30).toFixed(2)} GiB`));
    const justAbove = RUNTIME_BYTES + weightBytes(LLAMA8B, 'q4') + 1000;
    assert.throws(() => planMemory(LLAMA8B, 'q4', justAbove), /less than one 64-token step/);
    const p = planMemory(LLAMA8B, 'q4', RUNTIME_BYTES + weightBytes(LLAMA8B, 'q4') + 2 ** 30);
    assert.throws(() => chunkTokens(LLAMA8B, p, 10_000, 0, { hiddenPerToken: false, logitsPerToken: false }), /too small for a prompt of 10000 tokens: its KV cache alone is 2\.44 GiB/);
  });

  test('sizes: 6GB = 6e9, 6GiB = 6·2³⁰, 500MB, 1.5 GiB, bytes; anything else is a clear error', () => {
    assert.equal(parseBytes('6GB'), 6e9);
    assert.equal(parseBytes('6GiB'), 6 * 2 ** 30);
    assert.equal(parseBytes('6gib'), 6 * 2 ** 30);
    assert.equal(parseBytes('500MB'), 500e6);
    assert.equal(parseBytes('1.5 GiB'), 1.5 * 2 ** 30);
    assert.equal(parseBytes('123456'), 123456);
    for (const bad of ['6XB', 'GB', '-1GB', '', '1e9', '0MB', '6 G B']) {
      assert.throws(() => parseBytes(bad), (e: unknown) => e instanceof SafekeepError && /^--max-memory must be a (size like 6GB, 6GiB or 500MB|positive size), got '/.test(e.message), bad);
    }
  });
});

describe('against a real quantized store and the CLI', () => {
  let tmp: string;
  let dir: string;
  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-memplan-'));
    dir = join(tmp, 'model');
    await writeRandomCheckpoint(dir, 'qwen2', { seed: 3, numLayers: 2, hiddenSize: 48, intermediateSize: 80, vocabSize: 97, numHeads: 4, numKvHeads: 2 });
  });
  after(() => { if (tmp) rmSync(tmp, { recursive: true, force: true }); });

  // every layout the engine can store (the default first: symmetric blocks of 32), against the bytes quant-store.ts writes
  for (const bits of [4, 8] as const) {
    for (const layout of [undefined, { scheme: 'asym', block: 32 }, { scheme: 'sym', block: 64 }, { scheme: 'asym', block: 128 }] as const) {
      const what = layout ? `${layout.scheme} ${layout.block}` : 'default (sym 32)';
      test(`q${bits} ${what}: quantStoreBytes = the linear tensors quant-store.ts writes (codes + scales + zero points)`, async () => {
        const ck = await loadCheckpoint(dir);
        const l = layout ?? DEFAULT_QUANT_LAYOUT;
        const store = quantizedWeights(ck, bits, l.scheme, l.block, join(tmp, 'cache'));
        let written = 0;
        for (const name of Object.keys(store.index.linears)) {
          for (const part of ['codes', 'scales', 'zp']) written += store.index.tensors[`${name}.${part}`]?.length ?? 0;
        }
        assert.equal(quantStoreBytes(ck.config, bits, layout), written);
        const other = (normParams(ck.config) + ck.config.vocabSize * ck.config.hiddenSize) * 4;
        assert.equal(weightBytes(ck.config, bits === 4 ? 'q4' : 'q8', layout ? { quant: layout } : {}), WEIGHT_PEAK.quant * written + other);
      });
    }
  }

  const cli = (args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], {
    encoding: 'utf8', env: { ...process.env, SAFEKEEP_CACHE: join(tmp, 'cache') },
  });

  test('CLI: a bad --max-memory value and a budget below the weights → exit 2, one line, no stack', () => {
    const ids = join(tmp, 'ids.json');
    writeFileSync(ids, JSON.stringify({ input_ids: [[1, 2, 3]] }));
    const bad = cli(['forward', '--model', dir, '--ids', ids, '--out', join(tmp, 'out.safetensors'), '--max-memory', '6XB']);
    assert.equal(bad.status, 2, bad.stderr);
    assert.match(bad.stderr.trim(), /^[^\n]*--max-memory must be a size like 6GB, 6GiB or 500MB, got '6XB'$/);
    const small = cli(['generate', '--model', dir, '--ids', ids, '--out', join(tmp, 'out.json'), '--max-new-tokens', '2', '--max-memory', '100MB']);
    assert.equal(small.status, 2, small.stderr);
    assert.match(small.stderr.trim(), /^[^\n]*--max-memory 95 MiB is too small: the weights \(\d+ KiB, qwen2 2 layers, d_model 48, f32\) and the runtime \(\d+ MiB: the process so far and a margin\) need \d+ MiB before any step; raise it$/);
    const ok = cli(['forward', '--model', dir, '--ids', ids, '--out', join(tmp, 'out.safetensors'), '--max-memory', '1GiB']);
    assert.equal(ok.status, 0, ok.stderr);
  });
});
