/**
 * Named hook points and runWithCache against the Float64 oracle (src/engine/reference.ts computes every hook point
 * and applies every edit in its own Float64 code): captured values of all seven points per layer, edits at hook
 * points (add, ablate, clamp, patch, ablate_heads) on the logits and the downstream activations; the analytic facts
 * (resid_post = hidden[l+1], resid_pre = hidden[l], a pattern row sums to 1 and is causal, ablating every head zeroes
 * attn_out, patching every position of the last resid_post restores the clean logits); the plain graph untouched
 * (same cache key, same results) and the bad input refused by name.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Checkpoint } from '../src/checkpoint/types.ts';
import { HOOK_SESSIONS, createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { allHookNames, resolveHookNames } from '../src/engine/graph/hooks.ts';
import { referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import { ActivationCache } from '../src/engine/run/activation-cache.ts';
import type { HookIntervention } from '../src/engine/run/hooked.ts';
import { isSafekeepError } from '../src/util/errors.ts';
import { TINY_MODELS, maxAbsDiff, tempCache } from './helpers/engine.ts';

/** |a − b| ≤ 1e-4 · max(1, max|b|) */
function assertClose(a: ArrayLike<number>, b: ArrayLike<number>, what: string): void {
  let scale = 1;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]!));
  const diff = maxAbsDiff(a, b);
  assert.ok(diff <= 1e-4 * scale, `${what}: max |diff| ${diff} (scale ${scale})`);
}

const direction = (n: number, phase: number) => Array.from({ length: n }, (_, i) => Math.sin(i * 0.7 + phase));

