import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ceiling, sharedPrefixes } from '../bench/generate-table4.ts';

test('sharedPrefixes: each prompt counts its longest common prefix with any earlier prompt, the last token never shared', () => {
  // counted by hand: [1,2,3,4] all unique (4); [1,2,9] shares 2 with the first; [1,2,3,4] shares 3 (its last token is
  // computed); [7] unique; [1,2,9,9] shares 3 with the second
  const r = sharedPrefixes([[1, 2, 3, 4], [1, 2, 9], [1, 2, 3, 4], [7], [1, 2, 9, 9]]);
  assert.deepEqual(r, { sharedTokens: 2 + 3 + 3, uniqueTokens: 4 + 1 + 1 + 1 + 1 });
});

test('ceiling: base wall time over prefill time plus decode time at the given rates', () => {
  // 1,000 tokens at 500 tok/s = 2 s, 100 answer tokens at 50 rows/s = 2 s: 20 s of base time / 4 s = 5×
  assert.equal(ceiling(20, 1000, 500, 100, 50), 5);
});
