/**
 * The decode step's attention bias built by a graph (runtime/device-bias.ts, run on the device by webgpu engines so
 * that no per-step host tensor grows with the context) equals kv.ts `capacityBias` for one new slot, bit for bit:
 * every row start, filled length, capacity and sliding window, on the CPU provider here; the webgpu engine's parity
 * tests run it on the device.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import * as ort from 'onnxruntime-node';
import { DeviceBias } from '../src/engine/runtime/device-bias.ts';
import { capacityBias } from '../src/engine/runtime/kv.ts';
import { emptyTransfer } from '../src/engine/runtime/transfer.ts';

const CPU: ort.InferenceSession.SessionOptions = { executionProviders: ['cpu'], logSeverityLevel: 4 };

const cases = fc.integer({ min: 0, max: 300 }).chain((P) => fc.record({
  P: fc.constant(P),
  extra: fc.integer({ min: 0, max: 40 }),
  starts: fc.array(fc.integer({ min: 0, max: P }), { minLength: 1, maxLength: 6 }),
  window: fc.option(fc.integer({ min: 1, max: 400 }), { nil: null }),
}));

test('the device bias graph gives capacityBias for one new slot, with and without a sliding window', async () => {
  const plain = new DeviceBias(CPU, null, emptyTransfer());
  const windowed = new Map<number, DeviceBias>();
  try {
    await fc.assert(fc.asyncProperty(cases, async ({ P, extra, starts, window }) => {
      const C = P + extra;
      const B = starts.length;
      const made = window === null ? await plain.make(starts, P, C) : await (windowed.get(window) ?? windowed.set(window, new DeviceBias(CPU, window, emptyTransfer())).get(window)!).make(starts, P, C);
      assert.deepEqual(made.bias.dims, [B, 1, C + 1]);
      assert.deepEqual(Array.from(made.bias.data as Float32Array), Array.from(capacityBias(B, 1, P, C, starts)));
      if (window === null) assert.equal(made.window, null);
      else assert.deepEqual(Array.from(made.window!.data as Float32Array), Array.from(capacityBias(B, 1, P, C, starts, window)));
    }), { numRuns: 150, seed: 45 });
  } finally {
    await plain.release();
    for (const d of windowed.values()) await d.release();
  }
});

test('the device bias is fed 4 bytes a row and two scalars, whatever the capacity', async () => {
  const transfer = emptyTransfer();
  const d = new DeviceBias(CPU, null, transfer);
  try {
    await d.make([0, 3, 5], 700, 960);
  } finally {
    await d.release();
  }
  assert.equal(transfer.hostToDevice, 3 * 4 + 2 * 4);
});
