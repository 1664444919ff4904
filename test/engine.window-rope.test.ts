/**
 * Sliding windows and length-dependent RoPE on every engine path, against the Float64 oracle (its own RoPE and
 * window code, reference.ts), on random checkpoints with windows shorter than the prompts: a left-padded batch of
 * different lengths in one forward (hidden 'all', logits 'all'), batched greedy generation with the KV cache (step
 * logits), shared-prefix reuse, and chunked prefill. Dynamic NTK is per row: a row is rotated for its own length
 * (batched = unbatched; transformers would use the longest row of its batch).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint, type RandomCheckpointOptions } from '../src/checkpoint/random.ts';
import type { Checkpoint, Family } from '../src/checkpoint/types.ts';
import { steeringMatrix } from '../src/engine/batch.ts';
import { chunkedStep } from '../src/engine/chunked.ts';
import { createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { hiddenAt, referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import { maxAbsDiff, TINY_MODELS, tempCache } from './helpers/engine.ts';

const REL = 2e-5;

const CASES: { name: string; family: Family; opts: RandomCheckpointOptions; windows: (number | null)[]; rope: string }[] = [
  { name: 'mistral, window 5 on every layer, yarn', family: 'mistral', windows: [5, 5], rope: 'yarn',
    opts: { ...TINY_MODELS.mistral, config: { sliding_window: 5, rope_theta: undefined, rope_parameters: { rope_type: 'yarn', rope_theta: 10000, factor: 4, original_max_position_embeddings: 8 } } } },
  { name: 'qwen2, window 6 from layer 1 (max_window_layers), dynamic NTK past 12 positions', family: 'qwen2', windows: [null, 6], rope: 'dynamic',
    opts: { ...TINY_MODELS.qwen2, maxPositionEmbeddings: 12, config: { use_sliding_window: true, sliding_window: 6, max_window_layers: 1, rope_scaling: { type: 'dynamic', factor: 3 } } } },
  { name: 'qwen3, window 4 on layers 0 and 2 (layer_types), linear', family: 'qwen3', windows: [4, null, 4], rope: 'linear',
    opts: { ...TINY_MODELS.qwen3, config: { use_sliding_window: true, sliding_window: 4, layer_types: ['sliding_attention', 'full_attention', 'sliding_attention'], rope_parameters: { rope_type: 'linear', factor: 2.5 }, rope_scaling: undefined } } },
  { name: 'llama, no window, dynamic NTK past 16 positions', family: 'llama', windows: [null, null, null], rope: 'dynamic',
    opts: { ...TINY_MODELS.llama, ropeScaling: null, maxPositionEmbeddings: 16, config: { rope_parameters: { rope_type: 'dynamic', factor: 2, rope_theta: 10000 }, rope_theta: undefined } } },
];

const PROMPTS = [
  [5, 9, 14, 3, 8, 22, 17, 4, 11, 30, 6, 19, 25, 7, 13, 28, 2, 16, 21, 10, 27, 12, 18],
  [7, 3, 12, 19, 4, 26, 9, 15, 6],
  [5, 9, 14, 3, 8, 22, 17, 4, 11, 30, 6, 19, 25, 1, 20, 23, 24],
];

function scale(x: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < x.length; i++) m = Math.max(m, Math.abs(x[i]!));
  return m;
}
function close(what: string, got: ArrayLike<number>, want: ArrayLike<number>): void {
  const d = maxAbsDiff(got, want);
  assert.ok(d <= REL * scale(want), `${what}: max |diff| ${d.toExponential(2)} > ${REL} × ${scale(want).toFixed(3)}`);
}

for (const c of CASES) {
  describe(`windows and RoPE vs the oracle: ${c.name}`, () => {
    let dir: string;
    let ck: Checkpoint;
    let engine: OnnxEngine;
    let cache: ReturnType<typeof tempCache>;
    before(async () => {
      cache = tempCache();
      dir = mkdtempSync(join(tmpdir(), 'safekeep-window-'));
      ck = await loadCheckpoint(await writeRandomCheckpoint(join(dir, 'm'), c.family, { seed: 7, std: 0.2, ...c.opts }));
      engine = await createEngineFromCheckpoint(ck, { threads: 1 });
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
      rmSync(dir, { recursive: true, force: true });
    });

    test('config', () => {
      assert.deepEqual(ck.config.attentionWindows, c.windows);
      assert.equal(ck.config.rope.type, c.rope);
    });

    test('left-padded batch forward = oracle per prompt; the window changes the result', async () => {
      const rs = await engine.forward(PROMPTS);
      PROMPTS.forEach((ids, i) => {
        const ref = referenceForward(ck, ids);
        close(`prompt ${i} hidden`, rs[i]!.hidden, ref.hidden);
        close(`prompt ${i} logits`, rs[i]!.logits, ref.logits);
      });
      const full = referenceForward({ ...ck, config: { ...ck.config, attentionWindows: ck.config.attentionWindows.map(() => null) } }, PROMPTS[0]!);
      if (c.windows.some((w) => w !== null)) assert.ok(maxAbsDiff(full.logits, rs[0]!.logits) > 1e-2 * scale(full.logits), 'the window matters at this length');
    });

    test('batched greedy with the KV cache (steered) = oracle', async () => {
      const steer = { layer: 1, vector: Array.from({ length: ck.config.hiddenSize }, (_, i) => Math.sin(i + 1)), alpha: 3 };
      const gs = await engine.generate(PROMPTS, { maxNewTokens: 6, stopIds: [], steer, returnStepLogits: true, returnFirstTokenHidden: true });
      PROMPTS.forEach((ids, i) => {
        const ref = referenceGenerate(ck, ids, { maxNewTokens: 6, stopIds: [], steer });
        assert.deepEqual(gs[i]!.generatedIds, ref.generatedIds, `prompt ${i}`);
        close(`prompt ${i} step logits`, gs[i]!.stepLogits!, ref.stepLogits);
        close(`prompt ${i} first token hidden`, gs[i]!.firstTokenHidden!, ref.firstTokenHidden!);
      });
    });

    test('shared-prefix reuse and chunked prefill = oracle', async () => {
      const shared = await engine.forwardShared(PROMPTS, { hiddenAt: 'last', logitsAt: 'last' });
      PROMPTS.forEach((ids, i) => {
        const ref = referenceForward(ck, ids);
        const L = ck.config.numLayers;
        const d = ck.config.hiddenSize;
        close(`shared prompt ${i} hidden`, shared.results[i]!.hidden, hiddenAt(ref.hidden, L, ids.length, d, ids.length - 1));
        close(`shared prompt ${i} logits`, shared.results[i]!.logits, ref.logits.subarray((ids.length - 1) * ck.config.vocabSize));
      });
      // prompts 0 and 2 share 13 tokens; dynamic beyond max positions reuses nothing
      const longest = Math.max(...PROMPTS.map((p) => p.length));
      const dynamicBeyond = ck.config.rope.type === 'dynamic' && longest > ck.config.rope.maxPositionEmbeddings;
      if (!dynamicBeyond) assert.ok(shared.stats.computedTokens < shared.stats.promptTokens, JSON.stringify(shared.stats));

      const ids = PROMPTS[0]!;
      const all = ids.map((_, t) => t);
      const out = await chunkedStep(engine, {
        ids: BigInt64Array.from(ids, BigInt), batch: 1, width: ids.length, starts: [0], past: null,
        steer: steeringMatrix(engine.numLayers, engine.dModel), hiddenIndex: all, logitsIndex: all, wantPresent: false,
      }, 4);
      const ref = referenceForward(ck, ids);
      close('chunked hidden', out.hidden, ref.hidden);
      close('chunked logits', out.logits, ref.logits);
    });
  });
}
