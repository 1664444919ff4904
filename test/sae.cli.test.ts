/**
 * The `sae` commands on the planted model and its planted dictionary (known answers: the dictionary is ± the
 * planted basis, so the reconstruction is exact, L0 is the number of nonzero coordinates, at least half the
 * features are dead, feature 0 is r), bad input as one line and exit 2, and an SAE pulled from a dictionary
 * repository's subfolder (a local stand-in for the hub).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSafetensorsHeader, writeSafetensors } from '../src/checkpoint/safetensors.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import { createEngine } from '../src/engine/engine.ts';
import { writeDirectionsFile } from '../src/experiments/directions-file.ts';
import { writePlantedModel, type PlantedTruth } from '../src/experiments/planted.ts';
import { pullSae, resolveSae } from '../src/hub/pull-sae.ts';
import { loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { loadSae } from '../src/sae/load.ts';
import { runCli } from './helpers/cli.ts';
import { startMockHub } from './helpers/mockHub.ts';
import { repoRoot } from './helpers/shared.ts';

const fixtures = join(repoRoot, 'test', 'fixtures', 'sae');

describe('sae commands on the planted model and its planted dictionary', () => {
  let tmp: string;
  let model: string;
  let truth: PlantedTruth;
  const env = { SAFEKEEP_CACHE: '', SAFEKEEP_QUIET: '1' };
  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'sae-cli-'));
    model = join(tmp, 'planted');
    truth = await writePlantedModel(model, { sae: true });
    env.SAFEKEEP_CACHE = join(tmp, 'cache');
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  test('sae encode: acts.0 [T, 4d] and recon.0 = the stream at hidden[2] (the planted dictionary reconstructs exactly)', async () => {
    const out = join(tmp, 'acts.safetensors');
    const r = await runCli(['sae', 'encode', '--model', model, '--sae', join(model, 'sae'), '--chat', 'how do i build a bomb', '--out', out], { env, timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^sequence 0: \d+ tokens, L0 6[0-4]\.\d\d, FVU 0\.0000$/m);
    const h = readSafetensorsHeader(out);
    const get = (n: string) => { const e = h.entries.find((x) => x.name === n)!; return { data: readTensorF32(e as Parameters<typeof readTensorF32>[0]), shape: e.shape }; };
    const acts = get('acts.0');
    const recon = get('recon.0');
    const T = acts.shape[0]!;
    assert.deepEqual(acts.shape, [T, 256]);
    assert.deepEqual(recon.shape, [T, 64]);
    const engine = await createEngine(model, { cacheDir: join(tmp, 'cache'), threads: 1, quiet: true });
    try {
      const tok = await loadPromptTokenizer(model);
      const ids = tok.encodeChat([{ role: 'user', content: 'how do i build a bomb' }], { addGenerationPrompt: true });
      assert.equal(ids.length, T);
      const x = (await engine.runWithCache(ids, { names: ['blocks.1.resid_post'] })).cache.get('blocks.1.resid_post').data;
      for (let i = 0; i < x.length; i++) assert.ok(Math.abs(recon.data[i]! - x[i]!) < 1e-5, `recon ${i}`);
      // feature 0 is r: its activation at the last token is relu(x·r)
      let xr = 0;
      for (let i = 0; i < 64; i++) xr += x[(T - 1) * 64 + i]! * truth.r[i]!;
      assert.ok(Math.abs(acts.data[(T - 1) * 256]! - Math.max(0, xr)) < 1e-5);
      // the dead half never fires
      for (let t = 0; t < T; t++) for (let j = 128; j < 256; j++) assert.equal(acts.data[t * 256 + j], 0);
    } finally {
      await engine.dispose();
    }
  });

  test('sae encode --edit: adding 1.5 × the refusal feature\'s decoder row (r) makes the benign request refuse; a bad edit is one line', async () => {
    const out = join(tmp, 'edited.safetensors');
    const r = await runCli(['sae', 'encode', '--model', model, '--sae', join(model, 'sae'), '--chat', 'how do i bake a cake', '--out', out, '--edit', 'add:0=1.5'], { env, timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /next token "\{" → with the edits "sorry"/);
    assert.deepEqual(readSafetensorsHeader(out).entries.find((e) => e.name === 'logits.0')?.shape.length, 2);
    const bad = await runCli(['sae', 'encode', '--model', model, '--sae', join(model, 'sae'), '--chat', 'hi', '--out', out, '--edit', 'clamp:99999=1'], { env, timeoutMs: 60_000 });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^safekeep: feature edit \(clamp\): feature 99999 is not in 0\.\.255\n$/);
  });

  test('steering by feature: an intervention file with "vector": "sae:DIR#0" (r) at the SAE\'s row makes generate refuse; another layer is one line', async () => {
    const file = join(tmp, 'feature-0.json');
    writeFileSync(file, JSON.stringify({ interventions: [{ layer: 2, kind: 'add', vector: 'sae:planted/sae#0', alpha: 1.5 }] }));
    const ids = join(tmp, 'ids.json');
    const tok = await loadPromptTokenizer(model);
    writeFileSync(ids, JSON.stringify({ input_ids: [tok.encodeChat([{ role: 'user', content: 'how do i bake a cake' }], { addGenerationPrompt: true })] }));
    const plain = await runCli(['generate', '--model', model, '--ids', ids, '--max-new-tokens', '1', '--out', join(tmp, 'g0.json')], { env, timeoutMs: 120_000 });
    const steered = await runCli(['generate', '--model', model, '--ids', ids, '--max-new-tokens', '1', '--intervene', file, '--out', join(tmp, 'g1.json')], { env, timeoutMs: 120_000 });
    assert.equal(plain.code, 0, plain.stderr);
    assert.equal(steered.code, 0, steered.stderr);
    const first = (f: string) => (JSON.parse(readFileSync(join(tmp, f), 'utf8')) as { sequences: { generated_ids: number[] }[] }).sequences[0]!.generated_ids[0];
    assert.equal(first('g0.json'), tok.tokenId('{'));
    assert.equal(first('g1.json'), tok.tokenId('sorry'));
    writeFileSync(file, JSON.stringify({ interventions: [{ layer: 3, kind: 'add', vector: 'sae:planted/sae#0', alpha: 1.5 }] }));
    const bad = await runCli(['generate', '--model', model, '--ids', ids, '--max-new-tokens', '1', '--intervene', file, '--out', join(tmp, 'g2.json')], { env, timeoutMs: 60_000 });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /interventions\[0\]\.vector: the SAE reads blocks\.1\.hook_resid_post = hidden\[2\], the intervention is at layer 3/);
  });

  test('sae eval: FVU 0, L0 ≤ d, dead share ≥ 1/2, CE unchanged with the reconstruction spliced in', async () => {
    const json = join(tmp, 'eval.json');
    const r = await runCli(['sae', 'eval', '--model', model, '--sae', join(model, 'sae'), '--limit', '4', '--json', json], { env, timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /FVU 0\.0000 {3}L0 6[0-4]\.\d\d {3}dead features/);
    const s = JSON.parse(readFileSync(json, 'utf8')) as { fvu: number; l0: number; deadShare: number; ceIncrease: number; ceClean: number; tokens: number; ceZero: number; ceLossScore: number };
    // the reconstruction recovers all of the loss the zeroed stream changes (SAELens's CE loss score 1)
    assert.ok(Math.abs(s.ceZero - s.ceClean) > 0.1 && Math.abs(s.ceLossScore - 1) < 1e-4, `CE zero ${s.ceZero}, score ${s.ceLossScore}`);
    assert.ok(s.fvu < 1e-9, `FVU ${s.fvu}`);
    assert.ok(s.l0 <= 64 && s.l0 > 60, `L0 ${s.l0}`);
    assert.ok(s.deadShare >= 0.5 && s.deadShare < 1, `dead ${s.deadShare}`);
    assert.ok(Math.abs(s.ceIncrease) < 1e-4 && s.ceClean > 0, `CE ${s.ceClean} +${s.ceIncrease}`);
    // the agent configuration with JSON schemas: the same exact answers on the longer prompts
    const agent = await runCli(['sae', 'eval', '--model', model, '--sae', join(model, 'sae'), '--limit', '2', '--config', 'agent', '--repr', 'schema', '--json', json], { env, timeoutMs: 120_000 });
    assert.equal(agent.code, 0, agent.stderr);
    const a = JSON.parse(readFileSync(json, 'utf8')) as { fvu: number; tokens: number; data: string };
    assert.match(a.data, /agent\.schema \(2 prompts\)/);
    assert.ok(a.fvu < 1e-9 && a.tokens > s.tokens / 2, `${a.tokens} tokens, FVU ${a.fvu}`);
  });

  test('an SAE with input normalization (constant_norm_rescale) runs outside the graph: same exact reconstruction, acts scaled by √d/|x|', async () => {
    const dir = join(tmp, 'sae-cnr');
    cpSync(join(model, 'sae'), dir, { recursive: true });
    const cfg = JSON.parse(readFileSync(join(dir, 'cfg.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(dir, 'cfg.json'), JSON.stringify({ ...cfg, normalize_activations: 'constant_norm_rescale' }));
    const out = join(tmp, 'cnr.safetensors');
    const r = await runCli(['sae', 'encode', '--model', model, '--sae', dir, '--chat', 'how do i build a bomb', '--out', out], { env, timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /FVU 0\.0000$/m);
    const h = readSafetensorsHeader(out);
    const acts = readTensorF32(h.entries.find((e) => e.name === 'acts.0')! as Parameters<typeof readTensorF32>[0]);
    const recon = readTensorF32(h.entries.find((e) => e.name === 'recon.0')! as Parameters<typeof readTensorF32>[0]);
    const T = recon.length / 64;
    const last = recon.subarray((T - 1) * 64);
    const norm = Math.hypot(...last);
    let xr = 0;
    for (let i = 0; i < 64; i++) xr += last[i]! * truth.r[i]!;
    assert.ok(Math.abs(acts[(T - 1) * 256]! - Math.max(0, (8 / norm) * xr)) < 1e-4, `${acts[(T - 1) * 256]} vs ${(8 / norm) * xr}`);
    const e = await runCli(['sae', 'eval', '--model', model, '--sae', dir, '--limit', '2'], { env, timeoutMs: 120_000 });
    assert.equal(e.code, 0, e.stderr);
    assert.match(e.stdout, /FVU 0\.0000 .*\n.*increase -?0\.0000\)/);
  });

  test('sae features: r is feature 0 (cosine 1); 0.6·(−r) + 0.8·u is features 2 (u) and 1 (−r)', async () => {
    const d = 64;
    const rows = 5;
    const dirs = join(tmp, 'directions.safetensors');
    const fill = (v: (i: number) => number) => ({ layers: rows, d, data: Float64Array.from({ length: rows * d }, (_, k) => v(k % d)) });
    writeDirectionsFile(dirs, {
      'refusal.chatbot': fill((i) => truth.r[i]!),
      'schema.harmful': fill((i) => -0.6 * truth.r[i]! + 0.8 * truth.u[i]!),
    }, { model: 'planted', lStar: 2, layerRule: 'test', schemaPairs: 'all', provenance: {} });
    const r = await runCli(['sae', 'features', '--sae', join(model, 'sae'), '--direction', `${dirs}#refusal.chatbot`, '--top', '2'], { env });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /at hidden\[2\] \(blocks\.1\.hook_resid_post\)/);
    assert.match(r.stdout, /feature +0 +cosine 1\.0000/);
    const json = join(tmp, 'features.json');
    const s = await runCli(['sae', 'features', '--sae', join(model, 'sae'), '--direction', `${dirs}#schema.harmful`, '--json', json], { env });
    assert.equal(s.code, 0, s.stderr);
    const f = (JSON.parse(readFileSync(json, 'utf8')) as { features: { index: number; cosine: number }[] }).features;
    assert.equal(f.length, 256);
    assert.deepEqual(f.slice(0, 2).map((x) => x.index), [2, 1]);
    assert.ok(Math.abs(f[0]!.cosine - 0.8) < 1e-5 && Math.abs(f[1]!.cosine - 0.6) < 1e-5);
    // attribution over an activation cache: harmful rows 0.5·r + 0.2·u at hidden[2], benign 0.1·r + 0.2·u → feature 0 (r):
    // Δact 0.4 × projection 1; u's feature fires equally in both (Δ 0)
    const n = 6;
    const L1 = 5;
    const hidden = new Float32Array(n * L1 * d);
    const keys: string[] = [];
    for (let k = 0; k < n; k++) {
      const harm = k % 2 === 0;
      keys.push(`p${k >> 1}:${harm ? 'harmful' : 'benign'}`);
      for (let i = 0; i < d; i++) hidden[(k * L1 + 2) * d + i] = (harm ? 0.5 : 0.1) * truth.r[i]! + 0.2 * truth.u[i]!;
    }
    writeSafetensors(join(tmp, 'chatbot.safetensors'), { hidden: { dtype: 'F32', shape: [n, L1, d], data: hidden } });
    writeFileSync(join(tmp, 'chatbot.json'), JSON.stringify({ rows: keys.map((key) => ({ key })) }));
    const png = join(tmp, 'features.png');
    const a = await runCli(['sae', 'features', '--sae', join(model, 'sae'), '--direction', `${dirs}#refusal.chatbot`, '--activations', join(tmp, 'chatbot.safetensors'), '--top', '2', '--json', json, '--figure', png], { env, timeoutMs: 120_000 });
    assert.equal(a.code, 0, a.stderr);
    assert.equal(readFileSync(png).subarray(1, 4).toString('latin1'), 'PNG');
    const attr = (JSON.parse(readFileSync(json, 'utf8')) as { attribution: { index: number; attribution: number; meanDiff: number }[] }).attribution;
    assert.equal(attr[0]!.index, 0);
    assert.ok(Math.abs(attr[0]!.attribution - 0.4) < 1e-5 && Math.abs(attr[0]!.meanDiff - 0.4) < 1e-5, JSON.stringify(attr[0]));
    assert.ok(Math.abs(attr[1]!.attribution) < 1e-5);
    // feature 0 (r) fires most on the harmful rows (0.5 each, ties by row order), and the line says so
    const tops = (JSON.parse(readFileSync(json, 'utf8')) as { topActivating: Record<string, { key: string; activation: number }[]> }).topActivating;
    assert.deepEqual(tops['0']!.map((t) => t.key), ['p0:harmful', 'p1:harmful', 'p2:harmful']);
    assert.ok(Math.abs(tops['0']![0]!.activation - 0.5) < 1e-5);
    // the same cache encoded (no model): feature 0 reads x·r = 0.5 on the harmful rows, 0.1 on the benign ones
    const enc = join(tmp, 'cache-acts.safetensors');
    const e = await runCli(['sae', 'encode', '--sae', join(model, 'sae'), '--activations', join(tmp, 'chatbot.safetensors'), '--out', enc], { env, timeoutMs: 60_000 });
    assert.equal(e.code, 0, e.stderr);
    assert.match(e.stdout, /^6 cached rows at hidden\[2\]: L0 \d+\.\d\d, FVU 0\.0000/);
    const eh = readSafetensorsHeader(enc);
    const ea = readTensorF32(eh.entries.find((x) => x.name === 'acts')! as Parameters<typeof readTensorF32>[0]);
    assert.deepEqual(eh.entries.find((x) => x.name === 'acts')!.shape, [6, 256]);
    for (let k = 0; k < 6; k++) assert.ok(Math.abs(ea[k * 256]! - (k % 2 === 0 ? 0.5 : 0.1)) < 1e-5);
    assert.match(a.stdout, /feature +0 +cosine 1\.0000 +most active on p0:harmful \(0\.500\), p1:harmful \(0\.500\), p2:harmful \(0\.500\)/);
  });

  test('bad input: a dictionary of another width, a missing SAE, an unknown hook — one line, exit 2', async () => {
    const wrong = await runCli(['sae', 'encode', '--model', model, '--sae', join(fixtures, 'saelens-standard'), '--chat', 'hi', '--out', join(tmp, 'x.safetensors')], { env, timeoutMs: 60_000 });
    assert.equal(wrong.code, 2);
    assert.match(wrong.stderr, /^safekeep: SAE 0: d_in 16 is not the model's width 64/);
    assert.equal(wrong.stderr.trim().split('\n').length, 1);
    assert.ok(!existsSync(join(tmp, 'x.safetensors')));
    const missing = await runCli(['sae', 'features', '--sae', join(tmp, 'nope'), '--direction', 'x.safetensors'], { env });
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /no such folder or file/);
    const hook = await runCli(['sae', 'encode', '--model', model, '--sae', join(model, 'sae'), '--hook', 'blocks.7.hook_resid_post', '--chat', 'hi', '--out', join(tmp, 'y.safetensors')], { env, timeoutMs: 60_000 });
    assert.equal(hook.code, 2);
    assert.match(hook.stderr, /names layer 7; the model has blocks 0\.\.3/);
  });
});

test('pull --subfolder: one SAE of a dictionary repository, only its files; --sae owner/name/sub resolves to it', async () => {
  const npz = readFileSync(join(fixtures, 'gemma-scope-npz', 'gemma-scope-2b-pt-res', 'layer_1', 'width_16k', 'average_l0_10', 'params.npz'));
  const hub = await startMockHub([{ id: 'google/gemma-scope-tiny-res', files: {
    'layer_1/width_16k/average_l0_10/params.npz': npz,
    'layer_2/width_16k/average_l0_10/params.npz': npz,
    'README.md': Buffer.from('dictionaries'),
  } }]);
  const tmp = mkdtempSync(join(tmpdir(), 'sae-pull-'));
  try {
    const models = join(tmp, 'models');
    const r = await pullSae('google/gemma-scope-tiny-res', 'layer_1/width_16k/average_l0_10', { endpoint: hub.endpoint, modelsDir: models, progress: false });
    assert.equal(r.files.length, 1);
    assert.ok(!existsSync(join(models, 'google--gemma-scope-tiny-res', 'layer_2')));
    const dir = await resolveSae('google/gemma-scope-tiny-res/layer_1/width_16k/average_l0_10', { modelsDir: models, offline: true });
    assert.equal(dir, r.dir);
    const sae = loadSae(dir);
    assert.equal(sae.config.hookName, 'blocks.1.hook_resid_post');
    await assert.rejects(resolveSae('google/gemma-scope-tiny-res/layer_2/width_16k/average_l0_10', { modelsDir: models, offline: true }), /not downloaded.*HF_HUB_OFFLINE/);
    await assert.rejects(pullSae('google/gemma-scope-tiny-res', 'layer_9', { endpoint: hub.endpoint, modelsDir: models, progress: false }), /no SAE in 'layer_9'/);
    const cli = await runCli(['pull', 'google/gemma-scope-tiny-res', '--subfolder', 'layer_2/width_16k/average_l0_10', '--quiet'], { env: { HF_ENDPOINT: hub.endpoint, SAFEKEEP_MODELS: models } });
    assert.equal(cli.code, 0, cli.stderr);
    assert.ok(existsSync(join(models, 'google--gemma-scope-tiny-res', 'layer_2', 'width_16k', 'average_l0_10', 'params.npz')));
    writeFileSync(join(tmp, 'ok'), '');
  } finally {
    await hub.close();
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('sae encode on a real-architecture checkpoint (hf5 llama-default) with a random dictionary of every architecture = transformers + torch', async () => {
  const index = JSON.parse(readFileSync(join(fixtures, 'index.json'), 'utf8')) as { splice: { ids: number[] } };
  const h = readSafetensorsHeader(join(fixtures, 'splice-architectures.expected.safetensors'));
  const want = (n: string) => readTensorF32(h.entries.find((e) => e.name === n)! as Parameters<typeof readTensorF32>[0]);
  const tmp = mkdtempSync(join(tmpdir(), 'sae-hf5-'));
  try {
    const ids = join(tmp, 'ids.json');
    writeFileSync(ids, JSON.stringify({ input_ids: [index.splice.ids] }));
    for (const [arch, folder] of [['jumprelu', 'splice-sae'], ['standard', 'splice-standard'], ['topk', 'splice-topk']] as const) {
      const out = join(tmp, `${arch}.safetensors`);
      const r = await runCli(['sae', 'encode', '--model', join(repoRoot, 'test', 'fixtures', 'hf5', 'llama-default', 'model'), '--sae', join(fixtures, folder), '--ids', ids, '--out', out],
        { env: { SAFEKEEP_CACHE: join(tmp, 'cache'), SAFEKEEP_QUIET: '1' }, timeoutMs: 120_000 });
      assert.equal(r.code, 0, r.stderr);
      const got = readSafetensorsHeader(out);
      for (const what of ['acts', 'recon']) {
        const g = readTensorF32(got.entries.find((e) => e.name === `${what}.0`)! as Parameters<typeof readTensorF32>[0]);
        const w = want(`${arch}.${what}`);
        assert.equal(g.length, w.length, `${arch} ${what}`);
        let scale = 1;
        let worst = 0;
        for (let i = 0; i < w.length; i++) { scale = Math.max(scale, Math.abs(w[i]!)); worst = Math.max(worst, Math.abs(g[i]! - w[i]!)); }
        assert.ok(worst <= 1e-4 * scale, `${arch} ${what}: max |diff| ${worst} (scale ${scale})`);
      }
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
