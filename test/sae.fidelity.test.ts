/**
 * Every SAE layout and architecture against a torch reference of SAELens's formulas (test/fixtures/sae, written by
 * scripts/hf-fixtures/sae.py): encode, decode, and the splice with feature edits with and without the error term,
 * within 1e-5; the JumpReLU threshold's strict inequality on a pre-activation exactly equal to its threshold.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from './helpers/shared.ts';
import { readSafetensorsHeader } from '../src/checkpoint/safetensors.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import { loadSae } from '../src/sae/load.ts';
import { decode, encode, splice } from '../src/sae/math.ts';

const dir = join(repoRoot, 'test', 'fixtures', 'sae');
const index = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as {
  cases: Record<string, { layout: string; arch: string; path?: string; tie?: number; k?: number; edits: { ablate: number; clamp: number; value: number } }>;
};

function tensors(file: string): Record<string, { data: Float32Array; shape: number[] }> {
  const h = readSafetensorsHeader(file);
  return Object.fromEntries(h.entries.map((e) => [e.name, { data: readTensorF32(e as Parameters<typeof readTensorF32>[0]), shape: e.shape }]));
}

function close(got: Float32Array, want: Float32Array, what: string, tol = 1e-5): void {
  assert.equal(got.length, want.length, `${what}: length`);
  let worst = 0;
  let at = -1;
  for (let i = 0; i < got.length; i++) {
    const e = Math.abs(got[i]! - want[i]!) / Math.max(1, Math.abs(want[i]!));
    if (!(e <= worst)) { worst = e; at = i; }
  }
  assert.ok(worst <= tol, `${what}: value ${at} is ${got[at]}, torch ${want[at]} (relative error ${worst})`);
}

for (const [name, c] of Object.entries(index.cases)) {
  test(`sae ${name}: encode, decode and splice equal the torch reference (${c.layout}, ${c.arch})`, () => {
    const sae = loadSae(join(dir, c.path ?? name));
    assert.equal(sae.config.architecture, c.arch);
    const ref = tensors(join(dir, `${name}.expected.safetensors`));
    const n = ref.x!.shape[0]!;
    const { acts, norm } = encode(sae, ref.x!.data, n);
    close(acts, ref.acts!.data, 'acts');
    close(decode(sae, acts, n, norm), ref.recon!.data, 'recon');
    const edits = [{ kind: 'ablate' as const, feature: c.edits.ablate }, { kind: 'clamp' as const, feature: c.edits.clamp, value: c.edits.value }];
    close(splice(sae, ref.x!.data, n, { edits, errorTerm: true }).out, ref.spliced!.data, 'spliced with the error term');
    close(splice(sae, ref.x!.data, n, { edits, errorTerm: false }).out, ref.spliced_noerr!.data, 'spliced without the error term');
    if (c.arch === 'topk') {
      for (let t = 0; t < n; t++) assert.ok(acts.subarray(t * sae.config.dSae, (t + 1) * sae.config.dSae).filter((v) => v > 0).length <= c.k!);
    }
    if (c.tie !== undefined) {
      // the one-hot last row: its pre-activation of feature `tie` equals the threshold exactly → 0 (strict >)
      const last = n - 1;
      assert.equal(sae.threshold![c.tie] !== undefined, true);
      assert.equal(acts[last * sae.config.dSae + c.tie], 0, 'a pre-activation equal to its threshold is not active');
      const lowered = { ...sae, threshold: Float32Array.from(sae.threshold!, (v, j) => (j === c.tie ? v - 2 ** -10 : v)) };
      assert.ok(encode(lowered, ref.x!.data, n).acts[last * sae.config.dSae + c.tie]! > 0, 'just below the threshold it is active');
    }
  });
}

test('sae layouts: the hook is read from cfg.json, hyperparams.json or the Gemma Scope path', () => {
  assert.equal(loadSae(join(dir, 'saelens-standard')).config.hookName, 'blocks.1.hook_resid_post');
  assert.equal(loadSae(join(dir, 'llama-scope')).config.hookName, 'blocks.1.hook_resid_post');
  assert.equal(loadSae(join(dir, index.cases['gemma-scope-npz']!.path!)).config.hookName, 'blocks.1.hook_resid_post');
  assert.equal(loadSae(join(dir, index.cases['gemma-scope-safetensors']!.path!, 'params.safetensors')).config.hookName, 'blocks.1.hook_resid_post');
});

test('sae weights stay in their stored dtype: bf16 is held as 16-bit patterns and counted so', () => {
  const bf = loadSae(join(dir, 'saelens-standard-bf16'));
  const f32 = loadSae(join(dir, 'saelens-standard'));
  assert.equal(bf.W_enc.dtype, 'BF16');
  assert.ok(bf.W_enc.data instanceof Uint16Array);
  const { dIn, dSae } = f32.config;
  assert.equal(f32.bytes, 2 * dIn * dSae * 4 + 4 * (2 * dSae + dIn));
  assert.equal(bf.bytes, 2 * dIn * dSae * 2 + 4 * (2 * dSae + dIn));
  assert.equal(loadSae(join(dir, 'llama-scope')).W_dec.dtype, 'BF16');
});
