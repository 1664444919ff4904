/**
 * Parity with transformers 5.x on checkpoints it saved itself (test/fixtures/hf5, written by
 * scripts/hf-fixtures/generate.py): config.json with `rope_parameters`, every RoPE type (default, linear, llama3,
 * yarn, dynamic NTK) on every family, sliding windows (Mistral `sliding_window`, Qwen2 `use_sliding_window` +
 * `max_window_layers`, Qwen3 `layer_types`), and one transformers 4.x config (`rope_theta` + `rope_scaling`) of the
 * same weights as llama-llama3. A 40-token prompt: past every window (8), the dynamic model's max positions (24) and
 * the scaled types' original length (16). Per case: hidden states at every layer and position (hidden[L] before the
 * final norm), logits, greedy ids with KV-cached decoding (+ step logits and the first generated token's hidden
 * state), the same under steering, chunked prefill, and shared-prefix reuse, all within 1e-4 of transformers.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chunkedStep } from '../src/engine/chunked.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { steeringMatrix } from '../src/engine/batch.ts';
import { maxAbsDiff, type readAllF32, tempCache } from './helpers/engine.ts';
import { HF5, hf5Index, hf5Refs } from './helpers/hf5.ts';

const TOL = 1e-4;

const index = hf5Index();

test('the fixtures cover every family × RoPE type, windows on three families, and a 4.x config; written by transformers 5', () => {
  assert.match(index.transformers, /^5\./);
  const cases = Object.values(index.cases);
  for (const family of ['llama', 'mistral', 'qwen2', 'qwen3']) {
    for (const rope of ['default', 'linear', 'llama3', 'yarn', 'dynamic']) {
      assert.ok(cases.some((c) => c.family === family && c.rope === rope), `${family} × ${rope}`);
    }
    if (family !== 'llama') assert.ok(cases.some((c) => c.family === family && c.window !== null), `${family} with a window`);
  }
  for (const tag of Object.keys(index.cases)) {
    const cfg = JSON.parse(readFileSync(join(HF5, tag, 'model', 'config.json'), 'utf8')) as Record<string, unknown>;
    if (tag.endsWith('-4x')) assert.ok('rope_scaling' in cfg && 'rope_theta' in cfg && !('rope_parameters' in cfg), tag);
    else assert.ok('rope_parameters' in cfg && !('rope_scaling' in cfg) && !('rope_theta' in cfg), tag);
  }
});

for (const [tag, c] of Object.entries(index.cases)) {
  describe(`transformers 5 parity: ${tag}`, () => {
    let engine: OnnxEngine;
    let refs: ReturnType<typeof readAllF32>;
    let cache: ReturnType<typeof tempCache>;
    const ref = (n: string) => {
      const t = refs.get(n);
      assert.ok(t, `reference ${n}`);
      return t.data;
    };
    const prompt = index.prompt;
    const T = prompt.length;
    const steer = { layer: index.steer.layer, vector: index.steer.vector, alpha: index.steer.alpha };
    const close = (what: string, got: ArrayLike<number>, want: ArrayLike<number>) => {
      const d = maxAbsDiff(got, want);
      assert.ok(d <= TOL, `${what}: max |diff| ${d.toExponential(2)} > ${TOL}`);
    };

    before(async () => {
      cache = tempCache();
      refs = hf5Refs(tag, c);
      engine = await createEngine(join(HF5, tag, 'model'), { threads: 1 });
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
    });

    test('config resolved as transformers did', () => {
      assert.equal(engine.config.rope.type, c.rope);
      assert.equal(engine.window, c.window);
    });

    test('forward: hidden states at every layer and position, logits', async (t) => {
      const [r] = await engine.forward([prompt]);
      close('hidden', r!.hidden, ref('hidden'));
      close('logits', r!.logits, ref('logits'));
      t.diagnostic(`max |diff| vs transformers: hidden ${maxAbsDiff(r!.hidden, ref('hidden')).toExponential(2)}, logits ${maxAbsDiff(r!.logits, ref('logits')).toExponential(2)}`);
    });

    test('greedy generation with the KV cache: ids, step logits, first generated token hidden state', async () => {
      const [g] = await engine.generate([prompt], { maxNewTokens: index.new_tokens, stopIds: [], returnStepLogits: true, returnFirstTokenHidden: true });
      assert.deepEqual(g!.generatedIds, c.greedy);
      close('step logits', g!.stepLogits!, ref('step_logits'));
      close('first token hidden', g!.firstTokenHidden!, ref('first_hidden'));
    });

    test('steering: prefill under the hook and steered greedy generation', async () => {
      const [f] = await engine.forward([prompt], { steer });
      close('steered hidden', f!.hidden, ref('steer.hidden'));
      close('steered logits', f!.logits, ref('steer.logits'));
      const [g] = await engine.generate([prompt], { maxNewTokens: index.new_tokens, stopIds: [], steer, returnStepLogits: true });
      assert.deepEqual(g!.generatedIds, c.steered);
      close('steered step logits', g!.stepLogits!, ref('steer.step_logits'));
    });

    test('chunked prefill (steps of 12 on the growing KV) equals transformers', async () => {
      const all = Array.from({ length: T }, (_, t) => t);
      const out = await chunkedStep(engine, {
        ids: BigInt64Array.from(prompt, BigInt), batch: 1, width: T, starts: [0], past: null,
        steer: steeringMatrix(engine.numLayers, engine.dModel), hiddenIndex: all, logitsIndex: all, wantPresent: false,
      }, 12);
      close('chunked hidden', out.hidden, ref('hidden'));
      close('chunked logits', out.logits, ref('logits'));
    });

    test('shared-prefix reuse: the prompt next to prompts sharing 30 and 20 of its tokens', async () => {
      const other = (n: number, tail: number[]) => [...prompt.slice(0, n), ...tail];
      const prompts = [prompt, other(30, [3, 4, 5, 6, 7]), other(20, [9, 8, 7])];
      const shared = await engine.forwardShared(prompts, { hiddenAt: 'last', logitsAt: 'last' });
      const d = engine.dModel;
      const V = engine.vocabSize;
      const L1 = engine.numLayers + 1;
      const want = new Float32Array(L1 * d);
      const hidden = ref('hidden');
      for (let l = 0; l < L1; l++) want.set(hidden.subarray((l * T + T - 1) * d, (l * T + T) * d), l * d);
      close('shared hidden', shared.results[0]!.hidden, want);
      close('shared logits', shared.results[0]!.logits, ref('logits').subarray((T - 1) * V));
      // dynamic NTK beyond max positions: nothing may be reused (the prefix's frequencies would differ)
      if (c.rope === 'dynamic') assert.equal(shared.stats.computedTokens, shared.stats.promptTokens);
      else assert.ok(shared.stats.computedTokens < shared.stats.promptTokens - 20, `reused: ${JSON.stringify(shared.stats)}`);
      const [f] = await engine.forward([prompts[1]!], { hiddenAt: 'last', logitsAt: 'last' });
      close('shared vs forward (second prompt)', shared.results[1]!.hidden, f!.hidden);
    });
  });
}
