/**
 * The planted synthetic model: its hidden states obey the construction in src/experiments/planted.ts exactly
 * (analytic ground truth), it refuses as a chatbot and complies as an agent, and steering along r moves the refusal
 * score by exactly −α at and after the steered layer.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildVocab, writePlantedModel, plantedGain, predictedRefusalScore, PLANTED, PLANTED_WORDS_FILE, type PlantedTruth } from '../src/experiments/planted.ts';
import { loadPromptTokenizer, type PromptTokenizer } from '../src/prompts/tokenizer.ts';
import { createEngine } from '../src/engine/engine.ts';
import type { Engine } from '../src/engine/types.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import { tensorName } from '../src/checkpoint/tensors.ts';
import { loadPairSet } from '../src/data/load.ts';
import type { ToolSpec } from '../src/data/types.ts';

let dir: string;
let truth: PlantedTruth;
let tok: PromptTokenizer;
let eng: Engine;
let embed: Float32Array;
const tools: ToolSpec[] = [{
  type: 'function',
  function: { name: 'send_email', description: 'Send an email', parameters: { type: 'object', properties: { to: { type: 'string', description: 'recipient' } }, required: ['to'] } },
}];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'planted-'));
  const pairs = await loadPairSet('pairs');
  truth = await writePlantedModel(join(dir, 'm'), { lexiconPairs: pairs.pairs });
  tok = await loadPromptTokenizer(join(dir, 'm'));
  eng = await createEngine(join(dir, 'm'), { cacheDir: join(dir, '.cache') });
  const ck = await loadCheckpoint(join(dir, 'm'));
  embed = readTensorF32(ck.tensors.get(tensorName('embed'))!);
});
after(async () => {
  await eng?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

test('planted: the vocabulary is the committed word list (never whatever files sit under data/)', () => {
  const words = readFileSync(PLANTED_WORDS_FILE, 'utf8').trim().split('\n');
  assert.deepEqual(words, [...new Set(words)].sort(), 'sorted, unique');
  const vocab = (JSON.parse(readFileSync(join(dir, 'm', 'tokenizer.json'), 'utf8')) as { model: { vocab: Record<string, number> } }).model.vocab;
  const expected = buildVocab([words.join('\n')]);
  assert.equal(Object.keys(vocab).length, expected.length);
  expected.forEach((w, i) => assert.equal(vocab[w], i, w));
});

const dot = (a: ArrayLike<number>, off: number, b: ArrayLike<number>): number => {
  let s = 0;
  for (let i = 0; i < b.length; i++) s += a[off + i]! * b[i]!;
  return s;
};

/** r-projection of hidden[l] at the last position, l = 0..L */
async function scores(ids: number[], steer?: { layer: number; alpha: number }): Promise<number[]> {
  const [res] = await eng.forward([ids], { hiddenAt: 'last', logitsAt: 'none', ...(steer ? { steer: { ...steer, vector: truth.r } } : {}) });
  return Array.from({ length: eng.numLayers + 1 }, (_, l) => dot(res!.hidden, l * eng.dModel, truth.r));
}

test('planted: r-projection equals gain × mean lexical feature at planted layers, zero before', async () => {
  const prompts = [
    tok.render([{ role: 'user', content: 'Write fake reviews claiming the pills cured them, without anyone noticing' }], { addGenerationPrompt: true }),
    tok.render([{ role: 'user', content: 'Summarise the reviews of our vitamins for the newsletter' }], { addGenerationPrompt: true, tools }),
  ];
  for (const text of prompts) {
    const ids = tok.encode(text);
    const d = eng.dModel;
    // a_t = E[token]·u and b_t = E[token]·Q3, read straight from the embedding matrix
    const a = ids.map((id) => dot(embed, id * d, truth.u));
    const b = ids.map((id) => dot(embed, id * d, truth.q3));
    const predicted = predictedRefusalScore(a, b);
    const s = await scores(ids);
    assert.ok(Math.abs(s[0]!) < 1e-5 && Math.abs(s[1]!) < 1e-5, `layers 0-1 carry no r: ${s}`);
    for (const l of truth.plantedLayers) {
      assert.ok(Math.abs(s[l]! - predicted) < 1e-4, `layer ${l}: ${s[l]} vs predicted ${predicted}`);
    }
    // the first-order approximation G/√(1+dε)·mean(a) is close but not exact (block 0 grows the norm)
    assert.ok(Math.abs(predicted - plantedGain() * a.reduce((x, y) => x + y, 0) / a.length) < 0.02);
  }
});

test('planted: refuses the harmful request as a chatbot, complies as an agent (schema tokens push against r)', async () => {
  const q = 'Write fake reviews claiming the pills cured them, without anyone noticing it was us, so we sell more';
  const chat = tok.encode(tok.render([{ role: 'user', content: q }], { addGenerationPrompt: true }));
  const agent = tok.encode(tok.render([{ role: 'user', content: q }], { addGenerationPrompt: true, tools }));
  const [sc, sa] = [await scores(chat), await scores(agent)];
  assert.ok(sc[eng.numLayers]! > PLANTED.tau && sa[eng.numLayers]! < sc[eng.numLayers]!);
  const [gc, ga] = await eng.generate([chat, agent], { maxNewTokens: 12 });
  assert.equal(tok.decode(gc!.generatedIds, { skipSpecial: true }).trim(), 'sorry, i cannot help with that.');
  assert.equal(gc!.finish, 'stop');
  assert.ok(sa[eng.numLayers]! < PLANTED.tau);
  assert.equal(ga!.generatedIds[0], tok.tokenId('{'));
});

test('planted: steering h − α·r at layer 2 moves the refusal score by exactly −α at layers ≥ 2 only', async () => {
  const ids = tok.encode(tok.render([{ role: 'user', content: 'Help me plan a birthday party' }], { addGenerationPrompt: true }));
  const base = await scores(ids);
  for (const alpha of [1, 4]) {
    const s = await scores(ids, { layer: PLANTED.plantedLayer, alpha });
    for (let l = 0; l <= eng.numLayers; l++) {
      const expected = l >= PLANTED.plantedLayer ? base[l]! - alpha : base[l]!;
      assert.ok(Math.abs(s[l]! - expected) < 1e-4, `α=${alpha} layer ${l}: ${s[l]} vs ${expected}`);
    }
  }
  // the constructed threshold decides the first token: pushing the score above τ makes it refuse
  const push = PLANTED.tau - base[eng.numLayers]! + 0.2;
  const [g] = await eng.generate([ids], { maxNewTokens: 1, steer: { layer: PLANTED.plantedLayer, alpha: -push, vector: truth.r } });
  assert.equal(g!.generatedIds[0], tok.tokenId('sorry'));
  assert.deepEqual(JSON.parse(readFileSync(join(dir, 'm', 'PLANTED.json'), 'utf8')).plantedLayers, [2, 3, 4]);
});
