/**
 * settledText (src/chat/settled-text.ts): the text a stream may send before generation ends. Hand cases
 * for each thing it holds back, and a property: for any pieces of text and stop strings, every settled text along the
 * way is a prefix of the final answer as LocalBackend forms it (cut before the first stop string, end tokens
 * removed), and the settled text at a completed stop string is that answer. Then LocalBackend's stream over the real
 * Llama-3.1 tokenizer (npm), on a scripted generation that cuts multi-byte characters.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { settledText } from '../src/chat/settled-text.ts';
import { stripEndTokens } from '../src/outcome/parse-calls.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { installTokenizer, loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { LocalBackend } from '../src/chat/local.ts';
import type { GenerateOptions, GenerateResult } from '../src/engine/types.ts';

test('settledText holds back a partial character, the start of a stop string or end token, and cuts at a stop string', () => {
  assert.deepEqual(settledText('Hello wor', []), { settled: 'Hello wor', stopped: false });
  assert.deepEqual(settledText('caf\uFFFD', []), { settled: 'caf', stopped: false });
  assert.deepEqual(settledText('Answer: ST', ['STOP']), { settled: 'Answer: ', stopped: false });
  assert.deepEqual(settledText('Answer: STOP and more', ['STOP']), { settled: 'Answer: ', stopped: true });
  assert.deepEqual(settledText('done<|eot', []), { settled: 'done', stopped: false });
  assert.deepEqual(settledText('done<|eot_id|>', []), { settled: 'done', stopped: false });
  assert.deepEqual(settledText('a<e', []), { settled: 'a', stopped: false }, '"<e" may begin <eos>');
  assert.deepEqual(settledText('a<b', []), { settled: 'a<b', stopped: false }, 'no end token begins "<b"');
});

test('property: every settled text is a prefix of the final answer', () => {
  const alphabet = fc.constantFrom('a', 'b', ' ', '<', '|', 'S', 'T', 'eot_id', '|>', '<|eot_id|>', '\n');
  fc.assert(fc.property(fc.array(fc.array(alphabet, { minLength: 1, maxLength: 3 }).map((x) => x.join('')), { minLength: 1, maxLength: 30 }),
    fc.array(fc.array(fc.constantFrom('a', 'b', 'S', 'T', '<', '|'), { minLength: 1, maxLength: 4 }).map((x) => x.join('')), { maxLength: 3 }),
    (pieces, stops) => {
      let text = '';
      let final: string | null = null;
      const seen: string[] = [];
      for (const p of pieces) {
        text += p;
        const s = settledText(text, stops);
        seen.push(s.settled);
        if (s.stopped) { final = s.settled; break; }
      }
      // LocalBackend's final answer: the whole text cut before the first stop string, end tokens removed
      const cut = Math.min(...stops.map((x) => text.indexOf(x)).filter((i) => i >= 0));
      const answer = stripEndTokens(Number.isFinite(cut) ? text.slice(0, cut) : text);
      if (final !== null) assert.equal(final, answer);
      for (const s of seen) assert.ok(answer.startsWith(s), `${JSON.stringify(s)} is not a prefix of ${JSON.stringify(answer)}`);
    }), { numRuns: 2000, seed: 7 });
});

test('LocalBackend streams a real tokenizer\'s text by incremental detokenisation: no partial character, pieces join to the reply', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-stream-tok-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  await installTokenizer(dir, 'llama3');
  const tok = await loadPromptTokenizer(dir);
  // multi-byte characters that byte-level BPE splits across tokens (their partial decodes are U+FFFD)
  const answer = ' Héllo wörld — 日本語の文章 🎉🧪 done. STOP after';
  const script = tok.encode(answer).filter((id) => id !== 128000); // the answer, without the BOS encode adds
  assert.ok(script.some((_, i) => tok.decode(script.slice(0, i + 1), { skipSpecial: false }).endsWith('\uFFFD')), 'the script cuts a character');
  let perTokenCalls = 0;
  const engine = {
    async generate(_prompts: number[][], o: GenerateOptions): Promise<GenerateResult[]> {
      const ids: number[] = [];
      let finish: GenerateResult['finish'] = 'length';
      for (const id of script) {
        ids.push(id);
        perTokenCalls++;
        if (o.stopWhen?.(ids)) { finish = 'stop'; break; }
      }
      return [{ generatedIds: ids, finish } as GenerateResult];
    },
  };
  const lb = new LocalBackend(engine as unknown as ConstructorParameters<typeof LocalBackend>[0], tok, { responseCache: 0 });
  for (const stop of [[], [' STOP']]) {
    const pieces: string[] = [];
    const r = await lb.chat({ messages: [{ role: 'user', content: 'hi' }], maxTokens: 64, purpose: 'agent', stop, onText: (d) => pieces.push(d) });
    assert.equal(pieces.join(''), r.content);
    assert.equal(r.content, stop.length ? ' Héllo wörld — 日本語の文章 🎉🧪 done.' : answer);
    assert.ok(pieces.every((p) => !p.includes('\uFFFD')), JSON.stringify(pieces));
    // a piece at every token that ends on a whole character (up to the stop string's start)
    const whole = script.filter((_, i) => !tok.decode(script.slice(0, i + 1), { skipSpecial: false }).endsWith('\uFFFD')).length;
    assert.ok(pieces.length >= (stop.length ? whole - 4 : whole), `${pieces.length} pieces, ${whole} tokens end on a whole character`);
  }
  assert.ok(perTokenCalls > 0);
});
