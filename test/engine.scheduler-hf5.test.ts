/**
 * The scheduler against transformers 5 itself (test/fixtures/hf5: 21 checkpoints, every family × RoPE type, sliding
 * windows, a 4.x config): the fixture prompt joins while another sequence is decoding, is prefilled in 8-token chunks
 * between that sequence's decode steps, unsteered and steered at once (two decode groups), then again from the prefix
 * cache (32 of its 40 tokens from cached 16-token blocks, except under dynamic NTK, where the cache is off): greedy
 * ids equal transformers', step logits within the parity test's 1e-4.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { Scheduler } from '../src/engine/run/scheduler.ts';
import { maxAbsDiff, tempCache } from './helpers/engine.ts';
import { HF5, hf5Index, hf5Refs } from './helpers/hf5.ts';

const TOL = 1e-4;
const index = hf5Index();

for (const [tag, c] of Object.entries(index.cases)) {
  describe(`scheduler vs transformers 5: ${tag}`, () => {
    let engine: OnnxEngine;
    let cache: ReturnType<typeof tempCache>;
    const refs = hf5Refs(tag, c);
    const ref = (n: string) => refs.get(n)!.data;
    before(async () => {
      cache = tempCache();
      engine = await createEngine(join(HF5, tag, 'model'), { cacheDir: cache.dir, threads: 1 });
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
    });

    test('joining mid-flight, chunked prefill, steered and unsteered together, then a prefix-cache hit', async () => {
      const sched = new Scheduler(engine, { stepTokens: 8, blockTokens: 16, prefixAdmitAfter: 1 });
      const prompt = index.prompt;
      const K = index.new_tokens;
      const steer = { layer: index.steer.layer, vector: index.steer.vector, alpha: index.steer.alpha };
      const filler = sched.submit([...prompt].reverse().slice(0, 11), { maxNewTokens: 3 * K, stopIds: [] });
      while (sched.stats.decodeSteps < 2) await new Promise((r) => setImmediate(r));
      const o = { maxNewTokens: K, stopIds: [], returnStepLogits: true };
      const [plain, steered] = await Promise.all([sched.submit(prompt, o), sched.submit(prompt, { ...o, steer })]);
      await filler;
      assert.deepEqual(plain.generatedIds, c.greedy, 'greedy ids');
      assert.deepEqual(steered.generatedIds, c.steered, 'steered greedy ids');
      const d1 = maxAbsDiff(plain.stepLogits!, ref('step_logits'));
      const d2 = maxAbsDiff(steered.stepLogits!, ref('steer.step_logits'));
      assert.ok(d1 <= TOL && d2 <= TOL, `step logits ${d1}, steered ${d2}`);
      assert.ok(sched.stats.peakBatch >= 2, 'decoded next to the filler');
      const hit0 = sched.prefixStore?.stats.hit ?? 0;
      const again = await sched.submit(prompt, o);
      assert.equal((sched.prefixStore?.stats.hit ?? 0) - hit0, c.rope === 'dynamic' ? 0 : 32, 'tokens from the prefix cache');
      assert.deepEqual(again.generatedIds, c.greedy, 'greedy ids after a prefix hit');
      assert.ok(maxAbsDiff(again.stepLogits!, ref('step_logits')) <= TOL, 'step logits after a prefix hit');
    });
  });
}
