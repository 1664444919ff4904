/**
 * Block-wise quantization (src/engine/quant.ts) against onnxruntime's own MatMulNBits: the weight onnxruntime
 * computes with (read back by multiplying an identity matrix) equals our TypeScript dequantization exactly, for 4 and
 * 8 bits, symmetric and asymmetric, K a multiple of the block and not; and the reconstruction error is within the
 * quantization step (|w − ŵ| ≤ s/2 per block, + clamping for asymmetric).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as ort from 'onnxruntime-node';
import { GraphBuilder } from '../src/engine/onnx/builder.ts';
import { DataType } from '../src/engine/onnx/proto.ts';
import { dequantizeBlockwise, quantizeBlockwise, type QuantizedMatrix } from '../src/engine/quant.ts';
import { Rng } from '../src/checkpoint/random.ts';

const bytes = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** W as onnxruntime's MatMulNBits sees it: Y = I · Wᵀ → W = Yᵀ. [n, k] */
async function ortWeight(m: QuantizedMatrix): Promise<Float32Array> {
  const g = new GraphBuilder();
  const a = g.input('a', DataType.FLOAT, [m.k, m.k]);
  const b = g.initializer({ dataType: DataType.UINT8, dims: [m.n, m.kBlocks, (m.block * m.bits) / 8], raw: m.codes }, 'b');
  const s = g.initializer({ dataType: DataType.FLOAT, dims: [m.n, m.kBlocks], raw: bytes(m.scales) }, 's');
  const ins = [a, b, s];
  if (m.zeroPoints) ins.push(g.initializer({ dataType: DataType.UINT8, dims: [m.zeroPoints.length], raw: m.zeroPoints }, 'zp'));
  const y = g.op('MatMulNBits', ins, { K: m.k, N: m.n, bits: m.bits, block_size: m.block, accuracy_level: 0 }, { domain: 'com.microsoft' });
  g.output('y', y, DataType.FLOAT, [m.k, m.n]);
  const session = await ort.InferenceSession.create(g.encode('q'), { graphOptimizationLevel: 'disabled' });
  const eye = new Float32Array(m.k * m.k);
  for (let i = 0; i < m.k; i++) eye[i * m.k + i] = 1;
  const out = (await session.run({ a: new ort.Tensor('float32', eye, [m.k, m.k]) })).y!.data as Float32Array;
  await session.release();
  const w = new Float32Array(m.n * m.k);
  for (let i = 0; i < m.k; i++) for (let r = 0; r < m.n; r++) w[r * m.k + i] = out[i * m.n + r]!;
  return w;
}

for (const bits of [4, 8] as const) {
  for (const symmetric of [true, false]) {
    for (const [n, k] of [[24, 64], [7, 80]] as const) {
      test(`q${bits} ${symmetric ? 'symmetric' : 'asymmetric'} [${n}, ${k}]: onnxruntime's weight = TypeScript dequantization`, async () => {
        const rng = new Rng(bits * 100 + n + (symmetric ? 1 : 0));
        const w = Float32Array.from({ length: n * k }, () => rng.normal() * 0.1 + (symmetric ? 0 : 0.03));
        const m = quantizeBlockwise(w, n, k, bits, 32, symmetric);
        const ours = dequantizeBlockwise(m);
        assert.deepEqual(await ortWeight(m), ours);
        // reconstruction error ≤ half a step (plus float rounding)
        for (let r = 0; r < n; r++) {
          for (let c = 0; c < k; c++) {
            const s = m.scales[r * m.kBlocks + Math.floor(c / 32)]!;
            assert.ok(Math.abs(w[r * k + c]! - ours[r * k + c]!) <= s / 2 + 1e-6, `[${r}, ${c}]`);
          }
        }
      });
    }
  }
}
