/**
 * Interventions (add / ablate / clamp, several at once) against transformers' own forward hooks:
 * test/fixtures/hf5-intervene (scripts/hf-fixtures/interventions.py) holds transformers 5's hidden states, logits
 * and greedy generation with the interventions applied by hooks on embed_tokens / model.layers[l-1], for checkpoints
 * of test/fixtures/hf5. Both the ONNX engine and the Float64 oracle are checked against them.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import type { Checkpoint } from '../src/checkpoint/types.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { referenceForward } from '../src/engine/reference.ts';
import type { Intervention } from '../src/engine/types.ts';
import { maxAbsDiff, readAllF32, tempCache } from './helpers/engine.ts';
import { HF5 } from './helpers/hf5.ts';
import { repoRoot } from './helpers/shared.ts';

const DIR = join(repoRoot, 'test', 'fixtures', 'hf5-intervene');
const TOL = 1e-4;

interface Index {
  prompt: number[];
  new_tokens: number;
  cases: Record<string, Record<string, { interventions: Intervention[]; greedy: number[] }>>;
}
const index = JSON.parse(readFileSync(join(DIR, 'index.json'), 'utf8')) as Index;

for (const [tag, sets] of Object.entries(index.cases)) {
  describe(`interventions vs transformers forward hooks: ${tag}`, () => {
    let engine: OnnxEngine;
    let ck: Checkpoint;
    let cache: ReturnType<typeof tempCache>;
    before(async () => {
      cache = tempCache();
      ck = await loadCheckpoint(join(HF5, tag, 'model'));
      engine = await createEngine(join(HF5, tag, 'model'), { cacheDir: cache.dir, threads: 1 });
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
    });

    for (const [name, c] of Object.entries(sets)) {
      test(`${name}: ${c.interventions.map((iv) => `${iv.kind}@${iv.layer}`).join(', ')}`, async (t) => {
        const refs = readAllF32(join(DIR, `${tag}.${name}.safetensors`));
        const ref = (n: string) => refs.get(n)!.data;
        const close = (what: string, got: ArrayLike<number>, want: ArrayLike<number>) => {
          const d = maxAbsDiff(got, want);
          assert.ok(d <= TOL, `${what}: max |diff| ${d.toExponential(2)} > ${TOL}`);
        };
        const [f] = await engine.forward([index.prompt], { interventions: c.interventions });
        close('engine hidden', f!.hidden, ref('hidden'));
        close('engine logits', f!.logits, ref('logits'));
        const o = referenceForward(ck, index.prompt, { interventions: c.interventions });
        close('oracle hidden', o.hidden, ref('hidden'));
        close('oracle logits', o.logits, ref('logits'));
        const [g] = await engine.generate([index.prompt], { maxNewTokens: index.new_tokens, stopIds: [], interventions: c.interventions, returnStepLogits: true });
        assert.deepEqual(g!.generatedIds, c.greedy);
        close('step logits', g!.stepLogits!, ref('step_logits'));
        t.diagnostic(`max |diff| vs transformers: hidden ${maxAbsDiff(f!.hidden, ref('hidden')).toExponential(2)}, logits ${maxAbsDiff(f!.logits, ref('logits')).toExponential(2)}`);
      });
    }
  });
}
