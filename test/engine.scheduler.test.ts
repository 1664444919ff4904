/**
 * The continuous-batching scheduler (src/engine/run/scheduler.ts) against the Float64 oracle (src/engine/reference.ts,
 * one sequence at a time, no batching): sequences joining while others decode, prompts prefilled in chunks between
 * decode steps, a sequence leaving at its own stop id, per-sequence steering and interventions in one decode batch,
 * cancellation of one sequence, and automatic prefix caching (hits ending on block boundaries inside the shared
 * prefix, the last prompt token always computed, interventions keying the blocks). Greedy ids equal; step logits,
 * prompt-last and first-token hidden states within 1e-5 of max |value|. Plus the row-aligned KV buffer's bookkeeping.
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
import { referenceGenerate } from '../src/engine/reference.ts';
import { Scheduler } from '../src/engine/run/scheduler.ts';
import { RowKv } from '../src/engine/runtime/row-kv.ts';
import type { GenerateOptions, GenerateResult, Intervention, Steering } from '../src/engine/types.ts';
import { SMALL_GQA, tempCache } from './helpers/engine.ts';
import { prompt, rel, until } from './helpers/scheduler.ts';

const REL = 1e-5;

const { family, opts: modelOpts } = SMALL_GQA[0]!;

describe(`scheduler vs Float64 oracle (random ${family}, GQA)`, () => {
  let tmp: string;
  let cache: ReturnType<typeof tempCache>;
  let ck: Checkpoint;
  let engine: OnnxEngine;
  const V = modelOpts.vocabSize!;
  const d = modelOpts.hiddenSize!;
  const steerVec = Array.from({ length: d }, (_, i) => Math.sin(i + 1));
  const otherVec = Array.from({ length: d }, (_, i) => Math.cos(2 * i));

  /** the engine result vs the oracle's one-at-a-time greedy decoding of the same call */
  function check(what: string, ids: number[], got: GenerateResult, o: GenerateOptions): void {
    const ref = referenceGenerate(ck, ids, {
      maxNewTokens: o.maxNewTokens, stopIds: o.stopIds ?? [],
      ...(o.steer ? { steer: o.steer } : {}), ...(o.interventions ? { interventions: o.interventions } : {}),
    });
    assert.deepEqual(got.generatedIds, ref.generatedIds, `${what}: greedy ids`);
    assert.equal(got.finish, ref.finish, `${what}: finish`);
    if (o.returnStepLogits) assert.ok(rel(got.stepLogits!, ref.stepLogits) <= REL, `${what}: step logits ${rel(got.stepLogits!, ref.stepLogits)}`);
    if (o.returnFirstTokenHidden && ref.firstTokenHidden) assert.ok(rel(got.firstTokenHidden!, ref.firstTokenHidden!) <= REL, `${what}: first-token hidden ${rel(got.firstTokenHidden!, ref.firstTokenHidden!)}`);
    if (o.returnPromptLastHidden) assert.ok(rel(got.promptLastHidden!, ref.promptLastHidden) <= REL, `${what}: prompt-last hidden`);
  }

  before(async () => {
    cache = tempCache();
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-sched-'));
    await writeRandomCheckpoint(join(tmp, 'm'), family, { seed: 11, ...modelOpts });
    ck = await loadCheckpoint(join(tmp, 'm'));
    engine = await createEngineFromCheckpoint(ck, { cacheDir: cache.dir, threads: 2 });
  });
  after(async () => {
    await engine?.dispose();
    cache?.cleanup();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  test('sequences joining mid-flight, chunked prefill between decode steps, one leaving at its stop id', async () => {
    const sched = new Scheduler(engine, { stepTokens: 8, prefixCacheBytes: 0 });
    const prompts = [prompt(1, 21, V), prompt(2, 9, V), prompt(3, 14, V), prompt(4, 30, V), prompt(5, 3, V)];
    const full: GenerateOptions = { maxNewTokens: 10, stopIds: [], returnStepLogits: true, returnFirstTokenHidden: true, returnPromptLastHidden: true };
    // sequence 2 stops at the first token (after the first) the oracle generates for it that it has not generated before
    const free2 = referenceGenerate(ck, prompts[2]!, { maxNewTokens: 10, stopIds: [] }).generatedIds;
    const k2 = free2.findIndex((t, k) => k > 0 && !free2.slice(0, k).includes(t));
    assert.ok(k2 > 0 && k2 < 9, 'the oracle\'s tokens for sequence 2 vary');
    const stop2 = free2[k2]!;
    const opts: GenerateOptions[] = [full, { ...full, maxNewTokens: 6 }, { ...full, stopIds: [stop2] }, { ...full, maxNewTokens: 4 }, { ...full, maxNewTokens: 1 }];
    const done = new Array<boolean>(5).fill(false);
    const runs: Promise<GenerateResult>[] = [];
    const start = (i: number) => { runs[i] = sched.submit(prompts[i]!, opts[i]!).then((r) => { done[i] = true; return r; }); };
    start(0);
    await until(() => sched.stats.decodeSteps >= 2);
    assert.ok(!done[0], 'sequence 0 is still decoding when the others join');
    start(1);
    start(2);
    await until(() => sched.stats.decodeSteps >= 5);
    assert.ok(!done[0], 'sequence 0 is still decoding when the last join');
    start(3);
    start(4);
    const results = await Promise.all(runs);
    results.forEach((r, i) => check(`sequence ${i}`, prompts[i]!, r, opts[i]!));
    assert.equal(results[2]!.finish, 'stop');
    assert.ok(sched.stats.peakBatch >= 3, `rows decoded together: ${sched.stats.peakBatch}`);
    // 21 + 14 + 30 tokens cannot be prefilled in one 8-token budget: chunks
    assert.ok(sched.stats.prefillChunks > prompts.length, `${sched.stats.prefillChunks} prefill chunks`);
    assert.equal(sched.stats.prefillTokens, prompts.reduce((s, p) => s + p.length, 0), 'every prompt token computed once');
    assert.equal(sched.inFlight, 0);
  });

  test('per-sequence steering and interventions in flight together (one decode batch)', async () => {
    const p = [prompt(6, 12, V), prompt(7, 17, V)];
    const steer: Steering = { layer: 2, vector: steerVec, alpha: 3 };
    const ablate: Intervention[] = [{ layer: 1, kind: 'ablate', vector: otherVec }];
    const clampGen: Intervention[] = [{ layer: 3, kind: 'clamp', vector: otherVec, alpha: 2, positions: 'generated' }];
    const base: GenerateOptions = { maxNewTokens: 7, stopIds: [], returnStepLogits: true, returnFirstTokenHidden: true };
    const calls: [number[], GenerateOptions][] = [
      [p[0]!, base], [p[1]!, base],
      [p[0]!, { ...base, steer }], [p[1]!, { ...base, steer }],
      [p[0]!, { ...base, steer: { ...steer, positions: 'generated' } }],
      [p[1]!, { ...base, interventions: ablate }],
      [p[0]!, { ...base, interventions: clampGen }],
    ];
    const steps0 = engine.scheduler.stats.decodeSteps;
    const results = await Promise.all(calls.map(([ids, o]) => engine.submit(ids, o)));
    results.forEach((r, i) => check(`call ${i}`, calls[i]![0], r, calls[i]![1]));
    assert.notDeepEqual(results[0]!.generatedIds, results[2]!.generatedIds, 'steering changes the tokens');
    // the 7 calls are prefilled together and decode in one batch: 6 steps (the first token comes from the prefill)
    assert.equal(engine.scheduler.stats.decodeSteps - steps0, 6, 'one decode step per iteration for all interventions');
  });

  test('engine.generate equals the oracle row by row while another call is in flight', async () => {
    const rows = [prompt(8, 5, V), prompt(9, 26, V), prompt(10, 11, V)];
    const o: GenerateOptions = { maxNewTokens: 5, stopIds: [], returnStepLogits: true };
    const other = engine.submit(prompt(11, 19, V), { maxNewTokens: 12, stopIds: [] });
    const got = await engine.generate(rows, o);
    got.forEach((r, i) => check(`row ${i}`, rows[i]!, r, o));
    check('concurrent call', prompt(11, 19, V), await other, { maxNewTokens: 12, stopIds: [] });
  });

  test('cancelling one sequence: finish cancelled with the tokens so far, the others unaffected, slots freed', async () => {
    const sched = new Scheduler(engine, { prefixCacheBytes: 0 });
    const ac = new AbortController();
    const a = prompt(12, 15, V);
    const b = prompt(13, 8, V);
    const ra = sched.submit(a, { maxNewTokens: 40, stopIds: [], signal: ac.signal });
    const rb = sched.submit(b, { maxNewTokens: 12, stopIds: [] });
    await until(() => sched.stats.decodeSteps >= 4);
    ac.abort();
    const [ga, gb] = await Promise.all([ra, rb]);
    assert.equal(ga.finish, 'cancelled');
    assert.ok(ga.generatedIds.length >= 4 && ga.generatedIds.length < 40, `${ga.generatedIds.length} tokens before the abort`);
    const ref = referenceGenerate(ck, a, { maxNewTokens: ga.generatedIds.length, stopIds: [] });
    assert.deepEqual(ga.generatedIds, ref.generatedIds, 'the tokens so far are the greedy ones');
    check('the other sequence', b, gb, { maxNewTokens: 12, stopIds: [] });
    assert.equal(sched.inFlight, 0);
    // already aborted: nothing computed
    const steps = sched.stats.prefillChunks;
    const gc = await sched.submit(a, { maxNewTokens: 5, signal: AbortSignal.abort() });
    assert.deepEqual(gc, { generatedIds: [], finish: 'cancelled' });
    assert.equal(sched.stats.prefillChunks, steps);
    // engine.generate with an aborted signal mid-way: every row still generating says cancelled
    const ac2 = new AbortController();
    const g = engine.generate([a, b], { maxNewTokens: 50, stopIds: [], signal: ac2.signal });
    const s0 = engine.scheduler.stats.decodeSteps;
    await until(() => engine.scheduler.stats.decodeSteps >= s0 + 2);
    ac2.abort();
    for (const r of await g) assert.equal(r.finish, 'cancelled');
  });

  test('prefix cache: hits on block boundaries inside the shared prefix, last token computed, interventions key the blocks', async () => {
    const sched = new Scheduler(engine, { blockTokens: 4, prefixAdmitAfter: 1 });
    const store = sched.prefixStore!;
    const o: GenerateOptions = { maxNewTokens: 5, stopIds: [], returnStepLogits: true, returnFirstTokenHidden: true, returnPromptLastHidden: true };
    const A = prompt(14, 19, V);
    const run = async (what: string, ids: number[], opts: GenerateOptions, expectHit: number) => {
      const hit0 = store.stats.hit;
      const tok0 = sched.stats.prefillTokens;
      const r = await sched.submit(ids, opts);
      assert.equal(store.stats.hit - hit0, expectHit, `${what}: tokens served from the cache`);
      assert.equal(sched.stats.prefillTokens - tok0, ids.length - expectHit, `${what}: tokens computed`);
      check(what, ids, r, opts);
    };
    await run('A (cold)', A, o, 0);
    // shares 10 tokens with A: blocks 0-1 (8 tokens) reused, block 2 differs in its last 2 tokens
    await run('B (shares 10)', [...A.slice(0, 10), ...prompt(15, 7, V)], o, 8);
    // A again: 4 full blocks (16 tokens) of its 19, the rest computed
    await run('A (warm)', A, o, 16);
    // A's first 12 tokens: 3 cached blocks, but the last token must be computed, so only 2 are used
    await run('A[:12]', A.slice(0, 12), o, 8);
    // a prompt that ends exactly on a block boundary after a cached one
    await run('A[:8] + 1', [...A.slice(0, 8), 3], o, 8);
    // prefill steering changes the KV: no hit; steering only the generated tokens leaves the prefill's KV: hits
    await run('A steered', A, { ...o, steer: { layer: 1, vector: steerVec, alpha: 2 } }, 0);
    await run('A steered (generated)', A, { ...o, steer: { layer: 1, vector: steerVec, alpha: 2, positions: 'generated' } }, 16);
    // two prompts sharing a prefix in flight together: the second's prefill starts after the first's blocks exist
    const C = prompt(16, 13, V);
    const hit0 = store.stats.hit;
    const [r1, r2] = await Promise.all([sched.submit([...C, 5, 6, 7], o), sched.submit([...C, 9, 8], o)]);
    assert.equal(store.stats.hit - hit0, 12, 'the second prompt reuses the first one\'s 3 full blocks');
    check('C1', [...C, 5, 6, 7], r1, o);
    check('C2', [...C, 9, 8], r2, o);
  });

  test('prefix-cache admission (default): only blocks a second prompt asks for are stored; unrelated prompts store nothing', async () => {
    const sched = new Scheduler(engine, { blockTokens: 4 });
    const store = sched.prefixStore!;
    const o: GenerateOptions = { maxNewTokens: 3, stopIds: [], returnStepLogits: true };
    // unrelated prompts in flight together: every block asked once, none stored
    const lone = [prompt(60, 17, V), prompt(61, 22, V), prompt(62, 13, V)];
    (await Promise.all(lone.map((ids) => sched.submit(ids, o)))).forEach((r, i) => check(`unrelated ${i}`, lone[i]!, r, o));
    assert.equal(store.stats.blocks, 0, 'no block stored');
    assert.equal(store.stats.bytes, 0);
    assert.equal(store.stats.declined, 4 + 5 + 3, 'every full block declined');
    // the same prompt again, one at a time: the second asks (and computes, storing), the third is served
    const A = prompt(63, 19, V);
    const hits: number[] = [];
    for (let i = 0; i < 3; i++) {
      const h0 = store.stats.hit;
      check(`A #${i + 1}`, A, await sched.submit(A, o), o);
      hits.push(store.stats.hit - h0);
    }
    assert.deepEqual(hits, [0, 0, 16], 'stored on the second ask, served from the third');
    // two prompts sharing a prefix in flight together: both asked before the first wrote it, so the second is served
    const C = prompt(64, 13, V);
    const h0 = store.stats.hit;
    const [r1, r2] = await Promise.all([sched.submit([...C, 5, 6, 7], o), sched.submit([...C, 9, 8], o)]);
    assert.equal(store.stats.hit - h0, 12, 'the second prompt reuses the first one\'s 3 full blocks');
    check('C1', [...C, 5, 6, 7], r1, o);
    check('C2', [...C, 9, 8], r2, o);
  });

  test('packed prefill: short prompts arriving together prefill as the rows of one step, exact against the oracle', async () => {
    const o: GenerateOptions = { maxNewTokens: 4, stopIds: [], returnStepLogits: true, returnFirstTokenHidden: true, returnPromptLastHidden: true };
    const P22 = prompt(40, 22, V);
    const B3 = prompt(43, 7, V);
    const calls = [
      [...P22, ...prompt(41, 6, V)], // hit 20 of 28: 8 to compute (the pack's width)
      [...P22, ...prompt(42, 3, V)], // hit 20 of 25: 5 to compute, 3 cached tokens recomputed beside it
      B3, // no past: its empty past would mask most of what it attends next to the first two — the next pack
      prompt(44, 5, V), // packs with B3, left-padded by 2
      [...B3.slice(0, 4), 7, 9], // its first block is B3's: waits for B3 to store it, then hits 4
    ];
    const run = async (packTokens: number) => {
      const sched = new Scheduler(engine, { blockTokens: 4, packTokens, prefixAdmitAfter: 1 });
      await sched.submit([...P22, ...prompt(45, 5, V)], o); // stores P22's first 5 blocks
      const hit0 = sched.prefixStore!.stats.hit;
      const got = await Promise.all(calls.map((ids) => sched.submit(ids, o)));
      return { got, stats: sched.stats, hit: sched.prefixStore!.stats.hit - hit0 };
    };
    const packed = await run(128);
    packed.got.forEach((r, i) => check(`packed ${i}`, calls[i]!, r, o));
    assert.equal(packed.stats.packedSteps, 2, 'two packs: the two prompts on P22, then the two without a past');
    assert.equal(packed.stats.packedRows, 4);
    assert.equal(packed.stats.packWaste, 3 + 2, '3 recomputed, 2 pads');
    assert.equal(packed.hit, 20 + 20 + 4, 'the prefix cache serves the packed rows and the one that waited');
    const alone = await run(0);
    assert.equal(alone.stats.packedSteps, 0, 'packTokens 0: one step per prefill');
    assert.equal(alone.hit, packed.hit);
    alone.got.forEach((r, i) => assert.deepEqual(r.generatedIds, packed.got[i]!.generatedIds, `call ${i}: same ids packed or not`));
    // steered and unsteered prompts pack together, each row with its own prefill interventions (one set per token
    // row), every row exact against the oracle; a throwing haltAfterPrefill rejects only its own call
    const sched = new Scheduler(engine, { prefixCacheBytes: 0 });
    const steer: Steering = { layer: 1, vector: steerVec, alpha: 2 };
    const ps = [prompt(50, 6, V), prompt(51, 7, V), prompt(52, 6, V), prompt(53, 7, V), prompt(54, 6, V)];
    const opts: GenerateOptions[] = [{ ...o, steer }, o, { ...o, steer }, o, { ...o, haltAfterPrefill: () => { throw new Error('halt hook failed'); } }];
    const runs = ps.map((ids, i) => sched.submit(ids, opts[i]!));
    await assert.rejects(runs[4]!, /halt hook failed/);
    const rs = await Promise.all(runs.slice(0, 4));
    rs.forEach((r, i) => check(`steered pack ${i}`, ps[i]!, r, opts[i]!));
    assert.equal(sched.stats.packedSteps, 1, 'the steered and the unsteered prompts in one pack');
    assert.equal(sched.stats.packedRows, 5);
    assert.equal(sched.inFlight, 0);
  });

  test('prefix cache is bounded: LRU eviction keeps the bytes under the limit and results unchanged', async () => {
    const blk = new Scheduler(engine, { blockTokens: 4 }).prefixStore!.blockBytes;
    const sched = new Scheduler(engine, { blockTokens: 4, prefixCacheBytes: 5 * blk, prefixAdmitAfter: 1 });
    const store = sched.prefixStore!;
    const A = prompt(17, 18, V);
    const B = prompt(18, 18, V);
    await sched.submit(A, { maxNewTokens: 2, stopIds: [] });
    await sched.submit(B, { maxNewTokens: 2, stopIds: [] });
    assert.ok(store.stats.bytes <= 5 * blk && store.stats.blocks === 5, `${store.stats.blocks} blocks`);
    // A's blocks were evicted first (least recently used): A's first block is gone, so nothing of A is reused
    const h0 = store.stats.hit;
    const r = await sched.submit(A, { maxNewTokens: 3, stopIds: [], returnStepLogits: true });
    assert.equal(store.stats.hit - h0, 0);
    check('A after eviction', A, r, { maxNewTokens: 3, stopIds: [], returnStepLogits: true });
  });

  test('a memory plan bounds the sequences in flight (admission waits), results unchanged; a throwing hook rejects only its call', async () => {
    // the engine under a plan that fits at most 2 decode rows
    const bounded = Object.create(engine) as OnnxEngine;
    Object.defineProperty(bounded, 'memoryFits', { value: () => (B: number) => B <= 2 });
    const sched = new Scheduler(bounded, { prefixCacheBytes: 0 });
    const prompts = [prompt(20, 7, V), prompt(21, 12, V), prompt(22, 4, V), prompt(23, 9, V), prompt(24, 15, V)];
    const o: GenerateOptions = { maxNewTokens: 6, stopIds: [], returnStepLogits: true };
    const got = await Promise.all(prompts.map((p) => sched.submit(p, o)));
    got.forEach((r, i) => check(`bounded ${i}`, prompts[i]!, r, o));
    assert.equal(sched.stats.peakBatch, 2, 'never more than 2 rows decoded together');
    const bad = sched.submit(prompts[0]!, { maxNewTokens: 3, haltAfterPrefill: () => { throw new Error('hook failed'); } });
    const good = sched.submit(prompts[1]!, o);
    await assert.rejects(bad, /hook failed/);
    check('next to a failing call', prompts[1]!, await good, o);
    assert.equal(sched.inFlight, 0);
  });

  test('admission counts per-row intervention sets in the decode step only when the rows steer differently', async () => {
    const seen: [number, number | undefined][] = [];
    const probing = Object.create(engine) as OnnxEngine;
    Object.defineProperty(probing, 'memoryFits', {
      // decode-step shapes only (width 1): packed prefill steps ask for their own shape too
      value: (shapes: (B: number, P: number) => { sets?: number; width: number }[]) => (B: number, P: number) => {
        const s = shapes(B, P)[0]!;
        if (s.width === 1) seen.push([B, s.sets]);
        return true;
      },
    });
    const sched = new Scheduler(probing, { prefixCacheBytes: 0 });
    const vector = new Float32Array(engine.dModel).fill(0.1);
    const o: GenerateOptions = { maxNewTokens: 2, stopIds: [] };
    await Promise.all([sched.submit(prompt(30, 5, V), o), sched.submit(prompt(31, 6, V), o), sched.submit(prompt(32, 7, V), o)]);
    assert.ok(seen.length > 0 && seen.every(([, sets]) => sets === 0), `one broadcast set for plain rows: ${JSON.stringify(seen)}`);
    seen.length = 0;
    await Promise.all([
      sched.submit(prompt(30, 5, V), o),
      sched.submit(prompt(31, 6, V), { ...o, steer: { layer: 1, vector, alpha: 2 } }),
      sched.submit(prompt(32, 7, V), { ...o, steer: { layer: 1, vector, alpha: -1 } }),
    ]);
    // a mixed batch of B rows is counted with B stacked sets
    assert.ok(seen.length > 0 && seen.every(([B, sets]) => sets === B), `per-row sets counted: ${JSON.stringify(seen)}`);
  });
});

