/**
 * Sparse autoencoders during generation (run/sae-rows.ts): greedy generation with an SAE spliced in and feature edits
 * (ablate, clamp, add α·W_dec[j]; splice 'error' and 'reconstruction') against an independent reference — a loop of
 * full forwards of `runWithCache` with the same SAE over the growing sequence (no KV cache, no scheduler): greedy ids
 * equal, each step's logits within 1e-4 × max|value|. Rows with different edits, an unedited SAE and no SAE at all,
 * submitted together, decode in shared steps (the stepper is recorded) and each gets what it gets alone; an unedited
 * SAE with the 'error' splice gives the ids of no SAE; a prompt over 512 tokens (chunked prefill) too. Bad attachments
 * are one SafekeepError before any step. And against transformers: greedy generation on its KV cache with a forward hook
 * splicing the same SAE with the same edits at every position (scripts/hf-fixtures/sae_generate.py →
 * test/fixtures/sae/splice-generate.*): ids equal, step logits within 1e-4 × max|value| (the hf5-hooks tolerance).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { Scheduler } from '../src/engine/run/scheduler.ts';
import type { SaeAttachment } from '../src/engine/run/sae-hooks.ts';
import type { StepInput, Stepper } from '../src/engine/run/step.ts';
import type { GenerateOptions, GenerateResult } from '../src/engine/types.ts';
import type { Sae } from '../src/sae/types.ts';
import { makeRng } from '../src/util/rng.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { argmax } from '../src/engine/run/argmax.ts';
import { SMALL_GQA, readAllF32, tempCache } from './helpers/engine.ts';
import { loadSae } from '../src/sae/load.ts';
import type { FeatureEdit } from '../src/sae/math.ts';
import { repoRoot } from './helpers/shared.ts';
import { prompt, rel } from './helpers/scheduler.ts';

const TOL = 1e-4;

/** a standard SAE of width d_sae at blocks.1.resid_post with random weights (features fire on about half the tokens) */
function randomSae(d: number, m: number, seed: number): Sae {
  const rng = makeRng(seed);
  const g = (n: number, s: number) => Float32Array.from({ length: n }, () => s * rng.normal());
  return {
    config: {
      architecture: 'standard', dIn: d, dSae: m, k: null, rescaleActsByDecoderNorm: false, applyBDecToInput: true, normalizeActivations: 'none',
      hookName: 'blocks.1.hook_resid_post', dtype: 'F32', layout: 'saelens', source: `random-${seed}`,
    },
    W_enc: { dtype: 'F32', rows: d, cols: m, data: g(d * m, 0.3) },
    W_dec: { dtype: 'F32', rows: m, cols: d, data: g(m * d, 0.3) },
    b_enc: g(m, 0.1), b_dec: g(d, 0.1), threshold: null, bytes: 8 * d * m,
  };
}

/** the reference: greedy tokens from full forwards of the growing sequence, each with the SAE spliced in */
async function reference(engine: OnnxEngine, ids: number[], n: number, saes: readonly SaeAttachment[] | undefined): Promise<{ ids: number[]; logits: Float32Array }> {
  const seq = [...ids];
  const out: number[] = [];
  const V = engine.vocabSize;
  const logits = new Float32Array(n * V);
  for (let k = 0; k < n; k++) {
    const r = await engine.runWithCache(seq, { logitsAt: 'last', ...(saes ? { saes: saes.map((a) => ({ ...a, captureActs: false, splice: a.splice ?? 'error' })) } : {}) });
    logits.set(r.logits, k * V);
    const t = argmax(r.logits);
    out.push(t);
    seq.push(t);
  }
  return { ids: out, logits };
}

