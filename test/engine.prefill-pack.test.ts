/**
 * The packed-prefill layout (src/engine/run/prefill-pack.ts), on hand-counted chunks: each row computes the last
 * W tokens before its chunk's end (recomputing cached ones, or left-padded when the prompt is shorter), its past
 * right-aligned at P; and which candidates join a pack under the width, budget, waste and masked-past limits.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { choosePack, packLayout } from '../src/engine/run/prefill-pack.ts';

test('layout: widest chunk sets W; shorter chunks recompute cached tokens or are left-padded; pasts end at P', () => {
  // rows: 8 new on 20 cached; 5 new on 20 cached (3 recomputed); a 6-token prompt from scratch (2 pads)
  const lay = packLayout([{ filled: 20, end: 28 }, { filled: 20, end: 25 }, { filled: 0, end: 6 }]);
  assert.equal(lay.width, 8);
  assert.equal(lay.past, 20);
  assert.deepEqual(lay.rows, [
    { from: 20, pastLen: 20, start: 0, kept: 8 },
    { from: 17, pastLen: 17, start: 3, kept: 5 },
    { from: 0, pastLen: 0, start: 22, kept: 6 },
  ]);
  assert.equal(lay.waste, 0 + 3 + 2);
});

test('layout: no past when every prompt fits in the width', () => {
  const lay = packLayout([{ filled: 0, end: 7 }, { filled: 0, end: 5 }]);
  assert.equal(lay.past, 0);
  assert.deepEqual(lay.rows.map((r) => r.start), [0, 2]);
  assert.equal(lay.waste, 2);
});

test('choosePack: in order, each candidate that keeps the pack within its limits', () => {
  const limits = { maxWidth: 16, budget: 64, maxWaste: 0.25, maxMaskedPast: 0.25 };
  const chunks = [
    { filled: 20, end: 28 }, // first
    { filled: 20, end: 25 }, // joins: waste 3 of 16, masked past 3 of 53
    { filled: 0, end: 7 }, // left out: its empty past would mask 20 of its 28 slots attended
    { filled: 0, end: 40 }, // left out: wider than maxWidth
    { filled: 18, end: 26 }, // joins: waste 3 of 24, masked past 5 of 79
  ];
  assert.deepEqual(choosePack(chunks, limits), [0, 1, 4]);
  assert.deepEqual(choosePack(chunks, { ...limits, budget: 20 }), [0, 1], 'three rows of 8 exceed a budget of 20');
  assert.deepEqual(choosePack(chunks, { ...limits, maxWaste: 0.1 }), [0, 4], 'waste 3 of 16 is over 10 %; the last chunk wastes nothing');
  assert.deepEqual(choosePack(chunks, limits, (lay) => lay.rows.length < 3), [0, 1], 'the memory plan refuses three rows');
  assert.deepEqual(choosePack([{ filled: 0, end: 30 }, { filled: 0, end: 30 }], limits), [0], 'a first chunk wider than maxWidth runs alone');
  // prompts from scratch of similar length: all pack (the serving case)
  assert.deepEqual(choosePack([{ filled: 0, end: 12 }, { filled: 0, end: 11 }, { filled: 0, end: 12 }, { filled: 0, end: 10 }], limits), [0, 1, 2, 3]);
});
