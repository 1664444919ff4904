/**
 * Interventions as data (add / ablate / clamp, several at once, positions 'all' | 'generated') against the Float64
 * oracle (src/engine/reference.ts), which applies them in its own Float64 code: forward hidden states and logits,
 * KV-cached greedy decoding, shared-prefix reuse; plus the analytic facts (after an ablation hidden[l]·r̂ = 0, after
 * a clamp it is alpha, at every position) and the refusals of bad input.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Checkpoint } from '../src/checkpoint/types.ts';
import { createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import type { Intervention } from '../src/engine/types.ts';
import { isSafekeepError } from '../src/util/errors.ts';
import { TINY_MODELS, maxAbsDiff, tempCache } from './helpers/engine.ts';

const TOL = 1e-4;

function prompts(vocab: number): number[][] {
  let s = 777;
  const next = () => { s = (s * 1103515245 + 12345) % 2147483648; return 3 + (s % (vocab - 3)); };
  return [7, 3, 12].map((n) => Array.from({ length: n }, next));
}

const direction = (d: number, phase: number) => Array.from({ length: d }, (_, i) => Math.sin(i * 0.7 + phase));
const unit = (v: number[]) => { const n = Math.hypot(...v); return v.map((x) => x / n); };
/** hidden [L+1, n, d]: row (l, t) · u */
const along = (h: Float32Array, n: number, d: number, l: number, t: number, u: number[]) =>
  u.reduce((s, x, i) => s + x * h[(l * n + t) * d + i]!, 0);

