/**
 * An SAE spliced into the engine's forward against transformers with a forward hook that does the same
 * (test/fixtures/sae/splice.*, scripts/hf-fixtures/sae.py): the activations at blocks.1.resid_post, the logits with
 * the reconstruction spliced in, with a feature ablated plus the error term, and unchanged with the error term alone
 * (≤ 1e-4 relative, the hf5-hooks tolerance); every architecture's graph equals src/sae/math.ts (held to torch by
 * sae.fidelity.test.ts) at a hook point; the capture-only graph leaves the logits bit-equal to the plain graph's.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { loadSae } from '../src/sae/load.ts';
import { encode, splice } from '../src/sae/math.ts';
import type { Sae } from '../src/sae/types.ts';
import { maxAbsDiff, readAllF32, tempCache } from './helpers/engine.ts';
import { HF5 } from './helpers/hf5.ts';
import { repoRoot } from './helpers/shared.ts';

const DIR = join(repoRoot, 'test', 'fixtures', 'sae');
const index = JSON.parse(readFileSync(join(DIR, 'index.json'), 'utf8')) as { splice: { ids: number[]; hook: string; ablate_feature: number } };

function close(what: string, got: ArrayLike<number>, want: ArrayLike<number>, tol = 1e-4): void {
  let scale = 1;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  const d = maxAbsDiff(got, want);
  assert.ok(d <= tol * scale, `${what}: max |diff| ${d.toExponential(2)} (scale ${scale.toFixed(2)})`);
}

/** A random SAE of the model's width in each architecture, from a fixture's weights tiled to d_in = 64. */
function widen(sae: Sae, d: number): Sae {
  return { ...sae, config: { ...sae.config, dIn: d, hookName: 'blocks.1.hook_resid_post' } };
}

describe('SAE spliced into the engine vs transformers forward hooks (llama-default)', () => {
  let engine: OnnxEngine;
  let cache: ReturnType<typeof tempCache>;
  let refs: ReturnType<typeof readAllF32>;
  let sae: Sae;
  const { ids, ablate_feature: f } = index.splice;
  before(async () => {
    cache = tempCache();
    engine = await createEngine(join(HF5, 'llama-default', 'model'), { cacheDir: cache.dir, threads: 1 });
    refs = readAllF32(join(DIR, 'splice.expected.safetensors'));
    sae = loadSae(join(DIR, 'splice-sae'));
  });
  after(async () => {
    await engine?.dispose();
    cache?.cleanup();
  });

  test('activations at blocks.1.resid_post, and the capture leaves the logits as they were', async () => {
    const plain = await engine.runWithCache(ids, { names: ['blocks.1.resid_post'] });
    const r = await engine.runWithCache(ids, { names: ['blocks.1.resid_post'], saes: [{ sae }] });
    const acts = r.cache.get('blocks.1.resid_post.sae_acts');
    assert.deepEqual(acts.shape, [ids.length, sae.config.dSae]);
    close('sae_acts', acts.data, refs.get('splice.acts')!.data);
    assert.deepEqual(r.logits, plain.logits, 'capture only: logits bit-equal');
    close('plain logits', r.logits, refs.get('splice.plain.logits')!.data);
    // the graph's activations = the library's math on the captured stream
    close('graph = math', acts.data, encode(sae, plain.cache.get('blocks.1.resid_post').data, ids.length).acts, 1e-5);
  });

  test('the reconstruction spliced in, and a feature ablated with the error term = transformers', async () => {
    const recon = await engine.runWithCache(ids, { saes: [{ sae, splice: 'reconstruction' }] });
    close('recon logits', recon.logits, refs.get('splice.recon.logits')!.data);
    const abl = await engine.runWithCache(ids, { saes: [{ sae, edits: [{ kind: 'ablate', feature: f }] }] });
    close('ablate logits', abl.logits, refs.get('splice.ablate.logits')!.data);
    const exact = await engine.runWithCache(ids, { saes: [{ sae, splice: 'error' }] });
    close('error term alone', exact.logits, refs.get('splice.plain.logits')!.data);
  });

  test('every architecture in the graph = src/sae/math.ts on the captured stream (acts, clamp + add with the error term)', async () => {
    // at blocks.0.resid_post, read downstream as blocks.1.resid_pre (the same stream, after the splice)
    const plain = await engine.runWithCache(ids, { names: ['blocks.0.resid_post'] });
    const x = plain.cache.get('blocks.0.resid_post').data;
    const d = engine.dModel;
    for (const [name, arch] of [['saelens-standard', 'standard'], ['saelens-topk-rescale', 'topk'], ['saelens-jumprelu', 'jumprelu']] as const) {
      const base = loadSae(join(DIR, name));
      // the fixtures are d_in 16: tile them to the model's width with random-looking but fixed weights
      const big = tile(base, d);
      assert.equal(big.config.architecture, arch);
      const edits = [{ kind: 'clamp' as const, feature: 3, value: 1.5 }, { kind: 'add' as const, feature: 7, alpha: 0.75 }];
      const r = await engine.runWithCache(ids, { names: ['blocks.1.resid_pre'], saes: [{ sae: big, hook: 'blocks.0.hook_resid_post', edits }] });
      close(`${name}: acts`, r.cache.get('blocks.0.resid_post.sae_acts').data, encode(big, x, ids.length).acts, 1e-5);
      close(`${name}: spliced stream`, r.cache.get('blocks.1.resid_pre').data, splice(big, x, ids.length, { edits, errorTerm: true }).out, 1e-5);
    }
  });

  test('an SAE of another width, or at a point the model lacks, is one error line', async () => {
    await assert.rejects(engine.runWithCache(ids, { saes: [{ sae: widen(loadSae(join(DIR, 'saelens-standard')), 16) }] }), /d_in 16 is not the model's width/);
    await assert.rejects(engine.runWithCache(ids, { saes: [{ sae, hook: 'blocks.9.hook_resid_post' }] }), /names layer 9/);
    await assert.rejects(engine.runWithCache(ids, { saes: [{ sae, edits: [{ kind: 'ablate', feature: 10_000 }] }] }), /feature 10000 is not in/);
  });
});

/** The fixture SAE's weights repeated to d_in = d (scaled so activations stay moderate), hook at blocks.1.resid_post. */
function tile(s: Sae, d: number): Sae {
  const { dIn, dSae } = s.config;
  const W = (m: Sae['W_enc'], rows: number, cols: number, rowOf: (r: number) => number, colOf: (c: number) => number): Sae['W_enc'] => {
    const src = m.data as Float32Array;
    const out = new Float32Array(rows * cols);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[r * cols + c] = src[rowOf(r) * m.cols + colOf(c)]! * (1 + ((r * 7 + c * 3) % 5) / 10) / 2;
    return { dtype: 'F32', rows, cols, data: out };
  };
  return {
    ...s,
    config: { ...s.config, dIn: d, hookName: 'blocks.1.hook_resid_post' },
    W_enc: W(s.W_enc, d, dSae, (r) => r % dIn, (c) => c),
    W_dec: W(s.W_dec, dSae, d, (r) => r, (c) => c % dIn),
    b_dec: Float32Array.from({ length: d }, (_, i) => s.b_dec[i % dIn]!),
  };
}
