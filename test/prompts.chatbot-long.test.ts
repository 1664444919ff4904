/**
 * `chatbot-long` (length control): chatbot + benign filler text whose token length is within ±5 % of the full
 * agent prompt for the same request, on the bundled pair set; and it differs from `chatbot` only by the filler.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { needShared } from './helpers/shared.ts';
import { isInsertion, templateCases } from './helpers/prompts.templates.ts';
import { LENGTH_TOLERANCE, PromptBuilder } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { loadPairSet } from '../src/data/load.ts';

test('chatbot-long is within ±5 % of the agent prompt on the bundled pairs (all with Llama-3.1; subsets with Qwen3 and the Mistral templates)', async (t) => {
  const dir = needShared(t, 'templates');
  if (!dir) return;
  const texts = loadPromptTexts();
  const set = await loadPairSet('pairs');
  const cs = await templateCases(dir, true);
  for (const c of cs) {
    const b = new PromptBuilder(c.tok, { texts });
    // every pair with the real Llama-3.1 tokenizer; every 4th with Qwen3; the Mistral templates have no npm
    // vocabulary (the Llama-3 one stands in), every 10th (keeps the file fast on 2 cores)
    const every = c.name === 'llama-3.1' ? 1 : c.name === 'qwen3' ? 4 : 10;
    const pairs = set.pairs.filter((_, i) => i % every === 0);
    let worst = 0;
    let n = 0;
    for (const p of pairs) {
      for (const r of [p.harmful, p.benign]) {
        const long = b.render(r.prompt, p.tools, 'chatbot-long');
        const agent = b.render(r.prompt, p.tools, 'agent', 'schema');
        const target = agent.ids!.length;
        assert.equal(long.lengthTarget!.agentTokens, target);
        const rel = Math.abs(long.ids!.length - target) / target;
        assert.ok(rel <= LENGTH_TOLERANCE, `${c.name} ${p.id}: ${long.ids!.length} vs ${target} tokens`);
        worst = Math.max(worst, rel);
        n++;
        const chat = b.render(r.prompt, p.tools, 'chatbot').text;
        assert.ok(isInsertion(chat, long.text, c.systemInsertion(b.fillerWords(long.lengthTarget!.fillerWords))), `${c.name} ${p.id}: only the filler is added`);
        // the filler never stops mid-sentence
        const filler = b.fillerWords(long.lengthTarget!.fillerWords);
        if (filler) assert.match(filler, /[.!?]["'”’)\]]*$/, `${c.name} ${p.id}: filler ends mid-sentence: …${filler.slice(-40)}`);
        assert.ok(!long.text.includes(texts.role) && !long.text.includes('"type"'));
      }
    }
    t.diagnostic(`${c.name}: ${n} requests, worst |length - agent| / agent = ${(worst * 100).toFixed(2)} %`);
  }
});

test('fillerWords: prefixes of the filler text, repeated with a blank line when longer than one copy', () => {
  const texts = { ...loadPromptTexts(), filler: 'One two  three.\nFour' };
  const tok = { render: () => '', vocab: 'none' } as unknown as ConstructorParameters<typeof PromptBuilder>[0];
  const b = new PromptBuilder(tok, { texts });
  assert.equal(b.fillerWords(0), '');
  assert.equal(b.fillerWords(3), 'One two  three.');
  assert.equal(b.fillerWords(4), 'One two  three.\nFour');
  assert.equal(b.fillerWords(6), 'One two  three.\nFour\n\nOne two');
});

test('sentenceEndsAround: word counts at sentence ends (and whole copies), k on each side', () => {
  const texts = { ...loadPromptTexts(), filler: 'One two three. Four five! Six seven eight' };
  const tok = { render: () => '', vocab: 'none' } as unknown as ConstructorParameters<typeof PromptBuilder>[0];
  const b = new PromptBuilder(tok, { texts });
  // sentence ends after words 3, 5 and 8 (end of the copy); the next copy's at 11, 13, 16
  assert.deepEqual(b.sentenceEndsAround(4, 2), [3, 5, 8]);
  assert.deepEqual(b.sentenceEndsAround(9, 2), [5, 8, 11, 13]);
  assert.deepEqual(b.sentenceEndsAround(5, 1), [5, 8]);
});
