/**
 * Causal chunking (chunked.ts `causalChunk`): a step of over 512 new tokens is run as ⌈T/384⌉ even chunks on the
 * growing KV, so the masked scores above the diagonal are not computed. Results must not change beyond float
 * rounding: `forward` (all positions' hidden states and logits, with steering) and `generate` on a 700-token prompt
 * equal the Float64 oracle, and the engine really ran the prompt as two steps.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import type { Checkpoint } from '../src/checkpoint/types.ts';
import { causalChunk } from '../src/engine/run/chunked.ts';
import { createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import { TINY_MODELS, maxAbsDiff, tempCache } from './helpers/engine.ts';

const TOL = 1e-4;

test('causalChunk: one step up to 512 tokens, else ⌈T/384⌉ even chunks', () => {
  assert.equal(causalChunk(1), 1);
  assert.equal(causalChunk(512), 512);
  assert.equal(causalChunk(513), 257);
  assert.equal(causalChunk(700), 350);
  assert.equal(causalChunk(768), 384);
  assert.equal(causalChunk(769), 257);
  assert.equal(causalChunk(1024), 342);
  for (let T = 1; T <= 3000; T += 7) {
    const c = causalChunk(T);
    assert.ok(c <= Math.max(T <= 512 ? T : 384, 1), `T ${T}: chunk ${c}`);
    assert.ok(Math.ceil(T / c) * c - T < Math.ceil(T / c), `T ${T}: chunks even (${c})`);
  }
});

let tmp: string;
let cache: ReturnType<typeof tempCache>;
let ck: Checkpoint;
let engine: OnnxEngine;

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'safekeep-causal-chunk-'));
  cache = tempCache();
  await writeRandomCheckpoint(join(tmp, 'm'), 'qwen3', { ...TINY_MODELS.qwen3, numLayers: 2, seed: 5, std: 0.2 });
  ck = await loadCheckpoint(join(tmp, 'm'));
  engine = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 1 });
});
after(async () => {
  await engine?.dispose();
  cache?.cleanup();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('a 700-token prompt runs as two steps and equals the Float64 oracle (forward with steering, generate)', async () => {
  const V = ck.config.vocabSize;
  let s = 99;
  const ids = Array.from({ length: 700 }, () => { s = (s * 1103515245 + 12345) % 2147483648; return 3 + (s % (V - 3)); });
  const steer = { layer: 1, vector: Array.from({ length: ck.config.hiddenSize }, (_, i) => Math.sin(i)), alpha: 1.5 };
  const widths: number[] = [];
  const step = engine.step.bind(engine);
  engine.step = async (inp) => { widths.push(inp.width); return step(inp); };
  try {
    const [got] = await engine.forward([ids], { hiddenAt: 'all', logitsAt: 'all', steer });
    assert.deepEqual(widths, [350, 350], 'the prompt ran in two chunks');
    const ref = referenceForward(ck, ids, { steer });
    assert.ok(maxAbsDiff(got!.hidden, ref.hidden) <= TOL, `hidden ${maxAbsDiff(got!.hidden, ref.hidden)}`);
    assert.ok(maxAbsDiff(got!.logits, ref.logits) <= TOL, `logits ${maxAbsDiff(got!.logits, ref.logits)}`);
    widths.length = 0;
    const [gen] = await engine.generate([ids], { maxNewTokens: 3, stopIds: [], returnStepLogits: true });
    assert.deepEqual(widths, [350, 350, 1, 1], 'prefill in two chunks, then decode');
    const refGen = referenceGenerate(ck, ids, { maxNewTokens: 3, stopIds: [] });
    assert.deepEqual(gen!.generatedIds, refGen.generatedIds);
    assert.ok(maxAbsDiff(gen!.stepLogits!, refGen.stepLogits) <= TOL, `step logits ${maxAbsDiff(gen!.stepLogits!, refGen.stepLogits)}`);
  } finally {
    engine.step = step;
  }
});
