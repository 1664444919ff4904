/**
 * What loadSae refuses, by name, and what it accepts without reading: cfg.json fields that would change the math,
 * pickles, shape mismatches, layouts it does not know; SAELens's harmless fields; a deflated .npz.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from './helpers/shared.ts';
import { loadSae } from '../src/sae/load.ts';
import { readNpz } from '../src/sae/npz.ts';
import { writeSafetensors } from '../src/checkpoint/safetensors.ts';

const fixtures = join(repoRoot, 'test', 'fixtures', 'sae');

function withCfg(patch: (cfg: Record<string, unknown>) => void): string {
  const dir = mkdtempSync(join(tmpdir(), 'sae-cfg-'));
  cpSync(join(fixtures, 'saelens-topk'), dir, { recursive: true });
  const cfg = JSON.parse(readFileSync(join(dir, 'cfg.json'), 'utf8')) as Record<string, unknown>;
  patch(cfg);
  writeFileSync(join(dir, 'cfg.json'), JSON.stringify(cfg));
  return dir;
}

function refuses(dir: string, re: RegExp): void {
  try {
    assert.throws(() => loadSae(dir), (e: Error) => e.name === 'SafekeepError' && re.test(e.message) && !e.message.includes('\n'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('cfg.json: a field that changes the math and is not implemented is refused by name', () => {
  refuses(withCfg((c) => { c.normalize_activations = 'expected_average_only_in'; }), /expected_average_only_in/);
  refuses(withCfg((c) => { c.reshape_activations = 'hook_z'; }), /reshape_activations/);
  refuses(withCfg((c) => { c.architecture = 'gated'; }), /architecture 'gated'/);
  refuses(withCfg((c) => { c.some_new_scale = 2; }), /unknown field 'some_new_scale'/);
  refuses(withCfg((c) => { c.dtype = 'float64'; }), /dtype 'float64'/);
  refuses(withCfg((c) => { c.finetuning_scaling_factor = true; }), /finetuning_scaling_factor/);
  refuses(withCfg((c) => { c.hook_head_index = 3; }), /hook_head_index/);
  refuses(withCfg((c) => { c.k = 1000; }), /k = 1000 is more than d_sae/);
});

test('cfg.json: SAELens\'s harmless fields and the pre-6.0 spellings are accepted', () => {
  const dir = withCfg((c) => {
    c.device = 'cuda';
    c.metadata = { ...(c.metadata as object), neuronpedia_id: 'x/y', dataset_path: 'p', exotic_future_key: 1 };
    c.hook_point = 'blocks.0.hook_resid_pre';
    delete c.architecture;
    delete c.k;
    c.activation_fn_str = 'topk';
    c.activation_fn_kwargs = { k: 4 };
    c.lr = 3e-4;
    c.l1_coefficient = 5;
  });
  try {
    const sae = loadSae(dir);
    assert.equal(sae.config.architecture, 'topk');
    assert.equal(sae.config.k, 4);
    assert.equal(sae.config.hookName, 'blocks.0.hook_resid_pre');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a shape that disagrees with cfg.json is one line naming the tensor', () => {
  refuses(withCfg((c) => { c.d_sae = 40; }), /W_enc has shape \[16,48\], W_enc \[d_in, d_sae\] needs \[16,40\]/);
  const dir = mkdtempSync(join(tmpdir(), 'sae-shape-'));
  cpSync(join(fixtures, 'saelens-standard'), dir, { recursive: true });
  writeSafetensors(join(dir, 'sae_weights.safetensors'), {
    W_enc: { dtype: 'F32', shape: [16, 48], data: new Float32Array(16 * 48) },
    W_dec: { dtype: 'F32', shape: [48, 16], data: new Float32Array(48 * 16) },
    b_enc: { dtype: 'F32', shape: [48], data: new Float32Array(48) },
    b_dec: { dtype: 'F32', shape: [15], data: new Float32Array(15) },
  });
  refuses(dir, /b_dec has shape \[15\], b_dec \[d_in\] needs \[16\]/);
});

test('pickles are never unpickled: the error names the Python conversion', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sae-pth-'));
  writeFileSync(join(dir, 'sae.pth'), 'not read');
  try {
    assert.throws(() => loadSae(join(dir, 'sae.pth')), /never unpickles.*encoder_linear\.weight.*sae_weights\.safetensors/);
    assert.throws(() => loadSae(dir), /no SAE here/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('npz: a deflated archive (np.savez_compressed) reads the same arrays as the stored one', () => {
  const stored = readNpz(join(fixtures, 'gemma-scope-npz', 'gemma-scope-2b-pt-res', 'layer_1', 'width_16k', 'average_l0_10', 'params.npz'));
  const deflated = readNpz(join(fixtures, 'gemma-scope-npz.compressed.npz'));
  assert.deepEqual(stored.map((a) => a.name).sort(), ['b_dec', 'b_enc', 'threshold', 'w_dec', 'w_enc']);
  for (const a of stored) {
    const b = deflated.find((x) => x.name === a.name)!;
    assert.deepEqual(b.shape, a.shape);
    assert.deepEqual(Buffer.from(b.bytes()), Buffer.from(a.bytes()));
  }
  const dir = mkdtempSync(join(tmpdir(), 'sae-npz-'));
  writeFileSync(join(dir, 'params.npz'), 'PK not really');
  refuses(dir, /not a zip archive/);
});

test('Gemma Scope hooks come from the Hub paths, not from any "res" in a folder name', async () => {
  const { gemmaScopeHook } = await import('../src/sae/load.ts');
  assert.equal(gemmaScopeHook('models/google--gemma-scope-2b-pt-res/layer_12/width_16k/average_l0_71/params.npz'), 'blocks.12.hook_resid_post');
  assert.equal(gemmaScopeHook('hub/gemma-scope-2-1b-pt/resid_post_all/layer_7_width_16k_l0_big/params.safetensors'), 'blocks.7.hook_resid_post');
  assert.equal(gemmaScopeHook('google--gemma-scope-9b-pt-mlp/layer_3/width_16k/params.npz'), 'blocks.3.hook_mlp_out');
  assert.equal(gemmaScopeHook('google--gemma-scope-9b-pt-att/layer_3/width_16k/params.npz'), null);
  assert.equal(gemmaScopeHook('test/fixtures/results/layer_3/params.npz'), null);
});

test('a cfg dtype float16 rounds f32 weights as numpy / torch do (nearest even, overflow to inf, subnormals)', async () => {
  const { roundTo } = await import('../src/sae/matrix.ts');
  const v = Float32Array.from([1 / 3, 65504, 65520, 1e-8, 6e-8, -2.5e-5, 0.1, 1.0009765625 + 2 ** -11, 3.14159]);
  // numpy: v.astype(np.float16).astype(np.float32)
  const want = [0.333251953125, 65504, Infinity, 0, 5.960464477539063e-8, -2.4974346160888672e-5, 0.0999755859375, 1.001953125, 3.140625];
  assert.deepEqual(Array.from(roundTo(v, 'F16')), want);
});
