/**
 * Block-wise quantization (src/engine/runtime/quant.ts) against onnxruntime's own MatMulNBits: the weight onnxruntime
 * computes with (read back by multiplying an identity matrix) equals our TypeScript dequantization exactly, for 4 and
 * 8 bits, symmetric and asymmetric, K a multiple of the block and not; and the reconstruction error is within the
 * quantization step (|w − ŵ| ≤ s/2 per block, + clamping for asymmetric).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as ort from 'onnxruntime-node';
import { GraphBuilder } from '../src/engine/graph/onnx/builder.ts';
import { DataType } from '../src/engine/graph/onnx/proto.ts';
import { dequantizeBlockwise, quantizeBlockwise, type QuantizedMatrix } from '../src/engine/runtime/quant.ts';
import { makeRng } from '../src/util/rng.ts';
import { layerErrors } from '../src/cli/commands/quantize.ts';

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
    for (const [n, k, block] of [[24, 64, 32], [7, 80, 32], [6, 300, 128], [5, 80, 64]] as const) {
      test(`q${bits} ${symmetric ? 'symmetric' : 'asymmetric'} [${n}, ${k}] block ${block}: onnxruntime's weight = TypeScript dequantization`, async (t) => {
        const rng = makeRng(bits * 100 + n + (symmetric ? 1 : 0));
        const w = Float32Array.from({ length: n * k }, () => rng.normal() * 0.1 + (symmetric ? 0 : 0.03));
        const m = quantizeBlockwise(w, n, k, bits, block, symmetric);
        const ours = dequantizeBlockwise(m);
        assert.deepEqual(await ortWeight(m), ours);
        // reconstruction error ≤ half a step (plus float rounding); symmetric 4-bit (Q4_0's rule: the block's
        // largest-magnitude value on code 0) clamps far-side values that would round to code 16 onto 15: ≤ one step
        let clamped = 0;
        for (let r = 0; r < n; r++) {
          for (let c = 0; c < k; c++) {
            const b = Math.floor(c / block);
            const s = Math.abs(m.scales[r * m.kBlocks + b]!);
            const err = Math.abs(w[r * k + c]! - ours[r * k + c]!);
            const onTop = symmetric && bits === 4 && Math.round(w[r * k + c]! / m.scales[r * m.kBlocks + b]!) + 8 > 15;
            if (onTop) clamped++;
            assert.ok(err <= (onTop ? s : s / 2) + 1e-6, `[${r}, ${c}]: error ${err}, step ${s}`);
          }
          // symmetric 4-bit: each block's largest-magnitude value is represented exactly (code 0)
          for (let b = 0; symmetric && bits === 4 && b < m.kBlocks; b++) {
            let mi = b * block;
            for (let i = mi; i < Math.min(k, (b + 1) * block); i++) if (Math.abs(w[r * k + i]!) > Math.abs(w[r * k + mi]!)) mi = i;
            assert.ok(Math.abs(ours[r * k + mi]! - w[r * k + mi]!) <= 1e-6 * Math.abs(w[r * k + mi]!), `[${r}, ${mi}] is block ${b}'s extreme`);
          }
        }
        if (symmetric && bits === 4) t.diagnostic(`${clamped} of ${n * k} values clamped onto code 15`);
      });
    }
  }
}

test('q8/q4 engines: hidden states close to f32 (measured bounds), weights cached outside the checkpoint and reused', async (t) => {
  const { mkdtempSync, readdirSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { writeRandomCheckpoint } = await import('../src/checkpoint/random.ts');
  const { createEngine } = await import('../src/engine/engine.ts');
  const { tempCache } = await import('./helpers/engine.ts');
  const cache = tempCache();
  process.env.SAFEKEEP_QUIET = '1';
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-quant-'));
  try {
    // bounds measured on these checkpoints (worst layer; both widths with int8 activations, accuracy level 4; block
    // 32, the default): q8 rel ≤ 0.023, cos ≥ 0.9997; q4 rel ≤ 0.28, cos ≥ 0.96 (block 64: q8 ≤ 0.028, q4 ≤ 0.35)
    const bounds = { q8: { rel: 0.03, cos: 0.999 }, q4: { rel: 0.4, cos: 0.93 } };
    for (const family of ['llama', 'qwen2'] as const) {
      const dir = join(tmp, family);
      await writeRandomCheckpoint(dir, family, { seed: 5, numLayers: 4, hiddenSize: 64, numHeads: 4, numKvHeads: 2, intermediateSize: 128, vocabSize: 101, std: 0.1 });
      const before = readdirSync(dir).sort();
      const ids = [[3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41], [2, 4, 8]];
      const f32 = await createEngine(dir, { cacheDir: cache.dir, threads: 2 });
      const ref = await f32.forward(ids, { hiddenAt: 'all', logitsAt: 'last' });
      await f32.dispose();
      for (const dtype of ['q8', 'q4'] as const) {
        for (const quantScheme of ['sym', 'asym'] as const) {
          const e = await createEngine(dir, { cacheDir: cache.dir, threads: 2, dtype, quantScheme });
          const res = await e.forward(ids, { hiddenAt: 'all', logitsAt: 'last' });
          await e.dispose();
          res.forEach((r, i) => {
            const errs = layerErrors(r.hidden, ref[i]!.hidden, 5);
            assert.equal(errs[0]!.relError, 0, 'embeddings are not quantized');
            const worst = { rel: Math.max(...errs.map((x) => x.relError)), cos: Math.min(...errs.map((x) => x.cosine)) };
            t.diagnostic(`${family} ${dtype} ${quantScheme} seq ${i}: worst rel ${worst.rel.toFixed(4)}, cos ${worst.cos.toFixed(5)}`);
            assert.ok(worst.rel <= bounds[dtype].rel && worst.cos >= bounds[dtype].cos, `${family} ${dtype} ${quantScheme}: ${JSON.stringify(worst)}`);
            assert.ok(r.logits.every(Number.isFinite));
          });
          // second start: quantized weights and graph from the cache
          const again = await createEngine(dir, { cacheDir: cache.dir, threads: 2, dtype, quantScheme });
          assert.equal(again.graphCached, true);
          await again.dispose();
        }
      }
      // 128-weight blocks (here: one block per row of 64, padded): their own store, a coarser grid, the same bounds
      const coarse = await createEngine(dir, { cacheDir: cache.dir, threads: 2, dtype: 'q4', quantBlock: 128 });
      const res128 = await coarse.forward(ids, { hiddenAt: 'all', logitsAt: 'last' });
      await coarse.dispose();
      res128.forEach((r, i) => {
        const errs = layerErrors(r.hidden, ref[i]!.hidden, 5);
        const worst = { rel: Math.max(...errs.map((x) => x.relError)), cos: Math.min(...errs.map((x) => x.cosine)) };
        t.diagnostic(`${family} q4 asym block 128 seq ${i}: worst rel ${worst.rel.toFixed(4)}, cos ${worst.cos.toFixed(5)}`);
        assert.ok(worst.rel <= bounds.q4.rel && worst.cos >= bounds.q4.cos, `${family} q4 block 128: ${JSON.stringify(worst)}`);
      });
      assert.deepEqual(readdirSync(dir).sort(), before, 'nothing written into the checkpoint folder');
    }
    assert.equal(readdirSync(join(cache.dir, 'quant')).length, 10, 'one quantized store per checkpoint × bits × scheme × block');
  } finally {
    delete process.env.SAFEKEEP_QUIET;
    rmSync(tmp, { recursive: true, force: true });
    cache.cleanup();
  }
});

test('safekeep quantize --report: per-layer table and JSON; bad --dtype exits 2 with one line', async () => {
  const { mkdtempSync, readFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { spawnSync } = await import('node:child_process');
  const { writeRandomCheckpoint } = await import('../src/checkpoint/random.ts');
  const { repoRoot } = await import('./helpers/shared.ts');
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-quant-cli-'));
  try {
    await writeRandomCheckpoint(join(tmp, 'm'), 'llama', { seed: 2, numLayers: 2, hiddenSize: 64, numHeads: 4, numKvHeads: 2, intermediateSize: 96, vocabSize: 90 });
    const env = { ...process.env, SAFEKEEP_CACHE: join(tmp, 'cache') };
    const cli = (...a: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'quantize', '--model', join(tmp, 'm'), ...a], { env, encoding: 'utf8' });
    const r = cli('--dtype', 'q8', '--report', '--out', join(tmp, 'r.json'), '--threads', '1');
    assert.equal(r.status, 0, r.stderr);
    const rep = JSON.parse(readFileSync(join(tmp, 'r.json'), 'utf8')) as { layers: { layer: number; relError: number; cosine: number }[]; scheme: string };
    assert.equal(rep.layers.length, 3);
    assert.equal(rep.layers[0]!.relError, 0);
    for (const l of rep.layers.slice(1)) assert.ok(l.relError > 0 && l.relError < 0.05 && l.cosine > 0.998, JSON.stringify(l));
    assert.match(r.stdout, /layer +rel\.error +cosine/);
    const again = cli('--dtype', 'q8');
    assert.match(again.stdout, /cached/);
    const bad = cli('--dtype', 'q3');
    assert.equal(bad.status, 2);
    assert.equal(bad.stderr.trim().split('\n').length, 1);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
