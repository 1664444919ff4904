/**
 * End-of-turn tokens: the one list (`END_TOKENS`) holds every family's, as their tokenizers and chat templates spell
 * them, and `stripEndTokens` removes all of them and nothing else.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { END_TOKENS, stripEndTokens } from '../src/outcome/parse-calls.ts';
import { npmTokenizerDir } from '../src/prompts/tokenizer.ts';
import { needShared } from './helpers/shared.ts';

const FAMILY_END_TOKENS = {
  llama3: ['<|eot_id|>', '<|eom_id|>', '<|end_of_text|>'],
  qwen: ['<|im_end|>', '<|endoftext|>'],
  mistral: ['</s>'],
  phi3: ['<|end|>', '<|endoftext|>'],
  gemma: ['<end_of_turn>', '<eos>'],
};

test('END_TOKENS holds every family\'s end-of-turn and end-of-text tokens; stripEndTokens removes each', () => {
  for (const [family, toks] of Object.entries(FAMILY_END_TOKENS)) {
    for (const t of toks) {
      assert.ok((END_TOKENS as readonly string[]).includes(t), `${family}: ${t}`);
      assert.equal(stripEndTokens(`Done.${t}`), 'Done.', `${family}: ${t} stripped`);
    }
  }
  assert.equal(stripEndTokens('a<|end|>b<end_of_turn>\nc<|eot_id|><eos></s>'), 'ab\nc');
  // near misses are text, not tokens
  assert.equal(stripEndTokens('<|end_|> <end> <|im_end> end_of_turn <eos/>'), '<|end_|> <end> <|im_end> end_of_turn <eos/>');
});

test('the npm tokenizers\' eos and pad tokens are in the list', () => {
  for (const which of ['llama3', 'qwen3'] as const) {
    const cfg = JSON.parse(readFileSync(join(npmTokenizerDir(which), 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
    for (const k of ['eos_token', 'pad_token']) {
      const v = cfg[k];
      const s = typeof v === 'string' ? v : (v as { content?: string } | null)?.content;
      if (s && /end|eot|eom|eos|<\/s>/.test(s)) assert.ok((END_TOKENS as readonly string[]).includes(s), `${which} ${k} ${s}`);
    }
  }
});

test('the shared chat templates close turns only with tokens in the list', (t) => {
  const root = needShared(t, 'templates');
  if (!root) return;
  const closers: Record<string, string[]> = {
    'llama-3.1-instruct.jinja': ['<|eot_id|>', '<|eom_id|>'],
    'qwen2.5-instruct.jinja': ['<|im_end|>'],
    'qwen3.jinja': ['<|im_end|>'],
  };
  // Mistral's template writes `eos_token` (</s>, in FAMILY_END_TOKENS): no literal to find there
  assert.ok(readFileSync(join(root, 'mistral-7b-instruct-v0.3.hf.jinja'), 'utf8').includes('eos_token'));
  for (const [file, toks] of Object.entries(closers)) {
    const text = readFileSync(join(root, file), 'utf8');
    for (const tok of toks) {
      assert.ok(text.includes(tok), `${file} uses ${tok}`);
      assert.ok((END_TOKENS as readonly string[]).includes(tok));
    }
  }
});

test('stripEndTokens: text without any end token is unchanged; with them inserted, they are all removed (property)', () => {
  const plain = fc.string().filter((s) => !END_TOKENS.some((t) => s.includes(t)));
  fc.assert(fc.property(fc.array(fc.tuple(plain, fc.constantFrom(...END_TOKENS)), { maxLength: 6 }), plain, (parts, tail) => {
    const text = parts.map(([p, t]) => p + t).join('') + tail;
    const expected = parts.map(([p]) => p).join('') + tail;
    // joining plain pieces can create a token across a seam; then the expectation is the stripped join itself
    if (END_TOKENS.some((t) => expected.includes(t))) return;
    assert.equal(stripEndTokens(text), expected);
    assert.equal(stripEndTokens(expected), expected);
  }), { numRuns: 300 });
});