describe('RowKv: the decode batch buffer', () => {
  const L = 2;
  const kvH = 2;
  const hd = 3;
  /** a source of n slots (capacity cap) whose values name (seed, layer, head, slot, dim) */
  function source(seed: number, n: number, cap: number) {
    const fill = (kind: number) => Array.from({ length: L }, (_, l) => {
      const a = new Float32Array(kvH * cap * hd);
      for (let h = 0; h < kvH; h++) for (let t = 0; t < n; t++) for (let i = 0; i < hd; i++) a[(h * cap + t) * hd + i] = seed * 1e4 + kind * 1e3 + l * 100 + h * 10 + t + i / 10;
      return a;
    });
    return { keys: fill(0), values: fill(1), capacity: cap, length: n };
  }
  function expectRow(kv: RowKv, b: number, seed: number, n: number, extra: number[]) {
    const got = kv.rowSlots(b);
    assert.equal(got.length, n + extra.length, `row ${b} length`);
    const want = source(seed, n, n);
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < kvH; h++) {
        for (let t = 0; t < n; t++) {
          for (let i = 0; i < hd; i++) assert.equal(got.keys[l]![(h * got.capacity + t) * hd + i], want.keys[l]![(h * n + t) * hd + i]);
        }
      }
    }
  }

  test('rows of different lengths end together; removal moves the last row; re-layout keeps every slot', () => {
    const kv = new RowKv(L, kvH, hd, 8);
    kv.addRow(source(1, 5, 7), 2);
    kv.addRow(source(2, 3, 3), 2);
    assert.deepEqual(kv.starts, [0, 2]);
    kv.addRow(source(3, 9, 9), 2); // longer than the rows so far: everything shifts right
    assert.equal(kv.length, 9);
    assert.deepEqual(kv.starts, [4, 6, 0]);
    expectRow(kv, 0, 1, 5, []);
    expectRow(kv, 1, 2, 3, []);
    expectRow(kv, 2, 3, 9, []);
    assert.equal(kv.removeRow(0), 2, 'the last row moves into the freed one');
    assert.equal(kv.batch, 2);
    expectRow(kv, 0, 3, 9, []);
    expectRow(kv, 1, 2, 3, []);
    assert.equal(kv.removeRow(0), 1);
    // only the 3-slot row is left: a re-layout drops the dead slots on its left
    kv.length = kv.slotCapacity; // as if steps had filled the room
    const before = kv.rowSlots(0);
    kv.reserve(4);
    assert.equal(kv.starts[0], 0);
    assert.ok(kv.slotCapacity >= kv.length + 1);
    assert.deepEqual(kv.rowSlots(0), before);
    assert.throws(() => kv.removeRow(3));
  });

  test('re-layouts in the buffer already allocated keep every row\'s slots through decode steps, joins and removals', () => {
    const kv = new RowKv(L, kvH, hd, 4);
    /** row b's seed and its slots so far (the source's formula continued by every step) */
    const rows: { seed: number; n: number }[] = [];
    const val = (seed: number, kind: number, l: number, h: number, t: number, i: number) => seed * 1e4 + kind * 1e3 + l * 100 + h * 10 + t + i / 10;
    const check = (what: string) => rows.forEach((r, b) => {
      const got = kv.rowSlots(b);
      assert.equal(got.length, r.n, `${what}: row ${b} length`);
      for (let l = 0; l < L; l++) for (let h = 0; h < kvH; h++) for (let t = 0; t < r.n; t++) for (let i = 0; i < hd; i++) {
        const at = (h * r.n + t) * hd + i;
        assert.equal(got.keys[l]![at], Math.fround(val(r.seed, 0, l, h, t, i)), `${what}: row ${b} key l${l} h${h} t${t}`);
        assert.equal(got.values[l]![at], Math.fround(val(r.seed, 1, l, h, t, i)), `${what}: row ${b} value l${l} h${h} t${t}`);
      }
    });
    /** one decode step as the graph does it: every row's new slot written at `length` in place */
    const step = () => {
      const v = kv.view();
      const C = kv.slotCapacity;
      rows.forEach((r, b) => {
        for (let l = 0; l < L; l++) for (let h = 0; h < kvH; h++) for (let i = 0; i < hd; i++) {
          const at = ((b * kvH + h) * C + kv.length) * hd + i;
          (v.keys[l]!.data as Float32Array)[at] = val(r.seed, 0, l, h, r.n, i);
          (v.values[l]!.data as Float32Array)[at] = val(r.seed, 1, l, h, r.n, i);
        }
        r.n++;
      });
      kv.advance({ ...v, length: kv.length + 1 });
    };
    const add = (seed: number, n: number) => { kv.addRow(source(seed, n, n + 1), 2); rows.push({ seed, n }); };
    const remove = (b: number) => { const moved = kv.removeRow(b); if (moved >= 0) rows[b] = rows[moved]!; rows.pop(); };
    add(1, 5); add(2, 3); add(3, 6);
    check('joined');
    let inPlace = 0;
    let fresh = 0;
    for (let k = 0; k < 24; k++) {
      if (k === 3) remove(1);
      if (k === 5) add(4, 4); // shorter than the rows: no shift
      if (k === 9) add(5, kv.length + 2); // longer: every row shifts right
      if (k === 14) remove(0);
      if (k === 17) remove(rows.length - 1);
      const buf = (kv.view().keys[0]!.data as Float32Array).buffer;
      const C = kv.slotCapacity;
      kv.reserve(3);
      if (kv.slotCapacity !== C) { if ((kv.view().keys[0]!.data as Float32Array).buffer === buf) inPlace++; else fresh++; }
      check(`step ${k} after reserve`);
      step();
      check(`step ${k}`);
    }
    assert.ok(inPlace > 0, `some re-layout ran in place (${inPlace} in place, ${fresh} new)`);
  });
});
