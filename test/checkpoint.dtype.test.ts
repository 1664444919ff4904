import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, roundToBf16 } from '../src/checkpoint/dtype.ts';
import { f16ToNumber } from '../src/checkpoint/dtype.ts';

test('roundToBf16: round to nearest, ties to even (analytic cases)', () => {
  const u = 2 ** -7; // bf16 ulp at 1
  const x = Float32Array.from([1, 1 + u / 2, 1 + u + u / 2, 1 + u / 2 + 2 ** -20, -(1 + u / 2 + 2 ** -20), 1 + u + u / 4, 65504, 2 ** -130]);
  const r = roundToBf16(x);
  assert.equal(r[0], 1);
  assert.equal(r[1], 1); // tie → even mantissa (0)
  assert.equal(r[2], 1 + 2 * u); // tie → even mantissa (2)
  assert.equal(r[3], 1 + u); // above the tie → up
  assert.equal(r[4], -(1 + u));
  assert.equal(r[5], 1 + u); // below the tie → down
  assert.equal(r[6], 65536); // 65504 = 0x477FE000 → rounds up to 2^16
  assert.equal(r[7], 2 ** -130); // subnormal, exactly representable
  assert.ok(Number.isNaN(roundToBf16(Float32Array.from([NaN]))[0]));
  assert.equal(roundToBf16(Float32Array.from([Infinity]))[0], Infinity);
});

test('BF16: every bit pattern upcasts exactly and round-trips', () => {
  const bits = new Uint16Array(65536).map((_, i) => i);
  const f = bf16BitsToF32(bits);
  const back = f32ToBf16Bits(f);
  for (let i = 0; i < 65536; i++) {
    if (Number.isNaN(f[i])) { assert.ok(Number.isNaN(bf16BitsToF32(Uint16Array.of(back[i]!))[0])); continue; }
    assert.equal(back[i], i);
  }
});

test('F16: every bit pattern decodes per IEEE binary16, round-trips, and midpoints round to even', () => {
  assert.equal(f16ToNumber(0x3c00), 1);
  assert.equal(f16ToNumber(0x7bff), 65504);
  assert.equal(f16ToNumber(0x0001), 2 ** -24);
  assert.equal(f16ToNumber(0xc000), -2);
  const bits = new Uint16Array(65536).map((_, i) => i);
  const f = f16BitsToF32(bits);
  const back = f32ToF16Bits(f);
  for (let i = 0; i < 65536; i++) {
    if (Number.isNaN(f[i])) continue;
    assert.equal(back[i], i, `bits ${i.toString(16)}`);
  }
  // midpoints between consecutive positive finite halves (all exactly representable in f32)
  const mids: number[] = [];
  const expect: number[] = [];
  for (let h = 0; h < 0x7bff; h++) {
    mids.push((f16ToNumber(h) + f16ToNumber(h + 1)) / 2);
    expect.push(h % 2 === 0 ? h : h + 1);
  }
  const got = f32ToF16Bits(Float32Array.from(mids));
  for (let i = 0; i < mids.length; i++) assert.equal(got[i], expect[i], `midpoint after ${i.toString(16)}`);
  // overflow: above the midpoint between 65504 and 65536 → Inf
  assert.equal(f32ToF16Bits(Float32Array.of(65520))[0], 0x7c00);
  assert.equal(f32ToF16Bits(Float32Array.of(65519))[0], 0x7bff);
});
