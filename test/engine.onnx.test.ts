/**
 * The protobuf/ONNX writer and session plumbing on toy graphs, checked against values computed here:
 * varints (incl. negative int64), Gemm(transB) on external data at an unaligned offset, BF16 Cast rounding
 * (round-to-nearest-even, vs src/checkpoint/dtype.ts), empty index selections, and weight files reached through
 * symlinks (the Hugging Face hub cache layout).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { roundToBf16 } from '../src/checkpoint/dtype.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngineFromCheckpoint } from '../src/engine/engine.ts';
import { GraphBuilder } from '../src/engine/graph/onnx/builder.ts';
import { DataType, ProtoWriter } from '../src/engine/graph/onnx/proto.ts';
import { resolveWeightFiles } from '../src/engine/runtime/weight-files.ts';
import { maxAbsDiff, tempCache } from './helpers/engine.ts';

test('varint encoding: small, multi-byte, 2^53, negative int64 (10 bytes, two\'s complement)', () => {
  const enc = (v: number | bigint) => { const w = new ProtoWriter(); w.varint(v); return [...w.finish()]; };
  assert.deepEqual(enc(1), [1]);
  assert.deepEqual(enc(300), [0xac, 0x02]);
  assert.deepEqual(enc(2 ** 53), [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10]);
  assert.deepEqual(enc(-1), [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
  assert.deepEqual(enc(-2n), [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
});

describe('toy graphs on onnxruntime', () => {
  let dir: string;
  before(() => { dir = mkdtempSync(join(tmpdir(), 'safekeep-onnx-')); });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('Gemm(transB=1) on external data at an unaligned offset, Reshape with -1, empty Gather', async () => {
    const W = Float32Array.from({ length: 15 }, (_, i) => (i - 7) / 3); // [5 out, 3 in]
    const file = Buffer.alloc(3 + W.byteLength + 5);
    Buffer.from(W.buffer).copy(file, 3);
    writeFileSync(join(dir, 'w.bin'), file);
    const g = new GraphBuilder();
    const x = g.input('x', DataType.FLOAT, ['n', 3]);
    const idx = g.input('idx', DataType.INT64, ['m']);
    const w = g.initializer({ dataType: DataType.FLOAT, dims: [5, 3], external: { location: 'w.bin', offset: 3, length: W.byteLength } }, 'w');
    const y = g.op('Gemm', [x, w], { transB: 1 });
    g.output('y', g.op('Gather', [y, idx], { axis: 0 }), DataType.FLOAT, ['m', 5]);
    g.output('flat', g.op('Reshape', [y, g.i64([-1])]), DataType.FLOAT, ['k']);
    const s = await ort.InferenceSession.create(g.encode('toy'), { extra: { session: { model_external_initializers_file_folder_path: dir } } });
    const X = Float32Array.from([1, 2, 3, -1, 0.5, 4]);
    const out = await s.run({ x: new ort.Tensor('float32', X, [2, 3]), idx: new ort.Tensor('int64', BigInt64Array.from([1n, 0n]), [2]) });
    const expect = (r: number) => Array.from({ length: 5 }, (_, o) => X[r * 3]! * W[o * 3]! + X[r * 3 + 1]! * W[o * 3 + 1]! + X[r * 3 + 2]! * W[o * 3 + 2]!);
    assert.ok(maxAbsDiff(out.y!.data as Float32Array, [...expect(1), ...expect(0)]) <= 1e-6);
    assert.deepEqual(out.flat!.dims, [10]);
    const empty = await s.run({ x: new ort.Tensor('float32', X, [2, 3]), idx: new ort.Tensor('int64', new BigInt64Array(0), [0]) });
    assert.deepEqual(empty.y!.dims, [0, 5]);
    await s.release();
  });

  test('Cast f32 → bf16 → f32 in the graph rounds to nearest even (as roundToBf16)', async () => {
    // values straddling BF16 ties and near-ties; folded as a constant like the engine's weights
    const vals = Float32Array.from([1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -3.14159, 65504.5, 1e-30, 0.1, 2.5e38]);
    const g = new GraphBuilder();
    const c = g.initializer({ dataType: DataType.FLOAT, dims: [vals.length], raw: new Uint8Array(vals.buffer.slice(0)) }, 'c');
    const x = g.input('x', DataType.FLOAT, [vals.length]);
    const rounded = g.op('Cast', [g.op('Cast', [c], { to: DataType.BFLOAT16 })], { to: DataType.FLOAT });
    g.output('y', g.op('Add', [rounded, x]), DataType.FLOAT, [vals.length]);
    const s = await ort.InferenceSession.create(g.encode('bf16'));
    const out = await s.run({ x: new ort.Tensor('float32', new Float32Array(vals.length), [vals.length]) });
    assert.deepEqual([...(out.y!.data as Float32Array)], [...roundToBf16(vals)]);
    await s.release();
  });
});

test('weight files reached through symlinks into another folder (HF hub cache layout); lowMemory sessions agree', async () => {
  const cache = tempCache();
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-symlink-'));
  try {
    await writeRandomCheckpoint(join(tmp, 'real'), 'qwen2', { seed: 5, numLayers: 1, hiddenSize: 16, numHeads: 2, numKvHeads: 1, intermediateSize: 32, vocabSize: 40, shards: 2 });
    const snap = join(tmp, 'snapshot');
    mkdirSync(snap);
    for (const f of readdirSync(join(tmp, 'real'))) symlinkSync(join(tmp, 'real', f), join(snap, f));
    const viaLinks = await loadCheckpoint(snap);
    const direct = await loadCheckpoint(join(tmp, 'real'));
    assert.equal(resolveWeightFiles(viaLinks).weightsDir, resolveWeightFiles(direct).weightsDir);
    const a = await createEngineFromCheckpoint(viaLinks, { cacheDir: cache.dir, threads: 1, lowMemory: true });
    const b = await createEngineFromCheckpoint(direct, { cacheDir: cache.dir, threads: 1 });
    const [ra] = await a.forward([[3, 9, 27, 11]]);
    const [rb] = await b.forward([[3, 9, 27, 11]]);
    assert.ok(maxAbsDiff(ra!.logits, rb!.logits) <= 1e-6);
    assert.ok(maxAbsDiff(ra!.hidden, rb!.hidden) <= 1e-6);
    await a.dispose();
    await b.dispose();
  } finally {
    cache.cleanup();
    rmSync(tmp, { recursive: true, force: true });
  }
});
