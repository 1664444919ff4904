// bench:generate's masked-attention share: slot counts of decode steps against hand-counted values, and the
// multiply-add share against the formula written out for a small shape.
import test from 'node:test';
import assert from 'node:assert/strict';
import { decodeRows, emptyTimes, maskedFlopShare, timeSteps } from '../bench/step-timer.ts';

const past = (length: number, capacity: number) => ({ length, keys: [{ dims: [3, 1, capacity, 4] }] });

test('timeSteps: decode steps count computed, left-masked and unused slots; prefill steps only tokens', async () => {
  const seen: unknown[] = [];
  const engine = { step: async (inp: unknown) => { seen.push(inp); return 'out'; } };
  const times = timeSteps(engine);
  // prefill: batch 1 × 7 tokens on no cache
  assert.equal(await engine.step({ width: 7, batch: 1, starts: [0], past: null }), 'out');
  // decode: 3 rows, buffer filled to 10 of capacity 16, rows starting at 0, 4, 9
  await engine.step({ width: 1, batch: 3, starts: [0, 4, 9], past: past(10, 16) });
  // decode: 2 rows, filled 11 of 16, starts 2, 2
  await engine.step({ width: 1, batch: 2, starts: [2, 2], past: past(11, 16) });
  assert.equal(seen.length, 3);
  assert.equal(times.prefillTokens, 7);
  assert.equal(times.decodeSteps.length, 2);
  assert.deepEqual(times.decodeSteps.map((s) => s.batch), [3, 2]);
  assert.equal(decodeRows(times), 3 + 2);
  // computed: 3·17 + 2·17; left: (0+4+9) + (2+2); unused right of the length: 3·6 + 2·5
  assert.deepEqual(times.slots, { computed: 85, leftMasked: 17, rightUnused: 28, rows: 5 });
  Object.assign(times, emptyTimes());
  assert.equal(times.slots.computed, 0);
});

test('maskedFlopShare: attention 4·H·hd per slot and layer against 2·params per row', () => {
  const c = { numLayers: 2, hiddenSize: 8, numHeads: 2, numKvHeads: 1, headDim: 4, intermediateSize: 16, vocabSize: 10 };
  const slots = { computed: 100, leftMasked: 30, rightUnused: 10, rows: 4 };
  // per layer: 8·(2+2)·4 + 2·4·8 + 3·8·16 = 128 + 64 + 384 = 576; params = 2·576 + 80 = 1232
  const linear = 4 * 2 * 1232;
  const perSlot = 4 * 2 * 4 * 2;
  const total = linear + 100 * perSlot;
  const s = maskedFlopShare(c, slots);
  assert.ok(Math.abs(s.left - (30 * perSlot) / total) < 1e-12);
  assert.ok(Math.abs(s.all - (40 * perSlot) / total) < 1e-12);
  assert.equal(maskedFlopShare(c, { computed: 0, leftMasked: 0, rightUnused: 0, rows: 1 }).left, 0);
});