for (const family of ['llama', 'qwen3'] as const) {
  describe(`interventions vs the Float64 oracle: ${family}`, () => {
    let tmp: string;
    let cache: ReturnType<typeof tempCache>;
    let ck: Checkpoint;
    let engine: OnnxEngine;
    let seqs: number[][];
    let L: number;
    let d: number;

    before(async () => {
      cache = tempCache();
      tmp = mkdtempSync(join(tmpdir(), `safekeep-intervene-${family}-`));
      await writeRandomCheckpoint(join(tmp, 'm'), family, { ...TINY_MODELS[family], seed: 11, std: 0.2 });
      ck = await loadCheckpoint(join(tmp, 'm'));
      engine = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 2 });
      seqs = prompts(ck.config.vocabSize);
      L = ck.config.numLayers;
      d = ck.config.hiddenSize;
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
      if (tmp) rmSync(tmp, { recursive: true, force: true });
    });

    const sets = (): [string, Intervention[]][] => [
      ['ablate at hidden[2]', [{ layer: 2, kind: 'ablate', vector: direction(d, 0) }]],
      ['clamp at hidden[1] to 3', [{ layer: 1, kind: 'clamp', vector: direction(d, 1), alpha: 3 }]],
      ['ablate the embeddings and the last layer', [{ layer: 0, kind: 'ablate', vector: direction(d, 2) }, { layer: L, kind: 'ablate', vector: direction(d, 3) }]],
      ['add and clamp at one layer, ablate at another', [
        { layer: 1, kind: 'add', vector: direction(d, 4), alpha: 2 },
        { layer: 1, kind: 'clamp', vector: direction(d, 5), alpha: -1.5 },
        { layer: 2, kind: 'ablate', vector: direction(d, 6) },
      ]],
    ];

    test('forward: hidden states and logits equal the oracle; ablated / clamped projections are 0 / alpha', async () => {
      const plain = await engine.forward(seqs);
      for (const [name, ivs] of sets()) {
        const out = await engine.forward(seqs, { interventions: ivs });
        seqs.forEach((ids, i) => {
          const ref = referenceForward(ck, ids, { interventions: ivs });
          assert.ok(maxAbsDiff(out[i]!.hidden, ref.hidden) <= TOL, `${name}, seq ${i}: hidden ${maxAbsDiff(out[i]!.hidden, ref.hidden)}`);
          assert.ok(maxAbsDiff(out[i]!.logits, ref.logits) <= TOL, `${name}, seq ${i}: logits ${maxAbsDiff(out[i]!.logits, ref.logits)}`);
          assert.ok(maxAbsDiff(out[i]!.logits, plain[i]!.logits) > 1e-3, `${name}: the intervention changes the logits`);
          for (const iv of ivs.filter((x) => x.kind !== 'add')) {
            const u = unit(iv.vector as number[]);
            for (let t = 0; t < ids.length; t++) {
              const p = along(out[i]!.hidden, ids.length, d, iv.layer, t, u);
              assert.ok(Math.abs(p - (iv.kind === 'clamp' ? iv.alpha! : 0)) <= 1e-4, `${name}: hidden[${iv.layer}]·r̂ at ${t} = ${p}`);
            }
          }
        });
      }
    });

    test('the steering shorthand is an add of −alpha', async () => {
      const steer = { layer: 2, vector: direction(d, 7), alpha: 1.25 };
      const [a] = await engine.forward([seqs[0]!], { steer });
      const [b] = await engine.forward([seqs[0]!], { interventions: [{ layer: 2, kind: 'add', vector: direction(d, 7), alpha: -1.25 }] });
      assert.deepEqual(a!.hidden, b!.hidden);
    });

    test('generate: KV-cached greedy decoding with interventions, positions all and generated, equals the oracle', async () => {
      const ivs: Intervention[] = [
        { layer: 1, kind: 'ablate', vector: direction(d, 8) },
        { layer: 2, kind: 'clamp', vector: direction(d, 9), alpha: 2, positions: 'generated' },
      ];
      const gen = await engine.generate(seqs, { maxNewTokens: 5, stopIds: [], interventions: ivs, returnStepLogits: true, returnFirstTokenHidden: true, returnPromptLastHidden: true });
      seqs.forEach((ids, i) => {
        const ref = referenceGenerate(ck, ids, { maxNewTokens: 5, stopIds: [], interventions: ivs });
        assert.deepEqual(gen[i]!.generatedIds, ref.generatedIds, `seq ${i} ids`);
        assert.ok(maxAbsDiff(gen[i]!.stepLogits!, ref.stepLogits) <= TOL, `seq ${i} step logits ${maxAbsDiff(gen[i]!.stepLogits!, ref.stepLogits)}`);
        assert.ok(maxAbsDiff(gen[i]!.firstTokenHidden!, ref.firstTokenHidden!) <= TOL, `seq ${i} first token hidden`);
        assert.ok(maxAbsDiff(gen[i]!.promptLastHidden!, ref.promptLastHidden) <= TOL, `seq ${i} prompt hidden`);
        // the 'generated' clamp left the prompt alone and holds on the fed-back token
        const u = unit(ivs[1]!.vector as number[]);
        assert.ok(Math.abs(along(gen[i]!.promptLastHidden!, 1, d, 2, 0, u) - 2) > 1e-2, 'prompt not clamped');
        assert.ok(Math.abs(along(gen[i]!.firstTokenHidden!, 1, d, 2, 0, u) - 2) <= 1e-4, 'generated token clamped');
      });
    });

    test('shared-prefix reuse with interventions equals forward', async () => {
      const ivs: Intervention[] = [{ layer: 1, kind: 'clamp', vector: direction(d, 10), alpha: 1 }];
      const shared = [...seqs.map((s) => [5, 6, 7, 8, ...s]), [5, 6, 7, 8, 9]];
      const ref = await engine.forward(shared, { interventions: ivs, hiddenAt: 'last', logitsAt: 'last' });
      const { results, stats } = await engine.forwardShared(shared, { interventions: ivs, hiddenAt: 'last', logitsAt: 'last' });
      assert.ok(stats.computedTokens < stats.promptTokens, 'the shared prefix was reused');
      results.forEach((r, i) => assert.ok(maxAbsDiff(r.hidden, ref[i]!.hidden) <= TOL, `prompt ${i}: ${maxAbsDiff(r.hidden, ref[i]!.hidden)}`));
    });

    test('bad interventions are one SafekeepError each', async () => {
      const bad: [Intervention[], RegExp][] = [
        [[{ layer: L + 1, kind: 'ablate', vector: direction(d, 0) }], /out of range 0\.\./],
        [[{ layer: 1, kind: 'clamp', vector: direction(d, 0) }], /alpha must be a finite number/],
        [[{ layer: 1, kind: 'ablate', vector: direction(d - 1, 0) }], /d_model is/],
        [[{ layer: 1, kind: 'ablate', vector: new Array(d).fill(0) }], /all zeros/],
        [[{ layer: 1, kind: 'ablate', vector: direction(d, 0) }, { layer: 1, kind: 'clamp', vector: direction(d, 1), alpha: 1 }], /one per layer/],
        [[{ layer: 1, kind: 'scale' as 'add', vector: direction(d, 0), alpha: 1 }], /kind must be one of add, ablate, clamp/],
      ];
      for (const [ivs, msg] of bad) {
        await assert.rejects(engine.forward([seqs[0]!], { interventions: ivs }), (e: unknown) => isSafekeepError(e) && msg.test((e as Error).message));
      }
    });
  });
}
