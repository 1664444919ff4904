/**
 * Stored matrices (types.ts `StoredMatrix`) read as f32: whole, or one row at a time into a scratch buffer, so a
 * bf16 / f16 dictionary is never held twice.
 */
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits } from '../checkpoint/dtype.ts';
import type { Sae, StoredDtype, StoredMatrix } from './types.ts';

const widened = new WeakMap<Sae, { W_enc: Float32Array; W_dec: Float32Array }>();

/**
 * W_enc and W_dec as f32, as onnxruntime is fed them: views of an f32 SAE's own arrays; for bf16 / f16 a widened copy
 * made once per SAE and kept beside it (so the engine's graph and SaeEncoder share one).
 */
export function f32Matrices(sae: Sae): { W_enc: Float32Array; W_dec: Float32Array } {
  let w = widened.get(sae);
  if (!w) {
    w = { W_enc: toF32(sae.W_enc), W_dec: toF32(sae.W_dec) };
    widened.set(sae, w);
  }
  return w;
}

/** The whole matrix as f32 (a view when it is stored as f32). [rows·cols] */
export function toF32(m: Pick<StoredMatrix, 'dtype' | 'data'>): Float32Array {
  if (m.dtype === 'F32') return m.data as Float32Array;
  return m.dtype === 'BF16' ? bf16BitsToF32(m.data as Uint16Array) : f16BitsToF32(m.data as Uint16Array);
}

let f16: Float32Array | null = null;
function f16Table(): Float32Array {
  if (!f16) f16 = f16BitsToF32(Uint16Array.from({ length: 65536 }, (_, i) => i));
  return f16;
}

/** Columns [c0, c1) of row r, as f32, into `out` (length ≥ c1 − c0). */
export function rowInto(m: StoredMatrix, r: number, out: Float32Array, c0 = 0, c1 = m.cols): Float32Array {
  const base = r * m.cols;
  const n = c1 - c0;
  if (m.dtype === 'F32') { out.set((m.data as Float32Array).subarray(base + c0, base + c1)); return out; }
  const src = m.data as Uint16Array;
  if (m.dtype === 'BF16') {
    const o = new Uint32Array(out.buffer, out.byteOffset, n);
    for (let i = 0; i < n; i++) o[i] = src[base + c0 + i]! << 16;
  } else {
    const t = f16Table();
    for (let i = 0; i < n; i++) out[i] = t[src[base + c0 + i]!]!;
  }
  return out;
}

/** `v` rounded to `dtype` and back (identity for F32): what a tensor cast to that dtype holds. */
export function roundTo(v: Float32Array, dtype: StoredDtype): Float32Array {
  if (dtype === 'F32') return v;
  const m = { dtype: 'F32' as const, rows: 1, cols: v.length, data: v };
  return toF32(castStored(m, dtype));
}


/** f32 values cast to a 16-bit dtype, rounding to nearest even (torch `.to(bfloat16)` / `.to(float16)`). */
export function castStored(m: StoredMatrix, dtype: StoredDtype): StoredMatrix {
  if (dtype === m.dtype) return m;
  const f = toF32(m);
  if (dtype === 'F32') return { ...m, dtype, data: Float32Array.from(f) };
  return { ...m, dtype, data: dtype === 'BF16' ? f32ToBf16Bits(f) : f32ToF16Bits(f) };
}

/** f32 → binary16 bits, round to nearest even (overflow → ±inf, NaN stays NaN). */
export function f32ToF16Bits(x: Float32Array): Uint16Array {
  const u = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const b = u[i]!;
    const sign = (b >>> 16) & 0x8000;
    const exp = (b >>> 23) & 0xff;
    let man = b & 0x7fffff;
    if (exp === 0xff) { out[i] = sign | 0x7c00 | (man ? 0x200 : 0); continue; }
    const e = exp - 127 + 15;
    if (e >= 0x1f) { out[i] = sign | 0x7c00; continue; }
    if (e <= 0) {
      if (e < -10) { out[i] = sign; continue; }
      man |= 0x800000;
      const shift = 14 - e;
      const half = 1 << (shift - 1);
      let v = man >>> shift;
      const rest = man & ((1 << shift) - 1);
      if (rest > half || (rest === half && (v & 1))) v++;
      out[i] = sign | v;
      continue;
    }
    let v = (e << 10) | (man >>> 13);
    const rest = man & 0x1fff;
    if (rest > 0x1000 || (rest === 0x1000 && (v & 1))) v++;
    out[i] = sign | v;
  }
  return out;
}