for (const family of ['llama', 'qwen3', 'qwen2', 'mistral'] as const) {
  describe(`hook points vs the Float64 oracle: ${family}`, () => {
    let tmp: string;
    let cache: ReturnType<typeof tempCache>;
    let ck: Checkpoint;
    let engine: OnnxEngine;
    let L: number;
    let d: number;
    const clean = [5, 17, 3, 29, 11, 8, 2];
    const corrupt = [5, 17, 3, 41, 11, 8, 2];

    before(async () => {
      cache = tempCache();
      tmp = mkdtempSync(join(tmpdir(), `safekeep-hooks-${family}-`));
      await writeRandomCheckpoint(join(tmp, 'm'), family, { ...TINY_MODELS[family], seed: 23, std: 0.2 });
      ck = await loadCheckpoint(join(tmp, 'm'));
      engine = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 2 });
      L = ck.config.numLayers;
      d = ck.config.hiddenSize;
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
      if (tmp) rmSync(tmp, { recursive: true, force: true });
    });

    test('every hook point of every layer equals the oracle; resid_post = hidden[l+1], resid_pre = hidden[l]', async () => {
      const { logits, cache: acts } = await engine.runWithCache(clean, { names: ['blocks.*.*'] });
      const ref = referenceForward(ck, clean, { capture: ['blocks.*.*'] });
      assert.deepEqual(acts.names, allHookNames(ck.config));
      for (const name of acts.names) assertClose(acts.get(name).data, ref.hooks.get(name)!, name);
      assertClose(logits, ref.logits, 'logits');
      const [fwd] = await engine.forward([clean]);
      const T = clean.length;
      const { numHeads: H, headDim: hd } = ck.config;
      for (let l = 0; l < L; l++) {
        assert.deepEqual(acts.get(`blocks.${l}.resid_post`).shape, [T, d]);
        assert.deepEqual(acts.get(`blocks.${l}.z`).shape, [T, H, hd]);
        assert.deepEqual(acts.get(`blocks.${l}.pattern`).shape, [H, T, T]);
        assertClose(acts.get(`blocks.${l}.resid_post`).data, fwd!.hidden.subarray((l + 1) * T * d, (l + 2) * T * d), `resid_post ${l} vs hidden[${l + 1}]`);
        assertClose(acts.get(`blocks.${l}.resid_pre`).data, fwd!.hidden.subarray(l * T * d, (l + 1) * T * d), `resid_pre ${l} vs hidden[${l}]`);
        const p = acts.get(`blocks.${l}.pattern`).data;
        for (let h = 0; h < H; h++) {
          for (let t = 0; t < T; t++) {
            let sum = 0;
            for (let s = 0; s < T; s++) { sum += p[(h * T + t) * T + s]!; if (s > t) assert.equal(p[(h * T + t) * T + s], 0, 'causal'); }
            assert.ok(Math.abs(sum - 1) < 1e-5, `pattern row sums to 1 (${sum})`);
          }
        }
        // resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out
        const sum = (a: string, b: string) => acts.get(a).data.map((x, i) => x + acts.get(b).data[i]!);
        assertClose(acts.get(`blocks.${l}.resid_mid`).data, sum(`blocks.${l}.resid_pre`, `blocks.${l}.attn_out`), 'resid_mid = resid_pre + attn_out');
        assertClose(acts.get(`blocks.${l}.resid_post`).data, sum(`blocks.${l}.resid_mid`, `blocks.${l}.mlp_out`), 'resid_post = resid_mid + mlp_out');
      }
      assertClose(fwd!.logits, logits, 'runWithCache logits = forward logits');
    });

    test('edits at hook points (patch, ablate_heads, add, ablate, clamp) equal the oracle, downstream and on the logits', async () => {
      const { cache: cleanActs, logits: cleanLogits } = await engine.runWithCache(clean, { names: ['blocks.*.resid_post', 'blocks.*.z', 'blocks.*.attn_out'] });
      const { numHeads: H, headDim: hd } = ck.config;
      const sets: [string, HookIntervention[]][] = [
        ['patch resid_post of block 1 at the last position', [{ hook: 'blocks.1.resid_post', kind: 'patch', from: cleanActs, positions: [-1] }]],
        ['patch z of every block at positions 3 and 4', [{ hook: 'blocks.*.z', kind: 'patch', from: cleanActs, positions: [3, 4] }]],
        ['ablate heads 0 and the last of block 0', [{ hook: 'blocks.0.z', kind: 'ablate_heads', heads: [0, H - 1] }]],
        ['add at attn_out, clamp at mlp_out, ablate at resid_mid', [
          { hook: 'blocks.0.attn_out', kind: 'add', vector: direction(d, 1), alpha: 2 },
          { hook: `blocks.${L - 1}.mlp_out`, kind: 'clamp', vector: direction(d, 2), alpha: -1.5 },
          { hook: 'blocks.1.resid_mid', kind: 'ablate', vector: direction(d, 3) },
        ]],
        ['patch then add at one point, head ablation at one position', [
          { hook: 'blocks.0.resid_pre', kind: 'add', vector: direction(d, 4), alpha: 1, positions: [2] },
          { hook: 'blocks.0.resid_pre', kind: 'patch', from: new ActivationCache([['blocks.0.resid_pre', { data: new Float32Array(clean.length * d).fill(0.1), shape: [clean.length, d] }]]), positions: [2, 5] },
          { hook: 'blocks.1.z', kind: 'ablate_heads', heads: [1], positions: [-1] },
        ]],
      ];
      const names = ['blocks.*.attn_out', `blocks.${L - 1}.resid_post`, 'blocks.1.pattern'];
      for (const [what, hooks] of sets) {
        const r = await engine.runWithCache(corrupt, { names, hooks });
        const ref = referenceForward(ck, corrupt, { capture: names, hookEdits: hooks });
        assertClose(r.logits, ref.logits, `${what}: logits`);
        for (const n of r.cache.names) assertClose(r.cache.get(n).data, ref.hooks.get(n)!, `${what}: ${n}`);
        const plain = referenceForward(ck, corrupt);
        assert.ok(maxAbsDiff(ref.logits, plain.logits) > 1e-3, `${what}: the edit changes the logits`);
      }
      // analytic: every head of block 0 ablated → attn_out of block 0 is 0 (o_proj has no bias)
      const all = await engine.runWithCache(corrupt, { names: ['blocks.0.attn_out'], hooks: [{ hook: 'blocks.0.z', kind: 'ablate_heads', heads: Array.from({ length: H }, (_, h) => h) }] });
      assert.ok(all.cache.get('blocks.0.attn_out').data.every((x) => x === 0), 'all heads ablated: attn_out = 0');
      assert.equal(hd * H, cleanActs.get('blocks.0.z').data.length / clean.length);
      // analytic: the last block's resid_post patched at every position from the clean run → the clean logits
      const restored = await engine.runWithHooks(corrupt, { hooks: [{ hook: `blocks.${L - 1}.resid_post`, kind: 'patch', from: cleanActs }] });
      assertClose(restored.logits, cleanLogits, 'fully patched last resid_post = clean logits');
    });

    test('generate with edits at hook points (every position, prefill and decode, batched, chunked prefill) = the oracle', async () => {
      const { numHeads: H } = ck.config;
      const hooks: HookIntervention[] = [
        { hook: 'blocks.0.z', kind: 'ablate_heads', heads: [H - 1] },
        { hook: 'blocks.*.attn_out', kind: 'add', vector: direction(d, 7), alpha: 1.5 },
        { hook: `blocks.${L - 1}.mlp_out`, kind: 'ablate', vector: direction(d, 8) },
      ];
      const long = Array.from({ length: 600 }, (_, i) => 3 + ((i * 37) % (ck.config.vocabSize - 3))); // > 512: chunked prefill
      const prompts = [clean, corrupt.slice(0, 4), long];
      const got = await engine.generate(prompts, { maxNewTokens: 5, stopIds: [], hooks, returnStepLogits: true });
      const V = ck.config.vocabSize;
      prompts.forEach((p, i) => {
        const ref = referenceGenerate(ck, p, { maxNewTokens: 5, stopIds: [], hookEdits: hooks });
        assert.deepEqual(got[i]!.generatedIds, ref.generatedIds, `prompt ${i}: greedy ids`);
        assertClose(got[i]!.stepLogits!, ref.stepLogits, `prompt ${i}: step logits`);
        const plain = referenceGenerate(ck, p, { maxNewTokens: 1, stopIds: [] });
        assert.ok(maxAbsDiff(plain.stepLogits.subarray(0, V), ref.stepLogits.subarray(0, V)) > 1e-3, 'the edits change the logits');
      });
      await assert.rejects(engine.generate([clean], { maxNewTokens: 1, hooks: [{ hook: 'blocks.0.z', kind: 'patch', from: new ActivationCache([]) }] }), isSafekeepError);
      await assert.rejects(engine.generate([clean], { maxNewTokens: 1, hooks: [{ hook: 'blocks.0.z', kind: 'ablate_heads', heads: [0], positions: [1] }] }), isSafekeepError);
    });

    test('no hooks: the plain graph keeps its cache key and results; a selection gets its own graph', async () => {
      const graphs = () => readdirSync(join(cache.dir, 'graphs')).filter((f) => f.endsWith('.onnx')).sort();
      const before = graphs();
      const fresh = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 2 });
      try {
        assert.ok(fresh.graphCached, 'the plain graph is the cached one');
        assert.deepEqual(graphs(), before, 'no graph built for a plain engine');
        const [a] = await fresh.forward([clean]);
        const [b] = await engine.forward([clean]);
        assert.equal(maxAbsDiff(a!.logits, b!.logits), 0);
        await fresh.runWithCache(clean, { names: ['blocks.0.mlp_out'] });
        assert.equal(graphs().length, before.length + 1, 'a new selection: one more graph');
      } finally { await fresh.dispose(); }
    });

    test('at most HOOK_SESSIONS hook-point sessions stay open; an evicted selection reopens with the same values', async () => {
      const sels = ['blocks.0.attn_out', 'blocks.0.mlp_out', 'blocks.1.resid_mid', 'blocks.0.resid_mid'];
      const first = await engine.runWithCache(clean, { names: [sels[0]!] });
      for (const n of sels.slice(1)) {
        await engine.runWithCache(clean, { names: [n] });
        assert.ok(engine.hookSessionCount <= HOOK_SESSIONS, `${engine.hookSessionCount} sessions open`);
      }
      const again = await engine.runWithCache(clean, { names: [sels[0]!] });
      assert.equal(maxAbsDiff(again.cache.get(sels[0]!).data, first.cache.get(sels[0]!).data), 0);
      const before = engine.hookSessionCount;
      await engine.runWithHooks(clean, {});
      assert.equal(engine.hookSessionCount, before, 'no hook point: the plain session, none opened');
    });

    test('bad hook names and edits: one SafekeepError naming them', async () => {
      const bad: [string, Parameters<OnnxEngine['runWithCache']>[1]][] = [
        ['unknown point', { names: ['blocks.0.hook_z'] }],
        ['layer out of range', { names: [`blocks.${L}.z`] }],
        ['glob matching nothing', { names: ['layers.*.z'] }],
        ['edit of pattern', { hooks: [{ hook: 'blocks.0.pattern', kind: 'ablate_heads', heads: [0] }] }],
        ['ablate_heads off z', { hooks: [{ hook: 'blocks.0.attn_out', kind: 'ablate_heads', heads: [0] }] }],
        ['head out of range', { hooks: [{ hook: 'blocks.0.z', kind: 'ablate_heads', heads: [ck.config.numHeads] }] }],
        ['wrong vector width', { hooks: [{ hook: 'blocks.0.z', kind: 'add', vector: direction(ck.config.numHeads * ck.config.headDim + 1, 0), alpha: 1 }] }],
        ['patch from a cache without the point', { hooks: [{ hook: 'blocks.0.z', kind: 'patch', from: new ActivationCache([]) }] }],
        ['position outside', { hooks: [{ hook: 'blocks.0.resid_pre', kind: 'add', vector: direction(d, 0), alpha: 1, positions: [99] }] }],
        ['two projections at a point', { hooks: [{ hook: 'blocks.0.resid_mid', kind: 'ablate', vector: direction(d, 0) }, { hook: 'blocks.0.resid_mid', kind: 'ablate', vector: direction(d, 1) }] }],
      ];
      for (const [what, opts] of bad) {
        await assert.rejects(engine.runWithCache(clean, opts), (e) => isSafekeepError(e) && !/\n/.test((e as Error).message), what);
      }
    });
  });
}

