/**
 * Per-row interventions inside one decode step (graph/intervene.ts row sets, run/scheduler.ts): sequences with
 * different steering vectors and alphas, an ablation, a clamp, positions 'generated' and a plain row decode in the
 * SAME engine step — every decode step is counted by wrapping the stepper — and each row's greedy ids, step logits
 * and first-token hidden state equal that sequence decoded alone by the Float64 oracle (src/engine/reference.ts),
 * within 1e-5 × max|value|. Also: sequences with different steering joining a decode batch mid-flight; hook-point
 * edits of different values at the same points sharing a step (another selection decoding apart); and one
 * multi-token step (B = 3, T > 1, left padding, a cached past) whose rows carry their own sets, against the oracle.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Checkpoint } from '../src/checkpoint/types.ts';
import { createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import { callInterventions, interventionInputs, leftPad } from '../src/engine/run/batch.ts';
import { Scheduler } from '../src/engine/run/scheduler.ts';
import type { StepInput, Stepper } from '../src/engine/run/step.ts';
import type { GenerateOptions, GenerateResult, HookIntervention, Intervention } from '../src/engine/types.ts';
import onnxProto from 'onnx-proto';
import { buildModelGraph } from '../src/engine/graph/decoder.ts';
import { resolveWeightFiles } from '../src/engine/runtime/weight-files.ts';
import { SMALL_GQA, tempCache } from './helpers/engine.ts';
import { prompt, rel, until } from './helpers/scheduler.ts';

const REL = 1e-5;

/** the engine as a Stepper whose decode steps (`step` calls) are recorded: rows and per-row set counts */
function recording(engine: OnnxEngine): { stepper: Stepper; steps: { batch: number; width: number; steerSets: number; projectionSets: number }[] } {
  const steps: { batch: number; width: number; steerSets: number; projectionSets: number }[] = [];
  const per = (engine.numLayers + 1) * engine.dModel;
  const stepper = new Proxy(engine, {
    get(target, key) {
      if (key === 'step') {
        return (inp: StepInput) => {
          steps.push({ batch: inp.batch, width: inp.width, steerSets: inp.steer.length / per, projectionSets: (inp.project?.dir.length ?? per) / per });
          return target.step(inp);
        };
      }
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as Stepper;
  return { stepper, steps };
}

for (const { family, opts: modelOpts } of SMALL_GQA.slice(0, 2)) {
  describe(`per-row interventions in one decode step vs Float64 oracle (random ${family})`, () => {
    let tmp: string;
    let cache: ReturnType<typeof tempCache>;
    let ck: Checkpoint;
    let engine: OnnxEngine;
    const V = modelOpts.vocabSize!;
    const d = modelOpts.hiddenSize!;
    const L = modelOpts.numLayers!;
    const vecA = Array.from({ length: d }, (_, i) => Math.sin(i + 1));
    const vecB = Array.from({ length: d }, (_, i) => Math.cos(2 * i));
    const vecC = Array.from({ length: d }, (_, i) => ((i * 37) % 11) - 5);

    function check(what: string, ids: number[], got: GenerateResult, o: GenerateOptions): void {
      const ref = referenceGenerate(ck, ids, {
        maxNewTokens: o.maxNewTokens, stopIds: o.stopIds ?? [],
        ...(o.steer ? { steer: o.steer } : {}), ...(o.interventions ? { interventions: o.interventions } : {}),
      });
      assert.deepEqual(got.generatedIds, ref.generatedIds, `${what}: greedy ids`);
      assert.ok(rel(got.stepLogits!, ref.stepLogits) <= REL, `${what}: step logits ${rel(got.stepLogits!, ref.stepLogits)}`);
      if (o.returnFirstTokenHidden) assert.ok(rel(got.firstTokenHidden!, ref.firstTokenHidden!) <= REL, `${what}: first-token hidden`);
    }

    before(async () => {
      cache = tempCache();
      tmp = mkdtempSync(join(tmpdir(), 'safekeep-rows-'));
      await writeRandomCheckpoint(join(tmp, 'm'), family, { seed: 5, ...modelOpts });
      ck = await loadCheckpoint(join(tmp, 'm'));
      engine = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 2 });
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
      if (tmp) rmSync(tmp, { recursive: true, force: true });
    });

    test('steer vectors / alphas, ablate, clamp, generated-only and plain rows: every decode step serves all of them', async () => {
      const { stepper, steps } = recording(engine);
      const sched = new Scheduler(stepper, { prefixCacheBytes: 0 });
      const base: GenerateOptions = { maxNewTokens: 7, stopIds: [], returnStepLogits: true, returnFirstTokenHidden: true };
      const ablate: Intervention[] = [{ layer: 1, kind: 'ablate', vector: vecB }];
      const clamp: Intervention[] = [{ layer: 2, kind: 'clamp', vector: vecC, alpha: 1.5 }];
      const mixed: Intervention[] = [{ layer: 2, kind: 'add', vector: vecA, alpha: 2 }, { layer: 2, kind: 'clamp', vector: vecB, alpha: -1, positions: 'generated' }];
      const calls: [number[], GenerateOptions][] = [
        [prompt(1, 12, V), base],
        [prompt(2, 17, V), { ...base, steer: { layer: 2, vector: vecA, alpha: 3 } }],
        [prompt(3, 9, V), { ...base, steer: { layer: 2, vector: vecA, alpha: -2 } }],
        [prompt(4, 14, V), { ...base, steer: { layer: 0, vector: vecC, alpha: 4 } }],
        [prompt(5, 11, V), { ...base, steer: { layer: L, vector: vecB, alpha: 2, positions: 'generated' } }],
        [prompt(6, 15, V), { ...base, interventions: ablate }],
        [prompt(7, 10, V), { ...base, interventions: clamp }],
        [prompt(8, 13, V), { ...base, interventions: mixed }],
      ];
      const results = await Promise.all(calls.map(([ids, o]) => sched.submit(ids, o)));
      results.forEach((r, i) => check(`call ${i}`, calls[i]![0], r, calls[i]![1]));
      const plain = referenceGenerate(ck, calls[1]![0], { maxNewTokens: 7, stopIds: [] });
      assert.notDeepEqual(results[1]!.stepLogits!.subarray(V, 2 * V), Float32Array.from(plain.stepLogits.subarray(V, 2 * V)), 'steering changes the decode');
      // every prompt is prefilled in the first iteration (≤ 512 tokens), so all 8 rows decode together: 6 steps of 8
      // rows (token 1 comes from the prefill), each with one steer and one projection set per row
      const decode = steps.filter((s) => s.width === 1);
      assert.equal(sched.stats.decodeSteps, 6);
      assert.deepEqual(decode.map((s) => s.batch), new Array<number>(6).fill(8), 'one decode step per iteration, all 8 rows');
      assert.ok(decode.every((s) => s.steerSets === 8 && s.projectionSets === 8), 'per-row sets fed');
      assert.equal(sched.inFlight, 0);
    });

    test('rows with equal sets feed one set (the plain path); only the steering differs: one projection set', async () => {
      const { stepper, steps } = recording(engine);
      const sched = new Scheduler(stepper, { prefixCacheBytes: 0 });
      const o: GenerateOptions = { maxNewTokens: 4, stopIds: [], returnStepLogits: true };
      const ps = [prompt(9, 8, V), prompt(10, 13, V), prompt(11, 6, V)];
      const plain = await Promise.all(ps.map((p) => sched.submit(p, o)));
      plain.forEach((r, i) => check(`plain ${i}`, ps[i]!, r, o));
      assert.ok(steps.filter((s) => s.width === 1).every((s) => s.batch === 3 && s.steerSets === 1 && s.projectionSets === 1));
      steps.length = 0;
      const sweep = [1, -1, 3].map((alpha) => ({ ...o, steer: { layer: 1, vector: vecA, alpha } }));
      const swept = await Promise.all(ps.map((p, i) => sched.submit(p, sweep[i]!)));
      swept.forEach((r, i) => check(`alpha ${sweep[i]!.steer!.alpha}`, ps[i]!, r, sweep[i]!));
      assert.ok(steps.filter((s) => s.width === 1).every((s) => s.batch === 3 && s.steerSets === 3 && s.projectionSets === 1));
    });

    test('sequences with different steering join a decode batch mid-flight', async () => {
      const sched = new Scheduler(engine, { stepTokens: 8, prefixCacheBytes: 0 });
      const first: [number[], GenerateOptions] = [prompt(12, 10, V), { maxNewTokens: 20, stopIds: [], returnStepLogits: true }];
      const later: [number[], GenerateOptions][] = [
        [prompt(13, 19, V), { maxNewTokens: 12, stopIds: [], returnStepLogits: true, steer: { layer: 1, vector: vecA, alpha: 2.5, positions: 'generated' } }],
        [prompt(14, 7, V), { maxNewTokens: 10, stopIds: [], returnStepLogits: true, interventions: [{ layer: 3, kind: 'clamp', vector: vecC, alpha: 0.5, positions: 'generated' }] }],
        [prompt(15, 12, V), { maxNewTokens: 8, stopIds: [], returnStepLogits: true, steer: { layer: 2, vector: vecB, alpha: -3 } }],
      ];
      const r0 = sched.submit(...first);
      await until(() => sched.stats.decodeSteps >= 2);
      const rs = later.map(([ids, o]) => sched.submit(ids, o));
      const got = await Promise.all([r0, ...rs]);
      [first, ...later].forEach(([ids, o], i) => check(`sequence ${i}`, ids, got[i]!, o));
      assert.equal(sched.stats.peakBatch, 4, 'all four decoded in one batch');
      // each sequence decodes its maxNew − 1 rows, none computed twice or for a finished sequence
      assert.equal(sched.stats.decodeRows, 19 + 11 + 9 + 7);
    });

    test('hook edits at the same points with different values share a step; another selection decodes apart', async () => {
      const { stepper, steps } = recording(engine);
      const sched = new Scheduler(stepper, { prefixCacheBytes: 0 });
      const o: GenerateOptions = { maxNewTokens: 5, stopIds: [], returnStepLogits: true };
      const H = modelOpts.numHeads!;
      const edits: HookIntervention[][] = [
        [{ hook: 'blocks.0.attn_out', kind: 'add', vector: vecA, alpha: 2 }, { hook: 'blocks.1.z', kind: 'ablate_heads', heads: [0] }],
        [{ hook: 'blocks.0.attn_out', kind: 'clamp', vector: vecB, alpha: 1 }, { hook: 'blocks.1.z', kind: 'ablate_heads', heads: [H - 1] }],
        [{ hook: 'blocks.0.attn_out', kind: 'ablate', vector: vecC }, { hook: 'blocks.1.z', kind: 'ablate_heads', heads: [0, 1] }],
        [{ hook: 'blocks.0.attn_out', kind: 'add', vector: vecA, alpha: 2 }, { hook: 'blocks.1.z', kind: 'ablate_heads', heads: [0] }],
      ];
      const ps = [prompt(22, 9, V), prompt(23, 14, V), prompt(24, 7, V), prompt(25, 11, V), prompt(26, 10, V)];
      const other: HookIntervention[] = [{ hook: 'blocks.2.mlp_out', kind: 'ablate', vector: vecA }];
      const got = await Promise.all([...edits.map((h, i) => sched.submit(ps[i]!, { ...o, hooks: h })), sched.submit(ps[4]!, { ...o, hooks: other })]);
      [...edits, other].forEach((h, i) => {
        const ref = referenceGenerate(ck, ps[i]!, { maxNewTokens: 5, stopIds: [], hookEdits: h });
        assert.deepEqual(got[i]!.generatedIds, ref.generatedIds, `row ${i}: greedy ids`);
        assert.ok(rel(got[i]!.stepLogits!, ref.stepLogits) <= REL, `row ${i}: step logits ${rel(got[i]!.stepLogits!, ref.stepLogits)}`);
      });
      // two selections → two decode batches per iteration: 4 steps of the 4 rows editing attn_out + z, 4 of the other
      const decode = steps.filter((s) => s.width === 1).map((s) => s.batch).sort();
      assert.deepEqual(decode, [1, 1, 1, 1, 4, 4, 4, 4]);
    });

    // q4 at accuracy level 0 (f32 activations): batch = alone within float rounding. At the default level 4 the
    // activations are rounded to int8 per block, so a 1e-7 difference in a row's input (another buffer width) can move
    // one activation by a whole int8 step: greedy ids equal, logits within that step's effect (measured up to 5e-3)
    for (const [accuracy, tol] of [[0, REL], [4, 2e-2]] as const) test(`q4 at accuracy level ${accuracy} (steer rows as an Add after MatMulNBits): a batch with per-row sets equals each sequence decoded alone`, async () => {
      const q = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 2, dtype: 'q4', quantAccuracy: accuracy });
      try {
        const o: GenerateOptions = { maxNewTokens: 5, stopIds: [], returnStepLogits: true };
        const calls: [number[], GenerateOptions][] = [
          [prompt(27, 9, V), { ...o, steer: { layer: 2, vector: vecA, alpha: 3 } }],
          [prompt(28, 12, V), { ...o, interventions: [{ layer: 1, kind: 'clamp', vector: vecB, alpha: 1 }] }],
          [prompt(29, 7, V), o],
        ];
        const together = await Promise.all(calls.map(([ids, c]) => q.submit(ids, c)));
        for (const [i, [ids, c]] of calls.entries()) {
          const alone = await q.submit(ids, c);
          assert.deepEqual(together[i]!.generatedIds, alone.generatedIds, `row ${i}: greedy ids`);
          assert.ok(rel(together[i]!.stepLogits!, alone.stepLogits!) <= tol, `row ${i}: step logits ${rel(together[i]!.stepLogits!, alone.stepLogits!)}`);
        }
      } finally { await q.dispose(); }
    });

    test('one multi-token step with per-row sets (B 3, T 5 on a cached past, left padding) equals each row alone', async () => {
      const lists: Intervention[][] = [
        callInterventions({ steer: { layer: 1, vector: vecA, alpha: 2 } }),
        [{ layer: 2, kind: 'ablate', vector: vecB }, { layer: 0, kind: 'add', vector: vecC, alpha: -1 }],
        [],
      ];
      const sets = lists.map((l) => interventionInputs(L, d, l));
      const per = (L + 1) * d;
      const stack = (part: (i: number) => Float32Array, n: number) => { const o = new Float32Array(3 * n); sets.forEach((_, i) => o.set(part(i), i * n)); return o; };
      const steer = stack((i) => sets[i]!.steer, per);
      const project = { dir: stack((i) => sets[i]!.dir, per), value: stack((i) => sets[i]!.value, L + 1) };
      const prompts = [prompt(16, 6, V), prompt(17, 4, V), prompt(18, 6, V)];
      const more = [prompt(19, 5, V), prompt(20, 5, V), prompt(21, 5, V)];
      const pb = leftPad(prompts);
      const first = await engine.step({ ids: pb.ids, batch: 3, width: pb.width, starts: pb.pads, past: null, steer, project, hiddenIndex: [], logitsIndex: [] });
      const ids = BigInt64Array.from(more.flat(), (x) => BigInt(x));
      const all = Array.from({ length: 15 }, (_, i) => i);
      const out = await engine.step({ ids, batch: 3, width: 5, starts: pb.pads, past: first.present, steer, project, hiddenIndex: all, logitsIndex: all });
      for (let b = 0; b < 3; b++) {
        const ref = referenceForward(ck, [...prompts[b]!, ...more[b]!], { interventions: lists[b]! });
        const T0 = prompts[b]!.length;
        const want = new Float64Array((L + 1) * 5 * d);
        for (let l = 0; l <= L; l++) for (let t = 0; t < 5; t++) want.set(ref.hidden.subarray((l * (T0 + 5) + T0 + t) * d, (l * (T0 + 5) + T0 + t + 1) * d), (l * 5 + t) * d);
        const got = new Float32Array((L + 1) * 5 * d);
        for (let l = 0; l <= L; l++) got.set(out.hidden.subarray((l * 15 + b * 5) * d, (l * 15 + b * 5 + 5) * d), l * 5 * d);
        assert.ok(rel(got, want) <= REL, `row ${b}: hidden ${rel(got, want)}`);
        const logits = out.logits.subarray(b * 5 * V, (b + 1) * 5 * V);
        assert.ok(rel(logits, ref.logits.subarray(T0 * V)) <= REL, `row ${b}: logits`);
      }
      // a set count that is neither 1 nor B is a programming error, not silently broadcast
      await assert.rejects(engine.step({ ids, batch: 3, width: 5, starts: pb.pads, past: first.present, steer: steer.subarray(0, 2 * per), hiddenIndex: [], logitsIndex: [] }), /2 sets for 3 rows/);
    });
  });
}

