/**
 * Parity with Hugging Face transformers' own outputs (../shared/fixtures/hf-reference, README there):
 * hidden states (ours hidden[l] = their layer_outputs[l-1] for l ≥ 1, hidden_states[0] for l = 0; our hidden[L] is
 * pre-final-norm), logits, unbatched and as a left-padded batch, greedy ids + step logits, the first generated
 * token's hidden state, and steering (their hook on model.layers[2] = our steer layer 3).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { sharedPath } from './helpers/shared.ts';
import { maxAbsDiff, readAllF32, tempCache } from './helpers/engine.ts';

const TOL = 1e-4;
const root = sharedPath('fixtures', 'hf-reference');

interface Inputs { seqs: number[][]; steer_v: number[]; steer_alpha: number; steer_layer: number; max_new_tokens: number }

for (const tag of ['llama3-tiny-f32', 'qwen3-tiny-f32']) {
  describe(`HF parity: ${tag}`, { skip: root ? false : 'needs ../shared/fixtures/hf-reference (set SAFEKEEP_SHARED)' }, () => {
    let engine: OnnxEngine;
    let refs: Map<string, { shape: number[]; data: Float32Array }>;
    let meta: { gen: { new_ids: number[] }; steer: { new_ids: number[] } };
    let inputs: Inputs;
    let cache: ReturnType<typeof tempCache>;
    const ref = (n: string) => {
      const t = refs.get(n);
      assert.ok(t, `reference tensor ${n} present`);
      return t.data;
    };
    /** expected [L+1, T, d] in our convention from their hidden_states[0] + layer_outputs */
    const expectedHidden = (hs: Float32Array, lo: Float32Array, rows: number) => {
      const d = engine.dModel;
      const e = new Float32Array((engine.numLayers + 1) * rows * d);
      e.set(hs.subarray(0, rows * d), 0);
      e.set(lo, rows * d);
      return e;
    };

    before(async () => {
      cache = tempCache();
      inputs = JSON.parse(readFileSync(join(root!, 'inputs.json'), 'utf8')) as Inputs;
      refs = readAllF32(join(root!, 'refs', `${tag}.safetensors`));
      meta = JSON.parse(readFileSync(join(root!, 'refs', `${tag}.json`), 'utf8'));
      engine = await createEngine(join(root!, 'models', tag), { cacheDir: cache.dir, threads: 2 });
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
    });

    test('unbatched forward: hidden states and logits at every position', async () => {
      for (let i = 0; i < inputs.seqs.length; i++) {
        const [r] = await engine.forward([inputs.seqs[i]!]);
        assert.equal(r!.length, inputs.seqs[i]!.length);
        const hd = maxAbsDiff(r!.hidden, expectedHidden(ref(`seq${i}.hidden_states`), ref(`seq${i}.layer_outputs`), r!.length));
        const ld = maxAbsDiff(r!.logits, ref(`seq${i}.logits`));
        assert.ok(hd <= TOL, `seq${i} hidden max diff ${hd}`);
        assert.ok(ld <= TOL, `seq${i} logits max diff ${ld}`);
      }
    });

    test('left-padded batch: equals HF and equals unbatched (≤ 1e-5)', async () => {
      const batched = await engine.forward(inputs.seqs);
      const V = engine.vocabSize;
      const d = engine.dModel;
      const L1 = engine.numLayers + 1;
      const bHidden = ref('batch.cumsum_positions.hidden_states'); // [N+1, 3, 33, H], last entry final-normed
      const bLogits = ref('batch.cumsum_positions.logits'); // [3, 33, V]
      const W = 33;
      for (let i = 0; i < inputs.seqs.length; i++) {
        const T = inputs.seqs[i]!.length;
        const pad = W - T;
        const r = batched[i]!;
        const [u] = await engine.forward([inputs.seqs[i]!]);
        assert.ok(maxAbsDiff(r.hidden, u!.hidden) <= 1e-5, `seq${i} batched vs unbatched hidden ${maxAbsDiff(r.hidden, u!.hidden)}`);
        assert.ok(maxAbsDiff(r.logits, u!.logits) <= 1e-5, `seq${i} batched vs unbatched logits`);
        const hfLogits = bLogits.subarray((i * W + pad) * V, (i + 1) * W * V);
        assert.ok(maxAbsDiff(r.logits, hfLogits) <= TOL, `seq${i} logits vs HF batch ${maxAbsDiff(r.logits, hfLogits)}`);
        // their batched hidden_states[l] for l < N are our hidden[l] (the last one is final-normed, skip it)
        for (let l = 0; l < L1 - 1; l++) {
          const theirs = bHidden.subarray(((l * 3 + i) * W + pad) * d, ((l * 3 + i) * W + W) * d);
          const ours = r.hidden.subarray(l * T * d, (l + 1) * T * d);
          assert.ok(maxAbsDiff(ours, theirs) <= TOL, `seq${i} layer ${l} hidden vs HF batch`);
        }
      }
    });

    test('greedy generation: ids, step logits, first generated token hidden state', async () => {
      const [g] = await engine.generate([inputs.seqs[0]!], {
        maxNewTokens: inputs.max_new_tokens, stopIds: [], returnStepLogits: true, returnFirstTokenHidden: true,
      });
      assert.deepEqual(g!.generatedIds, meta.gen.new_ids);
      assert.equal(g!.finish, 'length');
      const sd = maxAbsDiff(g!.stepLogits!, ref('gen.step_logits'));
      assert.ok(sd <= TOL, `step logits diff ${sd}`);
      const fd = maxAbsDiff(g!.firstTokenHidden!, expectedHidden(ref('gen.step1.hidden_states'), ref('gen.step1.layer_outputs'), 1));
      assert.ok(fd <= TOL, `first token hidden diff ${fd}`);
    });

    test('steering: prefill under the hook and steered greedy generation', async () => {
      const steer = { layer: inputs.steer_layer + 1, vector: inputs.steer_v, alpha: inputs.steer_alpha };
      const [f] = await engine.forward([inputs.seqs[0]!], { steer });
      const hd = maxAbsDiff(f!.hidden, expectedHidden(ref('steer.prefill_hidden_states'), ref('steer.prefill_layer_outputs'), f!.length));
      assert.ok(hd <= TOL, `steered prefill hidden diff ${hd}`);
      assert.ok(maxAbsDiff(f!.logits, ref('steer.prefill_logits')) <= TOL, 'steered prefill logits');
      const [g] = await engine.generate([inputs.seqs[0]!], { maxNewTokens: inputs.max_new_tokens, stopIds: [], steer, returnStepLogits: true });
      assert.deepEqual(g!.generatedIds, meta.steer.new_ids);
      assert.notDeepEqual(g!.generatedIds, meta.gen.new_ids, 'steering changes the continuation');
      const sd = maxAbsDiff(g!.stepLogits!, ref('steer.step_logits'));
      assert.ok(sd <= TOL, `steered step logits diff ${sd}`);
    });
  });
}
