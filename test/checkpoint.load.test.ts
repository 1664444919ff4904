import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ropeInvFreq } from '../src/checkpoint/rope.ts';
import { checkpointDTypes, loadCheckpoint, parameterCount } from '../src/checkpoint/load.ts';
import { readSafetensorsHeader } from '../src/checkpoint/safetensors.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import { roundToBf16 } from '../src/checkpoint/dtype.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Family } from '../src/checkpoint/types.ts';
import { needShared } from './helpers/shared.ts';

function tmp(): string {
  return mkdtempSync(join(tmpdir(), 'safekeep-ck-'));
}

test('loadCheckpoint: llama3 fixture config matches the fixture README table', async (t) => {
  const dir = needShared(t, 'fixtures', 'hf-reference', 'models', 'llama3-tiny-f32');
  if (!dir) return;
  const ck = await loadCheckpoint(dir);
  const c = ck.config;
  assert.equal(c.family, 'llama');
  assert.deepEqual([c.numLayers, c.hiddenSize, c.numHeads, c.numKvHeads, c.headDim, c.intermediateSize, c.vocabSize], [4, 64, 4, 2, 16, 128, 512]);
  assert.equal(c.ropeTheta, 500000);
  assert.deepEqual(c.rope, { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 });
  assert.equal(c.tieWordEmbeddings, false);
  assert.equal(c.rmsNormEps, 1e-5);
  assert.equal(c.qkvBias, false);
  assert.equal(c.qkNorm, false);
  assert.deepEqual(c.eosTokenIds, [2]);
  assert.equal(c.bosTokenId, 1);
  assert.equal(ck.tensors.size, 4 * 9 + 3);
  assert.ok(ck.tensors.has('lm_head.weight'));
  assert.match(ck.configHash, /^[0-9a-f]{64}$/);
});

test('ropeInvFreq: llama3 scaling and plain RoPE equal transformers\' inv_freq (fixture refs)', async (t) => {
  const root = needShared(t, 'fixtures', 'hf-reference');
  if (!root) return;
  for (const tag of ['llama3-tiny-f32', 'qwen3-tiny-f32']) {
    const ck = await loadCheckpoint(join(root, 'models', tag));
    const ref = readSafetensorsHeader(join(root, 'refs', `${tag}.safetensors`)).entries.find((e) => e.name === 'rope.inv_freq')!;
    const want = readTensorF32({ ...ref, dtype: 'F32' });
    const got = ropeInvFreq(ck.config);
    assert.equal(got.length, want.length);
    for (let j = 0; j < want.length; j++) {
      // transformers computes them in fp32: equal to f32 precision
      assert.ok(Math.abs(got[j]! - want[j]!) <= 1e-6 * Math.abs(want[j]!), `${tag} inv_freq[${j}] ${got[j]} vs ${want[j]}`);
    }
  }
});

test('loadCheckpoint: qwen3 fixture is tied, has q/k norms and no lm_head', async (t) => {
  const dir = needShared(t, 'fixtures', 'hf-reference', 'models', 'qwen3-tiny-f32');
  if (!dir) return;
  const ck = await loadCheckpoint(dir);
  assert.equal(ck.config.family, 'qwen3');
  assert.equal(ck.config.tieWordEmbeddings, true);
  assert.equal(ck.config.qkNorm, true);
  assert.equal(ck.config.headDim, 16);
  assert.ok(!ck.tensors.has('lm_head.weight'));
  assert.deepEqual(ck.tensors.get('model.layers.3.self_attn.k_norm.weight')!.shape, [16]);
  assert.equal(parameterCount(ck), 512 * 64 + 4 * (2 * 64 + 64 * 64 * 2 + 2 * 32 * 64 + 2 * 16 + 3 * 64 * 128) + 64);
});

test('writeRandomCheckpoint → loadCheckpoint, every family, dtype and sharding', async () => {
  const dir = tmp();
  try {
    const fams: Family[] = ['llama', 'mistral', 'qwen2', 'qwen3'];
    for (const fam of fams) {
      const d = await writeRandomCheckpoint(join(dir, fam), fam, { seed: 7 });
      const ck = await loadCheckpoint(d);
      assert.equal(ck.config.family, fam);
      assert.equal(ck.config.qkvBias, fam === 'qwen2');
      assert.equal(ck.config.qkNorm, fam === 'qwen3');
      assert.equal(ck.config.tieWordEmbeddings, fam === 'qwen2' || fam === 'qwen3');
      assert.equal(ck.config.rope.type, fam === 'llama' ? 'llama3' : 'default');
      assert.deepEqual(checkpointDTypes(ck), ['F32']);
      // statistics of the draws: weights N(0, 0.01), norms 1 + 0.1 N(0,1)
      const w = readTensorF32(ck.tensors.get('model.layers.0.mlp.up_proj.weight')!);
      const mean = w.reduce((a, b) => a + b, 0) / w.length;
      const sd = Math.sqrt(w.reduce((a, b) => a + (b - mean) ** 2, 0) / w.length);
      assert.ok(Math.abs(mean) < 0.01 && Math.abs(sd - 0.1) < 0.01, `mean ${mean} sd ${sd}`);
      const nrm = readTensorF32(ck.tensors.get('model.norm.weight')!);
      assert.ok(Math.abs(nrm.reduce((a, b) => a + b, 0) / nrm.length - 1) < 0.05);
    }
    // same seed → same bytes; BF16 = RNE rounding of the F32 draws; sharded = same tensors
    const a = await loadCheckpoint(await writeRandomCheckpoint(join(dir, 'a'), 'qwen2', { seed: 3 }));
    const a2 = await loadCheckpoint(await writeRandomCheckpoint(join(dir, 'a2'), 'qwen2', { seed: 3 }));
    const b = await loadCheckpoint(await writeRandomCheckpoint(join(dir, 'b'), 'qwen2', { seed: 3, dtype: 'BF16' }));
    const s = await loadCheckpoint(await writeRandomCheckpoint(join(dir, 's'), 'qwen2', { seed: 3, shards: 3 }));
    assert.deepEqual(readFileSync(join(a.dir, 'model.safetensors')), readFileSync(join(a2.dir, 'model.safetensors')));
    assert.deepEqual(checkpointDTypes(b), ['BF16']);
    assert.equal(JSON.parse(readFileSync(join(b.dir, 'config.json'), 'utf8')).torch_dtype, 'bfloat16');
    assert.equal(new Set([...s.tensors.values()].map((e) => e.file)).size, 3);
    for (const [name, e] of a.tensors) {
      const x = readTensorF32(e);
      assert.deepEqual(readTensorF32(b.tensors.get(name)!), roundToBf16(x), name);
      assert.deepEqual(readTensorF32(s.tensors.get(name)!), x, name);
    }
    // overrides: untied, no rope scaling, list eos, other sizes
    const o = await loadCheckpoint(await writeRandomCheckpoint(join(dir, 'o'), 'llama', {
      tieWordEmbeddings: true, ropeScaling: null, eosTokenId: [2, 5], numLayers: 2, hiddenSize: 96, numHeads: 6, numKvHeads: 3, vocabSize: 300, dtype: 'F16',
    }));
    assert.deepEqual([o.config.numLayers, o.config.hiddenSize, o.config.numHeads, o.config.numKvHeads, o.config.headDim, o.config.vocabSize], [2, 96, 6, 3, 16, 300]);
    assert.equal(o.config.tieWordEmbeddings, true);
    assert.deepEqual(o.config.rope, { type: 'default' });
    assert.deepEqual(o.config.eosTokenIds, [2, 5]);
    assert.deepEqual(checkpointDTypes(o), ['F16']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
