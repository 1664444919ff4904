/**
 * Memory budget in the engine (memory.ts, chunked.ts): with a `maxMemory` budget small enough that a prompt does not
 * fit one step, `forward`, `generate` and `forwardShared` prefill it in chunks through `step()` on the growing KV —
 * results equal the unbudgeted engine (≤ 1e-5 × max|value|) on random llama/qwen2/qwen3 checkpoints, with steering,
 * hiddenAt 'all' and logitsAt 'all'; `chunkedStep` at several chunk sizes equals one step, also on a left-padded
 * batch; and a budget below the weights is refused with the clear error before a session opens.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import type { Family, ModelConfig } from '../src/checkpoint/types.ts';
import { leftPad, steeringMatrix } from '../src/engine/run/batch.ts';
import { chunkedStep } from '../src/engine/run/chunked.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import type { StepOutput } from '../src/engine/run/step.ts';
import { planMemory, RUNTIME_BYTES } from '../src/engine/runtime/memory.ts';
import type { Steering } from '../src/engine/types.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { SMALL_GQA, maxAbsDiff, tempCache } from './helpers/engine.ts';

const EXACT = 1e-5;

function relDiff(a: Float32Array, b: Float32Array): number {
  let m = 1;
  for (const x of b) m = Math.max(m, Math.abs(x));
  return maxAbsDiff(a, b) / m;
}

function seqs(vocab: number, lengths: number[], seed = 7): number[][] {
  let s = seed;
  const rnd = () => { s = (s * 1103515245 + 12345) % 2147483648; return 1 + (s % (vocab - 1)); };
  return lengths.map((n) => Array.from({ length: n }, rnd));
}

/** the smallest budget (to 1 KiB) that planMemory accepts, plus `extra` bytes */
function smallBudget(c: ModelConfig, extra: number): number {
  let lo = 1;
  let hi = 2 ** 40;
  const ok = (b: number) => { try { planMemory(c, 'f32', b); return true; } catch { return false; } };
  while (hi - lo > 1024) { const mid = Math.floor((lo + hi) / 2); if (ok(mid)) hi = mid; else lo = mid; }
  return hi + extra;
}

const FAMILIES = SMALL_GQA;

