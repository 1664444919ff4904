/**
 * settledText (src/guard/backends/settled-text.ts): the text a stream may send before generation ends. Hand cases
 * for each thing it holds back, and a property: for any pieces of text and stop strings, every settled text along the
 * way is a prefix of the final answer as LocalBackend forms it (cut before the first stop string, end tokens
 * removed), and the settled text at a completed stop string is that answer.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { settledText } from '../src/guard/backends/settled-text.ts';
import { stripEndTokens } from '../src/outcome/parse-calls.ts';

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