/** the engine as a Stepper recording each step's batch and width */
function recording(engine: OnnxEngine): { stepper: Stepper; steps: { batch: number; width: number; sae: boolean }[] } {
  const steps: { batch: number; width: number; sae: boolean }[] = [];
  const stepper = new Proxy(engine, {
    get(target, key) {
      if (key === 'step') return (inp: StepInput) => { steps.push({ batch: inp.batch, width: inp.width, sae: !!inp.hooks?.selection.sae?.length }); return target.step(inp); };
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as Stepper;
  return { stepper, steps };
}

describe('SAE feature edits during generation vs full forwards of runWithCache (random llama, random SAE)', () => {
  const { opts: modelOpts } = SMALL_GQA[0]!;
  const V = modelOpts.vocabSize!;
  const d = modelOpts.hiddenSize!;
  let tmp: string;
  let cache: ReturnType<typeof tempCache>;
  let engine: OnnxEngine;
  const sae = randomSae(d, 96, 7);
  const other = randomSae(d, 96, 8);
  const N = 6;
  const o: GenerateOptions = { maxNewTokens: N, stopIds: [], returnStepLogits: true };
  /** the rows: edits of every kind, both splices, an unedited SAE, another dictionary, none */
  const rows: { what: string; saes?: SaeAttachment[] }[] = [
    { what: 'ablate 3, 5', saes: [{ sae, edits: [{ kind: 'ablate', feature: 3 }, { kind: 'ablate', feature: 5 }] }] },
    { what: 'clamp 3 = 4', saes: [{ sae, edits: [{ kind: 'clamp', feature: 3, value: 4 }] }] },
    { what: 'add 2.5·W_dec[7]', saes: [{ sae, edits: [{ kind: 'add', feature: 7, alpha: 2.5 }] }] },
    { what: 'unedited (error)', saes: [{ sae }] },
    { what: 'reconstruction, clamp 11 = 2', saes: [{ sae, splice: 'reconstruction', edits: [{ kind: 'clamp', feature: 11, value: 2 }] }] },
    { what: 'another dictionary, add', saes: [{ sae: other, edits: [{ kind: 'add', feature: 1, alpha: -3 }] }] },
    { what: 'no SAE' },
  ];
  const ps = rows.map((_, i) => prompt(40 + i, 6 + 2 * i, V));

  before(async () => {
    cache = tempCache();
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-sae-gen-'));
    await writeRandomCheckpoint(join(tmp, 'm'), 'llama', { seed: 5, ...modelOpts });
    engine = await createEngine(join(tmp, 'm'), { cacheDir: cache.dir, threads: 2 });
  });
  after(async () => {
    await engine?.dispose();
    cache?.cleanup();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  test('each row alone equals the full-forward reference; the edits change the logits', async () => {
    const plain = await reference(engine, ps[0]!, N, undefined);
    for (const [i, r] of rows.entries()) {
      const [got] = await engine.generate([ps[i]!], { ...o, ...(r.saes ? { saes: r.saes } : {}) });
      const ref = await reference(engine, ps[i]!, N, r.saes);
      assert.deepEqual(got!.generatedIds, ref.ids, `${r.what}: greedy ids`);
      assert.ok(rel(got!.stepLogits!, ref.logits) <= TOL, `${r.what}: step logits ${rel(got!.stepLogits!, ref.logits)}`);
    }
    // the edits do something (on prompt 0): the ablation's first logits are not the plain model's
    const ablated = await reference(engine, ps[0]!, 1, rows[0]!.saes);
    assert.ok(rel(ablated.logits, plain.logits.subarray(0, V)) > 1e-3, 'ablating features 3 and 5 changes the logits');
  });

  test('rows with different edits, an unedited SAE, another dictionary and no SAE, submitted together, each get what they get alone', async () => {
    const alone: GenerateResult[] = [];
    for (const [i, r] of rows.entries()) alone.push((await engine.generate([ps[i]!], { ...o, ...(r.saes ? { saes: r.saes } : {}) }))[0]!);
    const { stepper, steps } = recording(engine);
    const sched = new Scheduler(stepper, { prefixCacheBytes: 0 });
    const got = await Promise.all(rows.map((r, i) => sched.submit(ps[i]!, { ...o, ...(r.saes ? { saes: r.saes } : {}) })));
    rows.forEach((r, i) => {
      assert.deepEqual(got[i]!.generatedIds, alone[i]!.generatedIds, `${r.what}: greedy ids`);
      assert.ok(rel(got[i]!.stepLogits!, alone[i]!.stepLogits!) <= 1e-5, `${r.what}: step logits ${rel(got[i]!.stepLogits!, alone[i]!.stepLogits!)}`);
    });
    // decode groups: the four 'error' rows of one dictionary together (their edits per row), the reconstruction row,
    // the other dictionary and the plain row each apart — N − 1 decode steps of each
    const decode = steps.filter((s) => s.width === 1);
    const sizes = decode.map((s) => `${s.sae ? 'sae' : 'plain'}:${s.batch}`).sort();
    const expected = [...Array(N - 1).fill('plain:1'), ...Array(N - 1).fill('sae:1'), ...Array(N - 1).fill('sae:1'), ...Array(N - 1).fill('sae:4')].sort();
    assert.deepEqual(sizes, expected);
    // an unedited SAE with the error term leaves the model as it was
    const none = (await engine.generate([ps[3]!], o))[0]!;
    assert.deepEqual(got[3]!.generatedIds, none.generatedIds, 'unedited SAE (error splice) = no SAE');
  });

  test('a prompt over 512 tokens (prefilled in causal chunks) with an SAE edit equals the reference', async () => {
    const long = prompt(99, 600, V);
    const saes: SaeAttachment[] = [{ sae, edits: [{ kind: 'clamp', feature: 2, value: 3 }] }];
    const [got] = await engine.generate([long], { ...o, maxNewTokens: 3, saes });
    const ref = await reference(engine, long, 3, saes);
    assert.deepEqual(got!.generatedIds, ref.ids);
    assert.ok(rel(got!.stepLogits!, ref.logits) <= TOL, `step logits ${rel(got!.stepLogits!, ref.logits)}`);
  });

  test('bad attachments are one SafekeepError before any step', async () => {
    const bad: [SaeAttachment, RegExp][] = [
      [{ sae, edits: [{ kind: 'ablate', feature: 96 }] }, /feature 96 is not in 0\.\.95/],
      [{ sae, edits: [{ kind: 'add', feature: 1, alpha: Number.NaN }] }, /alpha must be a finite number/],
      [{ sae, edits: [{ kind: 'clamp', feature: 1, value: 2e12 }] }, /value must be a finite number with \|alpha\| ≤ 1e\+12/],
      [{ sae, captureActs: true }, /generation returns no SAE activations/],
      [{ sae, splice: 'capture' }, /splice 'capture' changes nothing/],
      [{ sae, hook: 'blocks.9.resid_post' }, /names layer 9/],
      [{ sae: { ...sae, config: { ...sae.config, dIn: d + 1 } } }, /d_in 49 is not the model's width 48/],
    ];
    for (const [a, re] of bad) {
      await assert.rejects(engine.generate([ps[0]!], { ...o, saes: [a] }), (e: unknown) => e instanceof SafekeepError && re.test(e.message));
    }
    await assert.rejects(engine.generate([ps[0]!], { ...o, saes: [{ sae }, { sae: other }] }), /a second SAE at blocks\.1\.resid_post/);
  });
});

describe('SAE feature edits during generation vs transformers (llama-default, a forward hook on its KV-cached greedy loop)', () => {
  const dir = join(repoRoot, 'test', 'fixtures', 'sae');
  const fx = JSON.parse(readFileSync(join(dir, 'splice-generate.json'), 'utf8')) as {
    model: string; sae: string; ids: number[]; max_new_tokens: number;
    cases: { name: string; splice: 'error' | 'reconstruction'; edits: FeatureEdit[]; generated: number[]; min_margin: number }[];
  };
  let engine: OnnxEngine;
  let cache: ReturnType<typeof tempCache>;
  before(async () => {
    cache = tempCache();
    engine = await createEngine(join(repoRoot, fx.model), { cacheDir: cache.dir, threads: 2 });
  });
  after(async () => {
    await engine?.dispose();
    cache?.cleanup();
  });

  test('every case alone and all of them batched: transformers\' ids, its step logits within 1e-4', async () => {
    const sae = loadSae(join(repoRoot, fx.sae));
    const refs = readAllF32(join(dir, 'splice-generate.expected.safetensors'));
    const o: GenerateOptions = { maxNewTokens: fx.max_new_tokens, stopIds: [], returnStepLogits: true };
    const saesOf = (c: (typeof fx.cases)[number]): SaeAttachment[] => [{ sae, splice: c.splice, edits: c.edits }];
    const batched = await Promise.all(fx.cases.map((c) => engine.submit(fx.ids, { ...o, saes: saesOf(c) })));
    for (const [i, c] of fx.cases.entries()) {
      const [alone] = await engine.generate([fx.ids], { ...o, saes: saesOf(c) });
      const want = refs.get(c.name)!.data;
      for (const got of [alone!, batched[i]!]) {
        assert.deepEqual(got.generatedIds, c.generated, `${c.name}: ids`);
        assert.ok(rel(got.stepLogits!, want) <= TOL, `${c.name}: step logits ${rel(got.stepLogits!, want)}`);
      }
    }
    // the unedited SAE is the plain model
    const [plain] = await engine.generate([fx.ids], o);
    assert.deepEqual(plain!.generatedIds, fx.cases.find((c) => c.name === 'none')!.generated);
  });
});

test('src/engine/run stays in files under 500 lines (the per-row SAE edits live in their own module)', () => {
  const dir = join(repoRoot, 'src', 'engine', 'run');
  for (const f of readdirSync(dir).filter((x) => x.endsWith('.ts'))) {
    const lines = readFileSync(join(dir, f), 'utf8').split('\n').length - 1;
    assert.ok(lines < 500, `src/engine/run/${f}: ${lines} lines`);
  }
});