describe('chunked prefill under a memory budget equals one step', () => {
  let tmp: string;
  let cache: ReturnType<typeof tempCache>;
  const plain = new Map<Family, OnnxEngine>();
  const budgeted = new Map<Family, OnnxEngine>();
  const steerOf = (e: OnnxEngine): Steering => ({ layer: 2, vector: Array.from({ length: e.dModel }, (_, i) => Math.sin(i + 1)), alpha: 3 });
  before(async () => {
    cache = tempCache();
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-memory-'));
    for (const { family, opts } of FAMILIES) {
      const dir = join(tmp, family);
      await writeRandomCheckpoint(dir, family, { ...opts, seed: 5 });
      plain.set(family, await createEngine(dir, { cacheDir: cache.dir, threads: 2 }));
      budgeted.set(family, await createEngine(dir, { cacheDir: cache.dir, threads: 2, maxMemory: smallBudget((await loadCheckpoint(dir)).config, 512 * 1024), runtimeBytes: RUNTIME_BYTES }));
    }
  });
  after(async () => {
    for (const e of [...plain.values(), ...budgeted.values()]) await e.dispose();
    cache?.cleanup();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  for (const { family } of FAMILIES) {
    test(`${family}: the plan of a small budget: steps of 64..250 tokens, a prefix cache that holds the test's shared prefix`, () => {
      const e = budgeted.get(family)!;
      const plan = e.memoryPlan!;
      assert.ok(plan.maxChunkTokens >= 64 && plan.maxChunkTokens < 250, JSON.stringify(plan));
      assert.ok(plan.prefixCacheBytes >= (plan.maxChunkTokens + 31) * 2 * e.numLayers * e.config.numKvHeads * e.config.headDim * 4, JSON.stringify(plan));
      assert.equal(e.maxBatchTokens, plan.maxBatchTokens);
    });

    test(`${family}: chunkedStep at chunk 1, 5, 16 = one step (left-padded batch, past KV returned)`, async () => {
      const e = plain.get(family)!;
      const pb = leftPad(seqs(e.vocabSize, [37, 29, 9]));
      const steer = steeringMatrix(e.numLayers, e.dModel, steerOf(e));
      const hiddenIndex = [0 * pb.width + 36, 1 * pb.width + 8, 1 * pb.width + 20, 2 * pb.width + 36, 0 * pb.width + 3];
      const logitsIndex = [2 * pb.width + 30, 0 * pb.width + 10, 1 * pb.width + 36];
      const inp = { ids: pb.ids, batch: pb.batch, width: pb.width, starts: pb.pads, past: null, steer, hiddenIndex, logitsIndex };
      const ref: StepOutput = await e.step(inp);
      for (const chunk of [1, 5, 16]) {
        const got = await chunkedStep(e, inp, chunk);
        assert.ok(relDiff(got.hidden, ref.hidden) <= EXACT, `chunk ${chunk} hidden ${relDiff(got.hidden, ref.hidden)}`);
        assert.ok(relDiff(got.logits, ref.logits) <= EXACT, `chunk ${chunk} logits`);
        assert.equal(got.present!.length, ref.present!.length);
        for (let l = 0; l < e.numLayers; l++) {
          // only real slots matter: compare rows' real KV (pad slots differ: masked garbage)
          for (const kind of ['keys', 'values'] as const) {
            const k = got.present![kind][l]!.data as Float32Array;
            const kr = ref.present![kind][l]!.data as Float32Array;
            const { numKvHeads: kvH, headDim: hd } = e.config;
            // buffers may have spare capacity (dims[2] ≥ length): index each by its own slot stride
            const cap = Number(got.present![kind][l]!.dims[2]);
            const capRef = Number(ref.present![kind][l]!.dims[2]);
            for (let b = 0; b < pb.batch; b++) {
              for (let h = 0; h < kvH; h++) {
                const rows = (buf: Float32Array, c: number) => buf.subarray(((b * kvH + h) * c + pb.pads[b]!) * hd, ((b * kvH + h) * c + pb.width) * hd);
                const diff = relDiff(rows(k, cap), rows(kr, capRef));
                assert.ok(diff <= EXACT, `chunk ${chunk} layer ${l} row ${b} head ${h} ${kind} ${diff}`);
              }
            }
          }
        }
      }
    });

    test(`${family}: forward under the budget = forward (steering, hiddenAt all, logitsAt all; prompts of 2.5, 1.5 chunks, 7 tokens)`, async () => {
      const e = plain.get(family)!;
      const C = budgeted.get(family)!.memoryPlan!.maxChunkTokens;
      const ids = seqs(e.vocabSize, [Math.round(2.5 * C), 7, Math.round(1.5 * C)], 11);
      const opts = { hiddenAt: 'all' as const, logitsAt: 'all' as const, steer: steerOf(e) };
      const ref = await e.forward(ids, opts);
      let steps = 0;
      const b = budgeted.get(family)!;
      const step = b.step.bind(b);
      b.step = async (inp) => { steps++; assert.ok(inp.width <= b.memoryPlan!.maxChunkTokens, `step of ${inp.width} tokens`); return step(inp); };
      try {
        const got = await b.forward(ids, opts);
        got.forEach((r, i) => {
          assert.deepEqual(r.hiddenPositions, ref[i]!.hiddenPositions);
          assert.ok(relDiff(r.hidden, ref[i]!.hidden) <= EXACT, `seq ${i} hidden ${relDiff(r.hidden, ref[i]!.hidden)}`);
          assert.ok(relDiff(r.logits, ref[i]!.logits) <= EXACT, `seq ${i} logits`);
        });
      } finally { b.step = step; }
      assert.ok(steps >= 3 + 1 + 2, `${steps} steps`);
    });

    test(`${family}: generate under the budget = generate (steering, step logits, prompt-last and first-token hidden)`, async () => {
      const e = plain.get(family)!;
      const C = budgeted.get(family)!.memoryPlan!.maxChunkTokens;
      const ids = seqs(e.vocabSize, [2 * C + 5, 5], 3);
      const opts = { maxNewTokens: 4, stopIds: [], steer: steerOf(e), returnStepLogits: true, returnPromptLastHidden: true, returnFirstTokenHidden: true };
      const ref = await e.generate(ids, opts);
      const got = await budgeted.get(family)!.generate(ids, opts);
      got.forEach((r, i) => {
        assert.deepEqual(r.generatedIds, ref[i]!.generatedIds);
        assert.ok(relDiff(r.stepLogits!, ref[i]!.stepLogits!) <= EXACT, `seq ${i} step logits`);
        assert.ok(relDiff(r.promptLastHidden!, ref[i]!.promptLastHidden!) <= EXACT, `seq ${i} prompt-last hidden`);
        assert.ok(relDiff(r.firstTokenHidden!, ref[i]!.firstTokenHidden!) <= EXACT, `seq ${i} first-token hidden`);
      });
    });

    test(`${family}: forwardShared under the budget = forward (long shared prefix, chunked prefix and suffix steps)`, async () => {
      const e = plain.get(family)!;
      const C = budgeted.get(family)!.memoryPlan!.maxChunkTokens;
      const [head, a, b2, c] = seqs(e.vocabSize, [C + 30, C + 20, 4, 9], 19);
      const ids = [[...head!, ...a!], [...head!, ...b2!], [...head!, ...c!], [...a!]];
      const steer = steerOf(e);
      const ref = await e.forward(ids, { hiddenAt: 'last', logitsAt: 'last', steer });
      const { results, stats } = await budgeted.get(family)!.forwardShared(ids, { hiddenAt: 'last', logitsAt: 'last', steer });
      assert.ok(stats.computedTokens < stats.promptTokens);
      results.forEach((r, i) => {
        assert.ok(relDiff(r.hidden, ref[i]!.hidden) <= EXACT, `seq ${i} hidden ${relDiff(r.hidden, ref[i]!.hidden)}`);
        assert.ok(relDiff(r.logits, ref[i]!.logits) <= EXACT, `seq ${i} logits`);
      });
    });
  }

  test('a budget below the weights is refused before the session opens', async () => {
    const dir = join(tmp, 'llama');
    await assert.rejects(createEngine(dir, { maxMemory: 1e5 }), (err: unknown) => {
      assert.ok(err instanceof SafekeepError);
      assert.match(err.message, /--max-memory 98 KiB is too small: the weights alone need .* \(llama 3 layers, d_model 48, f32\)/);
      return true;
    });
  });
});
