/**
 * Exact conversions between the stored floating dtypes and f32. BF16 is the top 16 bits of an f32; F16 is IEEE
 * binary16. Upcasts are exact; downcasts round to nearest, ties to even (torch `.to(bfloat16)` / `.to(float16)`).
 */
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** BF16 bits → f32 (exact). [n] → [n] */
export function bf16BitsToF32(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  const o = new Uint32Array(out.buffer);
  for (let i = 0; i < bits.length; i++) o[i] = bits[i]! << 16;
  return out;
}

/** f32 → BF16 bits, round to nearest even; NaN stays a (quiet) NaN. */
export function f32ToBf16Bits(x: Float32Array): Uint16Array {
  const src = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const b = src[i]!;
    if ((b & 0x7f800000) === 0x7f800000 && (b & 0x007fffff) !== 0) { out[i] = (b >>> 16) | 0x0040; continue; }
    out[i] = ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
  }
  return out;
}

/** Rounds every value to the nearest BF16 (RNE) and returns it as f32. */
export function roundToBf16(x: Float32Array): Float32Array {
  return bf16BitsToF32(f32ToBf16Bits(x));
}

/** One binary16 value → number (exact). */
export function f16ToNumber(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** F16 bits → f32 (exact). */
export function f16BitsToF32(bits: Uint16Array): Float32Array {
  const table = f16Table();
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = table[bits[i]!]!;
  return out;
}

let f16TableCache: Float32Array | null = null;
function f16Table(): Float32Array {
  if (!f16TableCache) {
    f16TableCache = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) f16TableCache[h] = f16ToNumber(h);
  }
  return f16TableCache;
}

/** f32 → F16 bits, round to nearest even, overflow → ±Inf, NaN → NaN. */
export function f32ToF16Bits(x: Float32Array): Uint16Array {
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = numberToF16(x[i]!);
  return out;
}

function numberToF16(v: number): number {
  f32[0] = v;
  const b = u32[0]!;
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  const man = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (man ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    // subnormal (or zero): value = m · 2^-24 with m = round(|v| · 2^24)
    if (e < -10) return sign;
    const full = man | 0x800000; // 24-bit significand
    const shift = 14 - e; // bits to drop so that the result is in units of 2^-24
    const q = full >>> shift;
    const rem = full & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    const r = rem > half || (rem === half && (q & 1)) ? q + 1 : q;
    return sign | r;
  }
  const q = man >>> 13;
  const rem = man & 0x1fff;
  let h = (e << 10) | q;
  if (rem > 0x1000 || (rem === 0x1000 && (q & 1))) h += 1; // may carry into the exponent (correct, incl. → Inf)
  return sign | h;
}
