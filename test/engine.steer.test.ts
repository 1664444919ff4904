/**
 * Steering invariants the sweep relies on: α = 0 reproduces the unsteered generation exactly, and
 * steered decoding with the KV cache equals a steered full recompute of the generated sequence.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine } from '../src/engine/engine.ts';
import type { Engine, GenerateOptions } from '../src/engine/types.ts';
import { maxAbsDiff } from './helpers/engine.ts';

let dir: string;
let eng: Engine;
const prompts = [[5, 17, 99, 3, 250, 41, 8], [77, 12, 400, 9]];
const vector = Float32Array.from({ length: 64 }, (_, i) => Math.cos(i * 0.7));

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'steer-engine-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  await writeRandomCheckpoint(join(dir, 'm'), 'qwen3', { seed: 11 });
  eng = await createEngine(join(dir, 'm'), { cacheDir: join(dir, '.graphs') });
});
after(async () => {
  await eng.dispose();
  rmSync(dir, { recursive: true, force: true });
});

test('α = 0 reproduces the unsteered generations exactly', async () => {
  const opts: GenerateOptions = { maxNewTokens: 12, stopIds: [], returnStepLogits: true };
  const plain = await eng.generate(prompts, opts);
  const zero = await eng.generate(prompts, { ...opts, steer: { layer: 2, vector, alpha: 0 } });
  plain.forEach((p, i) => {
    assert.deepEqual(zero[i]!.generatedIds, p.generatedIds);
    assert.ok(maxAbsDiff(zero[i]!.stepLogits!, p.stepLogits!) <= 1e-6);
  });
  const steered = await eng.generate(prompts, { ...opts, steer: { layer: 2, vector, alpha: 6 } });
  assert.ok(maxAbsDiff(steered[0]!.stepLogits!, plain[0]!.stepLogits!) > 1e-2, 'α = 6 must change the logits');
});

test('steered decoding with the KV cache equals a steered full recompute', async () => {
  const steer = { layer: 3, vector, alpha: 5 };
  const gen = await eng.generate(prompts, { maxNewTokens: 10, stopIds: [], returnStepLogits: true, steer });
  for (const [i, g] of gen.entries()) {
    const p = prompts[i]!;
    const full = [...p, ...g.generatedIds.slice(0, -1)];
    const [f] = await eng.forward([full], { steer, hiddenAt: 'none', logitsAt: 'all' });
    const V = eng.vocabSize;
    // step k was chosen from the logits at position p.length - 1 + k of the full sequence
    const rows = f!.logits.subarray((p.length - 1) * V);
    assert.equal(rows.length, g.stepLogits!.length);
    assert.ok(maxAbsDiff(rows, g.stepLogits!) <= 1e-5, `sequence ${i}: ${maxAbsDiff(rows, g.stepLogits!)}`);
  }
});

test('steer positions "generated": the prompt\'s hidden states are untouched, the generated ones steered by exactly −α·v̂', async () => {
  const layer = 2;
  const alpha = 6;
  const base: GenerateOptions = { maxNewTokens: 6, stopIds: [], returnStepLogits: true, returnPromptLastHidden: true, returnFirstTokenHidden: true };
  const plain = await eng.generate(prompts, base);
  const gen = await eng.generate(prompts, { ...base, steer: { layer, vector, alpha, positions: 'generated' } });
  const all = await eng.generate(prompts, { ...base, steer: { layer, vector, alpha, positions: 'all' } });
  const d = eng.dModel;
  const norm = Math.hypot(...vector);
  for (const [i, p] of plain.entries()) {
    const g = gen[i]!;
    // prompt: bit-identical to the unsteered run (every layer), so the first token is the unsteered choice
    assert.deepEqual(g.promptLastHidden, p.promptLastHidden);
    assert.equal(g.generatedIds[0], p.generatedIds[0]);
    assert.ok(maxAbsDiff(g.stepLogits!.subarray(0, eng.vocabSize), p.stepLogits!.subarray(0, eng.vocabSize)) === 0);
    // 'all' steers the prompt too
    assert.ok(maxAbsDiff(all[i]!.promptLastHidden!.subarray(layer * d, (layer + 1) * d), p.promptLastHidden!.subarray(layer * d, (layer + 1) * d)) > 1);
    // first generated token (same token fed back): layers below ℓ unchanged, hidden[ℓ] shifted by −α·v/|v|
    const fg = g.firstTokenHidden!, fp = p.firstTokenHidden!;
    for (let l = 0; l < layer; l++) assert.ok(maxAbsDiff(fg.subarray(l * d, (l + 1) * d), fp.subarray(l * d, (l + 1) * d)) <= 1e-6, `layer ${l}`);
    const shift = Float32Array.from({ length: d }, (_, j) => fg[layer * d + j]! - fp[layer * d + j]!);
    const expected = Float32Array.from(vector, (v) => (-alpha * v) / norm);
    assert.ok(maxAbsDiff(shift, expected) <= 1e-4, `hidden[ℓ] shift off by ${maxAbsDiff(shift, expected)}`);
    // and the later steps change
    assert.ok(maxAbsDiff(g.stepLogits!, p.stepLogits!) > 1e-3);
  }
});

test('steer positions "generated" matches the Float64 oracle (unsteered prefill, steered decode)', async () => {
  const { loadCheckpoint } = await import('../src/checkpoint/load.ts');
  const { referenceGenerate } = await import('../src/engine/reference.ts');
  const ckpt = await loadCheckpoint(join(dir, 'm'));
  const steer = { layer: 3, vector: Array.from(vector), alpha: 5, positions: 'generated' as const };
  const [g] = await eng.generate([prompts[0]!], { maxNewTokens: 5, stopIds: [], returnStepLogits: true, steer });
  const ref = referenceGenerate(ckpt, prompts[0]!, { maxNewTokens: 5, stopIds: [], steer });
  assert.deepEqual(g!.generatedIds, ref.generatedIds);
  assert.ok(maxAbsDiff(g!.stepLogits!, Float32Array.from(ref.stepLogits)) <= 1e-4);
});
