/**
 * The Float64 oracle against Hugging Face transformers' own outputs (../shared/fixtures/hf-reference).
 * Their hidden_states[N] is final-normed; ours hidden[N] is not, so the raw layer outputs (hooks) are compared:
 * layer_outputs[i] ↔ our hidden[i+1]. Their steering hook on model.layers[2] = our hidden[3].
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { readSafetensorsHeader } from '../src/checkpoint/safetensors.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import { hiddenAt, referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import { needShared } from './helpers/shared.ts';

const TOL = 1e-4;

interface Inputs { seqs: number[][]; steer_v: number[]; steer_alpha: number; steer_layer: number; max_new_tokens: number }

function refs(root: string, tag: string): Map<string, { shape: number[]; data: Float32Array }> {
  const h = readSafetensorsHeader(join(root, 'refs', `${tag}.safetensors`));
  return new Map(h.entries.map((e) => [e.name, { shape: e.shape, data: readTensorF32({ ...e, dtype: 'F32' }) }]));
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length, 'length');
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

function close(name: string, got: ArrayLike<number>, want: ArrayLike<number>): void {
  const m = maxDiff(got, want);
  assert.ok(m <= TOL, `${name}: max |diff| ${m.toExponential(2)} > ${TOL}`);
}

for (const tag of ['llama3-tiny-f32', 'qwen3-tiny-f32']) {
  test(`reference forward = transformers on ${tag}: hidden states, layer outputs, logits (3 sequences)`, async (t) => {
    const root = needShared(t, 'fixtures', 'hf-reference');
    if (!root) return;
    const inputs = JSON.parse(readFileSync(join(root, 'inputs.json'), 'utf8')) as Inputs;
    const ck = await loadCheckpoint(join(root, 'models', tag));
    const R = refs(root, tag);
    const L = ck.config.numLayers;
    const d = ck.config.hiddenSize;
    let worst = 0;
    inputs.seqs.forEach((ids, i) => {
      const T = ids.length;
      const r = referenceForward(ck, ids);
      const hs = R.get(`seq${i}.hidden_states`)!;
      const lo = R.get(`seq${i}.layer_outputs`)!;
      assert.deepEqual(hs.shape, [L + 1, T, d]);
      close(`seq${i} hidden[0]`, r.hidden.subarray(0, T * d), hs.data.subarray(0, T * d));
      close(`seq${i} hidden[1..L] vs layer_outputs`, r.hidden.subarray(T * d), lo.data);
      close(`seq${i} hidden[1..L-1] vs hidden_states`, r.hidden.subarray(T * d, L * T * d), hs.data.subarray(T * d, L * T * d));
      close(`seq${i} logits`, r.logits, R.get(`seq${i}.logits`)!.data);
      worst = Math.max(worst, maxDiff(r.logits, R.get(`seq${i}.logits`)!.data), maxDiff(r.hidden.subarray(T * d), lo.data));
    });
    t.diagnostic(`${tag}: max |diff| vs transformers ${worst.toExponential(2)}`);
  });

  test(`reference greedy and steered greedy = transformers generate() on ${tag}`, async (t) => {
    const root = needShared(t, 'fixtures', 'hf-reference');
    if (!root) return;
    const inputs = JSON.parse(readFileSync(join(root, 'inputs.json'), 'utf8')) as Inputs;
    const ck = await loadCheckpoint(join(root, 'models', tag));
    const R = refs(root, tag);
    const meta = JSON.parse(readFileSync(join(root, 'refs', `${tag}.json`), 'utf8')) as { gen: { new_ids: number[] }; steer: { new_ids: number[] } };
    const L = ck.config.numLayers;
    const d = ck.config.hiddenSize;
    const n = inputs.max_new_tokens;

    const g = referenceGenerate(ck, inputs.seqs[0]!, { maxNewTokens: n, stopIds: [] });
    assert.deepEqual(g.generatedIds, meta.gen.new_ids);
    assert.equal(g.finish, 'length');
    close('gen.step_logits', g.stepLogits, R.get('gen.step_logits')!.data);
    const fh = g.firstTokenHidden!;
    close('first token hidden[0]', fh.subarray(0, d), R.get('gen.step1.hidden_states')!.data.subarray(0, d));
    close('first token hidden[1..L]', fh.subarray(d), R.get('gen.step1.layer_outputs')!.data);

    // their hook on model.layers[2] (output of block 2) is our hidden[3]
    const steer = { layer: inputs.steer_layer + 1, vector: inputs.steer_v, alpha: inputs.steer_alpha };
    const T = inputs.seqs[0]!.length;
    const sf = referenceForward(ck, inputs.seqs[0]!, { steer });
    close('steer.prefill_logits', sf.logits, R.get('steer.prefill_logits')!.data);
    close('steer.prefill_layer_outputs', sf.hidden.subarray(T * d), R.get('steer.prefill_layer_outputs')!.data);
    const sg = referenceGenerate(ck, inputs.seqs[0]!, { maxNewTokens: n, stopIds: [], steer });
    assert.deepEqual(sg.generatedIds, meta.steer.new_ids);
    assert.notDeepEqual(sg.generatedIds, g.generatedIds);
    close('steer.step_logits', sg.stepLogits, R.get('steer.step_logits')!.data);
    // the prompt's last hidden state is the prefill's last row
    assert.deepEqual(sg.promptLastHidden, hiddenAt(sf.hidden, L, T, d, T - 1));
  });
}
