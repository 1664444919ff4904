/**
 * A request's sampling fields (src/serve/sampling-fields.ts): OpenAI's and vLLM's fields to the engine's settings,
 * with their ranges; a field that would change nothing because no temperature was named is a 400 naming it, never a
 * silently greedy answer; a sampled request without a seed gets one drawn (and reported by the server).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HttpError } from '../src/http/errors.ts';
import { MAX_CHOICES, samplingFields } from '../src/serve/sampling-fields.ts';

const parse = (b: Record<string, unknown>, vocabSize?: number) => samplingFields(b, { draw: () => 4242, vocabSize });

test('no field, or only greedy no-op values: no settings (the plain greedy path)', () => {
  assert.deepEqual(parse({}), { n: 1, seedDrawn: false });
  assert.deepEqual(parse({ temperature: 0, top_p: 1, seed: 3, frequency_penalty: 0, presence_penalty: 0, logit_bias: {}, temperature_: undefined }), { n: 1, seedDrawn: false });
  assert.deepEqual(parse({ temperature: null, top_p: null, n: null, seed: null }), { n: 1, seedDrawn: false });
  // explicit temperature 0: the filters are the greedy limit's no-ops, as in vLLM
  assert.deepEqual(parse({ temperature: 0, top_p: 0.5, top_k: 3, min_p: 0.2 }), { n: 1, seedDrawn: false });
  assert.deepEqual(parse({ temperature: 0, n: 3 }), { n: 3, seedDrawn: false });
});

test('OpenAI and vLLM fields map to the settings; n and the seed', () => {
  const r = parse({ temperature: 0.7, top_p: 0.9, top_k: 20, min_p: 0.05, repetition_penalty: 1.1, frequency_penalty: 0.5, presence_penalty: -0.5, logit_bias: { '50256': -100, '7': 2.5 }, n: 4, seed: 11 });
  assert.deepEqual(r, { settings: { temperature: 0.7, topP: 0.9, topK: 20, minP: 0.05, repetitionPenalty: 1.1, frequencyPenalty: 0.5, presencePenalty: -0.5, logitBias: { 50256: -100, 7: 2.5 }, seed: 11 }, n: 4, seedDrawn: false });
  assert.deepEqual(parse({ temperature: 2 }), { settings: { temperature: 2, seed: 4242 }, n: 1, seedDrawn: true });
  // vLLM: top_k -1 and 0 are off
  assert.deepEqual(parse({ temperature: 1, top_k: -1, seed: 1 }).settings, { temperature: 1, seed: 1 });
  // penalties apply to greedy requests (no seed needed)
  assert.deepEqual(parse({ frequency_penalty: 1, logit_bias: { 3: 1 } }), { settings: { frequencyPenalty: 1, logitBias: { 3: 1 } }, n: 1, seedDrawn: false });
});

test('a bad value is a 400 naming the field', () => {
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ temperature: 2.5 }, /"temperature" must be a number from 0 to 2/],
    [{ temperature: '1' }, /"temperature" must be a number/],
    [{ temperature: 1, top_p: -0.1 }, /"top_p" must be a number from 0 to 1/],
    [{ temperature: 1, top_k: 1.5 }, /"top_k" must be an integer/],
    [{ temperature: 1, top_k: -2 }, /"top_k" must be an integer from -1/],
    [{ temperature: 1, min_p: 2 }, /"min_p" must be a number from 0 to 1/],
    [{ repetition_penalty: 0 }, /"repetition_penalty" must be a number above 0/],
    [{ frequency_penalty: 3 }, /"frequency_penalty" must be a number from -2 to 2/],
    [{ presence_penalty: -2.5 }, /"presence_penalty" must be a number from -2 to 2/],
    [{ n: 0 }, /"n" must be an integer from 1 to 16/],
    [{ n: MAX_CHOICES + 1 }, /"n" must be an integer from 1/],
    [{ n: 2.5 }, /"n" must be an integer/],
    [{ seed: 1.5 }, /"seed" must be an integer/],
    [{ seed: 2 ** 60 }, /"seed" must be an integer/],
    [{ logit_bias: [1] }, /"logit_bias" must be an object/],
    [{ logit_bias: { abc: 1 } }, /"logit_bias": "abc" is not a token id/],
    [{ logit_bias: { 5: 101 } }, /"logit_bias".5 must be a number from -100 to 100/],
    [{ logit_bias: Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [String(i), 1])) }, /at most 1024 entries/],
    [{ top_p: 0.9 }, /"top_p" needs "temperature": this server decodes greedily when a request names no temperature/],
    [{ top_k: 5, min_p: 0.1 }, /"top_k", "min_p" need "temperature"/],
    [{ n: 2 }, /"n" needs "temperature"/],
    [{ temperature: 1, seed: Number.MAX_SAFE_INTEGER, n: 2 }, /"seed" \+ "n" − 1 must stay a 53-bit integer/],
  ];
  for (const [b, re] of bad) {
    assert.throws(() => parse(b), (e: unknown) => e instanceof HttpError && e.status === 400 && re.test(e.message), JSON.stringify(b).slice(0, 80));
  }
  // with the vocabulary known, a bias on an id outside it is a 400 too
  assert.throws(() => parse({ logit_bias: { 48: 1 } }, 48), (e: unknown) => e instanceof HttpError && /"logit_bias" must be keyed by token ids below the vocabulary size 48/.test(e.message));
  assert.doesNotThrow(() => parse({ logit_bias: { 47: 1 } }, 48));
});
