/**
 * Block-wise weight quantization for onnxruntime's `MatMulNBits` (com.microsoft): a linear weight W [N, K] (HF
 * [out, in]) is cut along K into blocks of `block` values; each block gets a scale s (and, asymmetric, a zero
 * point z) and integer codes q ∈ [0, 2^bits − 1]:
 *
 *   W[n, k] ≈ (q[n, k] − z[n, b]) · s[n, b],   b = ⌊k / block⌋
 *
 * symmetric:  z = 2^(bits−1) (onnxruntime's default when no zero point is given); 8-bit s = max|w| / 127 (codes
 *             1..255, llama.cpp's Q8_0 rule); 4-bit s = m / −8 with m the block's value of largest magnitude, sign
 *             kept (llama.cpp's Q4_0 rule): m lands exactly on code 0 and all 16 codes are used, a step 7/8 the size
 *             of max|w| / 7, at the price of clamping the far side's values that would round to code 16 onto 15
 * asymmetric: s = (max − min) / (2^bits − 1), z = round(−min / s) clamped to the code range (min ≤ 0 ≤ max forced)
 *
 * Layout (MatMulNBits inputs): codes `B` uint8 [N, kBlocks, block·bits/8], packed low-first along K (4-bit: code
 * 2j in the low nibble of byte j); `scales` f32 [N, kBlocks]; `zero_points` uint8 [N, ⌈kBlocks·bits/8⌉] packed the
 * same way. A last partial block is padded with zero codes-worth of weight (w = 0).
 */

export type QuantBits = 4 | 8;

export interface QuantizedMatrix {
  bits: QuantBits;
  block: number;
  /** rows (output features) */
  n: number;
  /** columns (input features) */
  k: number;
  kBlocks: number;
  /** [N, kBlocks, block·bits/8] */
  codes: Uint8Array;
  /** [N, kBlocks] */
  scales: Float32Array;
  /** [N, ⌈kBlocks·bits/8⌉] packed; null = symmetric (z = 2^(bits−1)) */
  zeroPoints: Uint8Array | null;
}

/** bytes of packed zero points per row */
const zeroPointRowBytes = (kBlocks: number, bits: QuantBits): number => Math.ceil((kBlocks * bits) / 8);

/** Quantize W [n, k] (row-major f32). */
export function quantizeBlockwise(w: Float32Array, n: number, k: number, bits: QuantBits, block = 32, symmetric = true): QuantizedMatrix {
  if (w.length !== n * k) throw new Error(`quantize: ${w.length} values for [${n}, ${k}]`);
  const kBlocks = Math.ceil(k / block);
  const blob = (block * bits) / 8;
  const qmax = (1 << bits) - 1;
  const mid = 1 << (bits - 1);
  const codes = new Uint8Array(n * kBlocks * blob);
  const scales = new Float32Array(n * kBlocks);
  const zpRow = zeroPointRowBytes(kBlocks, bits);
  const zeroPoints = symmetric ? null : new Uint8Array(n * zpRow);
  const q = new Uint8Array(block);
  for (let r = 0; r < n; r++) {
    for (let b = 0; b < kBlocks; b++) {
      const k0 = b * block;
      const k1 = Math.min(k, k0 + block);
      const row = r * k;
      let scale: number;
      let zp: number;
      if (symmetric) {
        let m = 0;
        for (let i = k0; i < k1; i++) if (Math.abs(w[row + i]!) > Math.abs(m)) m = w[row + i]!;
        scale = Math.fround(bits === 4 ? m / -mid : Math.abs(m) / (mid - 1));
        zp = mid;
      } else {
        let lo = 0;
        let hi = 0;
        for (let i = k0; i < k1; i++) { const v = w[row + i]!; if (v < lo) lo = v; if (v > hi) hi = v; }
        scale = Math.fround((hi - lo) / qmax);
        zp = scale > 0 ? Math.min(qmax, Math.max(0, Math.round(-lo / scale))) : mid;
      }
      const inv = scale !== 0 ? 1 / scale : 0;
      for (let i = 0; i < block; i++) {
        const v = k0 + i < k1 ? w[row + k0 + i]! : 0;
        q[i] = Math.min(qmax, Math.max(0, Math.round(v * inv) + zp));
      }
      scales[r * kBlocks + b] = scale;
      const off = (r * kBlocks + b) * blob;
      if (bits === 8) codes.set(q, off);
      else for (let j = 0; j < blob; j++) codes[off + j] = q[2 * j]! | (q[2 * j + 1]! << 4);
      if (zeroPoints) {
        if (bits === 8) zeroPoints[r * zpRow + b] = zp;
        else zeroPoints[r * zpRow + (b >> 1)]! |= (b & 1) ? zp << 4 : zp;
      }
    }
  }
  return { bits, block, n, k, kBlocks, codes, scales, zeroPoints };
}

/** The code of W[r, c] */
function code(m: QuantizedMatrix, r: number, c: number): number {
  const b = Math.floor(c / m.block);
  const i = c - b * m.block;
  const off = (r * m.kBlocks + b) * ((m.block * m.bits) / 8);
  if (m.bits === 8) return m.codes[off + i]!;
  const byte = m.codes[off + (i >> 1)]!;
  return (i & 1) ? byte >> 4 : byte & 15;
}

function zeroPoint(m: QuantizedMatrix, r: number, b: number): number {
  if (!m.zeroPoints) return 1 << (m.bits - 1);
  const row = r * zeroPointRowBytes(m.kBlocks, m.bits);
  if (m.bits === 8) return m.zeroPoints[row + b]!;
  const byte = m.zeroPoints[row + (b >> 1)]!;
  return (b & 1) ? byte >> 4 : byte & 15;
}

/** The weight MatMulNBits computes with: (q − z) · s in f32. [n, k] */
export function dequantizeBlockwise(m: QuantizedMatrix): Float32Array {
  const out = new Float32Array(m.n * m.k);
  for (let r = 0; r < m.n; r++) {
    for (let c = 0; c < m.k; c++) {
      const b = Math.floor(c / m.block);
      // + 0: a zero code-offset times a negative scale is −0 here, +0 in onnxruntime's sums
      out[r * m.k + c] = Math.fround((code(m, r, c) - zeroPoint(m, r, b)) * m.scales[r * m.kBlocks + b]!) + 0;
    }
  }
  return out;
}
