/**
 * The ONNX engine vs the independent Float64 oracle (src/engine/reference.ts) on small random checkpoints of all
 * four families: llama (llama3 RoPE scaling, untied, sharded), mistral (untied, 1 KV head), qwen2 (q/k/v bias,
 * tied), qwen3 (q/k norm, tied, explicit head_dim ≠ hidden/heads); GQA everywhere. Prefill hidden states + logits,
 * KV-cache greedy decode (step logits, first generated token's hidden state), steering — in f32 and bf16.
 * All three attention kernels (the ONNX Attention op, MultiHeadAttention, standard ops) are checked.
 * bf16: a BF16-stored checkpoint gives the exact upcast under both --dtype values, and an F32 checkpoint run with
 * --dtype bf16 equals the oracle on the same draws stored as BF16 (round-to-nearest-even). F16 storage: exact upcast.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Checkpoint, Family } from '../src/checkpoint/types.ts';
import { createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import { TINY_MODELS, maxAbsDiff, tempCache } from './helpers/engine.ts';

const TOL = 1e-4;

const CASES = (['llama', 'mistral', 'qwen2', 'qwen3'] as const).map((family) => ({ family, opts: TINY_MODELS[family] }));

function prompts(vocab: number): number[][] {
  let s = 12345;
  const next = () => { s = (s * 1103515245 + 12345) % 2147483648; return 3 + (s % (vocab - 3)); };
  return [5, 11, 2].map((n) => Array.from({ length: n }, next));
}

for (const { family, opts } of CASES) {
  describe(`engine vs Float64 oracle: ${family}`, () => {
    let tmp: string;
    let cache: ReturnType<typeof tempCache>;
    let ckF32: Checkpoint;
    let ckBF16: Checkpoint;
    let ckF16: Checkpoint;
    const engines: OnnxEngine[] = [];
    let seqs: number[][];
    let steer: { layer: number; vector: number[]; alpha: number };

    before(async () => {
      cache = tempCache();
      tmp = mkdtempSync(join(tmpdir(), `safekeep-oracle-${family}-`));
      await writeRandomCheckpoint(join(tmp, 'f32'), family, { ...opts, seed: 7 });
      await writeRandomCheckpoint(join(tmp, 'bf16'), family, { ...opts, seed: 7, dtype: 'BF16' });
      ckF32 = await loadCheckpoint(join(tmp, 'f32'));
      ckBF16 = await loadCheckpoint(join(tmp, 'bf16'));
      await writeRandomCheckpoint(join(tmp, 'f16'), family, { ...opts, seed: 7, dtype: 'F16' });
      ckF16 = await loadCheckpoint(join(tmp, 'f16'));
      seqs = prompts(ckF32.config.vocabSize);
      const d = ckF32.config.hiddenSize;
      steer = { layer: 1, vector: Array.from({ length: d }, (_, i) => Math.sin(i + 1)), alpha: 2.5 };
    });
    after(async () => {
      for (const e of engines) await e.dispose();
      cache?.cleanup();
      if (tmp) rmSync(tmp, { recursive: true, force: true });
    });

    // [engine checkpoint, engine dtype, oracle checkpoint]
    const variants = [
      ['F32 checkpoint, --dtype f32', () => ckF32, 'f32', () => ckF32],
      ['F32 checkpoint, --dtype bf16 (RNE-rounded weights)', () => ckF32, 'bf16', () => ckBF16],
      ['BF16 checkpoint, --dtype f32 (exact upcast)', () => ckBF16, 'f32', () => ckBF16],
      ['BF16 checkpoint, --dtype bf16', () => ckBF16, 'bf16', () => ckBF16],
      ['F16 checkpoint, --dtype f32 (exact upcast)', () => ckF16, 'f32', () => ckF16],
    ] as const;

    const cases = [
      ...variants.map(([name, ck, dtype, oc]) => [name, ck, dtype, oc, 'onnx'] as const),
      ['F32 checkpoint, --dtype f32, MultiHeadAttention', () => ckF32, 'f32', () => ckF32, 'mha'] as const,
      ['F32 checkpoint, --dtype f32, standard-op attention', () => ckF32, 'f32', () => ckF32, 'matmul'] as const,
    ];
    for (const [name, engineCk, dtype, oracleCk, attention] of cases) {
      test(`${name}: prefill, steered prefill, KV-cache greedy decode`, async () => {
        const engine = await createEngineFromCheckpoint(engineCk(), { cacheDir: cache.dir, dtype, threads: 2, attention });
        engines.push(engine);
        const oc = oracleCk();
        const fwd = await engine.forward(seqs);
        const fwdSteer = await engine.forward(seqs, { steer });
        for (let i = 0; i < seqs.length; i++) {
          const ref = referenceForward(oc, seqs[i]!);
          assert.ok(maxAbsDiff(fwd[i]!.hidden, ref.hidden) <= TOL, `seq ${i} hidden ${maxAbsDiff(fwd[i]!.hidden, ref.hidden)}`);
          assert.ok(maxAbsDiff(fwd[i]!.logits, ref.logits) <= TOL, `seq ${i} logits ${maxAbsDiff(fwd[i]!.logits, ref.logits)}`);
          const refS = referenceForward(oc, seqs[i]!, { steer });
          assert.ok(maxAbsDiff(fwdSteer[i]!.hidden, refS.hidden) <= TOL, `seq ${i} steered hidden`);
          assert.ok(maxAbsDiff(fwdSteer[i]!.logits, refS.logits) <= TOL, `seq ${i} steered logits`);
          assert.ok(maxAbsDiff(fwdSteer[i]!.logits, ref.logits) > 1e-3, 'steering changes the logits');
        }
        for (const s of [undefined, steer]) {
          const gen = await engine.generate(seqs, { maxNewTokens: 6, stopIds: [], steer: s, returnStepLogits: true, returnFirstTokenHidden: true });
          for (let i = 0; i < seqs.length; i++) {
            const ref = referenceGenerate(oc, seqs[i]!, { maxNewTokens: 6, stopIds: [], steer: s });
            assert.deepEqual(gen[i]!.generatedIds, ref.generatedIds, `seq ${i} greedy ids (steer ${!!s})`);
            assert.ok(maxAbsDiff(gen[i]!.stepLogits!, ref.stepLogits) <= TOL, `seq ${i} step logits ${maxAbsDiff(gen[i]!.stepLogits!, ref.stepLogits)}`);
            assert.ok(maxAbsDiff(gen[i]!.firstTokenHidden!, ref.firstTokenHidden!) <= TOL, `seq ${i} first token hidden`);
          }
        }
      });
    }

    test('--dtype bf16 on F32 weights = the BF16-stored checkpoint (≤ 1e-6), and differs from f32', async () => {
      const [a, b, c] = [engines[0]!, engines[1]!, engines[2]!];
      const [ra] = await a.forward([seqs[1]!]);
      const [rb] = await b.forward([seqs[1]!]);
      const [rc] = await c.forward([seqs[1]!]);
      assert.ok(maxAbsDiff(rb!.hidden, rc!.hidden) <= 1e-6, `bf16-rounded vs BF16-stored hidden ${maxAbsDiff(rb!.hidden, rc!.hidden)}`);
      assert.ok(maxAbsDiff(rb!.logits, rc!.logits) <= 1e-6, 'bf16-rounded vs BF16-stored logits');
      assert.ok(maxAbsDiff(ra!.logits, rb!.logits) > 1e-4, 'the rounding changes the logits');
    });
  });
}