describe('ActivationCache', () => {
  test('get / at / stack over layers / save and load as safetensors', () => {
    const a = (v: number) => ({ data: Float32Array.from({ length: 6 }, (_, i) => v + i), shape: [3, 2] });
    const c = new ActivationCache([['blocks.0.attn_out', a(0)], ['blocks.1.attn_out', a(10)], ['blocks.1.z', { data: new Float32Array(12), shape: [3, 2, 2] }]]);
    assert.deepEqual([...c.at('blocks.1.attn_out', -1)], [14, 15]);
    const s = c.stack('blocks.*.attn_out');
    assert.deepEqual(s.shape, [2, 3, 2]);
    assert.deepEqual(s.names, ['blocks.0.attn_out', 'blocks.1.attn_out']);
    assert.deepEqual([...s.data.subarray(6, 8)], [10, 11]);
    assert.throws(() => c.stack('blocks.*.mlp_out'), isSafekeepError);
    assert.throws(() => c.get('blocks.2.z'), isSafekeepError);
    const dir = mkdtempSync(join(tmpdir(), 'safekeep-actcache-'));
    try {
      c.save(join(dir, 'acts.safetensors'), { model: 'test' });
      const back = ActivationCache.load(join(dir, 'acts.safetensors'));
      assert.deepEqual(back.names.sort(), c.names.sort());
      for (const n of c.names) { assert.deepEqual(back.get(n).shape, c.get(n).shape); assert.deepEqual([...back.get(n).data], [...c.get(n).data]); }
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });

  test('hook-name globs select in graph order, each once', () => {
    assert.deepEqual(resolveHookNames(['blocks.1.z', 'blocks.*.z', 'blocks.0.resid_pre'], { numLayers: 2 }), ['blocks.0.resid_pre', 'blocks.0.z', 'blocks.1.z']);
    assert.deepEqual(resolveHookNames(['blocks.1*.attn_out'], { numLayers: 12 }), ['blocks.1.attn_out', 'blocks.10.attn_out', 'blocks.11.attn_out']);
  });
});