interface PNode { name: string; opType: string; input: string[] }
const graphNodes = (bytes: Uint8Array): PNode[] =>
  (onnxProto as unknown as { onnx: { ModelProto: { decode(b: Uint8Array): { graph: { node: PNode[] } } } } }).onnx.ModelProto.decode(bytes).graph.node;

test('the plain graph pays for per-row sets one Mul per layer and one mask per step; steer rows stay in the down-projection bias', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-rows-graph-'));
  try {
    const L = 4;
    await writeRandomCheckpoint(tmp, 'llama', { seed: 2, numLayers: L, hiddenSize: 32, numHeads: 4, numKvHeads: 2, intermediateSize: 64, vocabSize: 89 });
    const ck = await loadCheckpoint(tmp);
    const { realFiles } = resolveWeightFiles(ck);
    for (const attention of ['onnx', 'mha', 'matmul'] as const) {
      const nodes = graphNodes(buildModelGraph(ck, { dtype: 'f32', attention, fuse: true, quant: null }, realFiles));
      const named = (suffix: string) => nodes.filter((n) => n.name.split('/').at(-1)!.replace(/_\d+$/, '') === suffix);
      assert.equal(nodes.filter((n) => n.opType === 'EyeLike').length, 1, `${attention}: one row mask per step`);
      assert.equal(named('to_value_own').length, L + 1, `${attention}: one mask Mul per projection (hidden[0..L])`);
      assert.equal(named('to_value').length + named('projected').length, 2 * (L + 1), `${attention}: two Gemms per projection`);
      assert.equal(named('steered').length, 1, `${attention}: only hidden[0]'s steer row is an Add`);
      const down = named('down_proj_steered');
      assert.equal(down.length, L, `${attention}: the other steer rows ride in the down projection`);
      assert.ok(down.every((n) => n.opType === 'Gemm' && n.input.length === 3), `${attention}: as the Gemm's C input`);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
