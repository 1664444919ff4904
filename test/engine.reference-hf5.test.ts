/**
 * The Float64 oracle against transformers 5 on its own checkpoints (test/fixtures/hf5): every RoPE type, sliding
 * windows, hidden states (hidden[L] before the final norm), logits, greedy and steered greedy ids with the KV cache.
 * The oracle's RoPE and window code (reference.ts) is written independently of the engine's (rope.ts, kv.ts), and
 * its inverse frequencies are also compared with rope.ts directly.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { ropeInvFreq } from '../src/checkpoint/rope.ts';
import { referenceForward, referenceGenerate, referenceRope } from '../src/engine/reference.ts';
import { maxAbsDiff } from './helpers/engine.ts';
import { HF5, hf5Index, hf5Refs } from './helpers/hf5.ts';

const TOL = 1e-4;
const index = hf5Index();

for (const [tag, c] of Object.entries(index.cases)) {
  test(`oracle = transformers 5 on ${tag}: hidden states, logits, greedy and steered greedy`, async (t) => {
    const ck = await loadCheckpoint(join(HF5, tag, 'model'));
    const refs = hf5Refs(tag, c);
    const ref = (n: string) => refs.get(n)!.data;
    const close = (what: string, got: ArrayLike<number>, want: ArrayLike<number>) => {
      const d = maxAbsDiff(got, want);
      assert.ok(d <= TOL, `${what}: max |diff| ${d.toExponential(2)} > ${TOL}`);
      return d;
    };
    const r = referenceForward(ck, index.prompt);
    const worst = Math.max(close('hidden', r.hidden, ref('hidden')), close('logits', r.logits, ref('logits')));
    const g = referenceGenerate(ck, index.prompt, { maxNewTokens: index.new_tokens, stopIds: [] });
    assert.deepEqual(g.generatedIds, c.greedy);
    close('step logits', g.stepLogits, ref('step_logits'));
    close('first token hidden', g.firstTokenHidden!, ref('first_hidden'));
    const steer = { layer: index.steer.layer, vector: index.steer.vector, alpha: index.steer.alpha };
    const s = referenceGenerate(ck, index.prompt, { maxNewTokens: index.new_tokens, stopIds: [], steer });
    assert.deepEqual(s.generatedIds, c.steered);
    close('steered step logits', s.stepLogits, ref('steer.step_logits'));
    t.diagnostic(`${tag}: prefill max |diff| vs transformers ${worst.toExponential(2)}`);
  });
}

test('oracle RoPE (reference.ts) = engine RoPE (rope.ts) for every type, at and beyond the dynamic threshold', async () => {
  for (const [tag, c] of Object.entries(index.cases)) {
    const ck = await loadCheckpoint(join(HF5, tag, 'model'));
    for (const n of [1, 24, 25, 40, 48, 200]) {
      const o = referenceRope(ck.config, n);
      const e = ropeInvFreq(ck.config, n);
      const d = maxAbsDiff(o.invFreq, e);
      assert.ok(d <= 1e-12 * Math.max(...e), `${tag} at length ${n}: ${d}`);
    }
    if (c.rope === 'dynamic') assert.notDeepEqual(ropeInvFreq(ck.config, 40), ropeInvFreq(ck.config, 24), 'dynamic grows θ beyond max positions');
  }
});
