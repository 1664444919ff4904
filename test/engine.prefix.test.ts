/**
 * Shared-prefix KV reuse (src/engine/run/prefix.ts): `forwardShared` equals `forward` (≤ 1e-5) on random checkpoints of
 * several families, with and without steering, for prompts with shared and unshared prefixes, a prompt that is a
 * prefix of another, duplicates, and batches split by a small token budget; a cache hit returns the same bytes as a
 * fresh computation; the plan's lcp boundaries against brute force; and the computed/prompt token ratio on the
 * bundled pair set in the agent configuration with the real Llama-3.1 tokenizer and template (target ≤ 0.6).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Family } from '../src/checkpoint/types.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { lcp, plannedReuse, prefixPlan } from '../src/engine/run/prefix.ts';
import { PrefixCache } from '../src/engine/run/prefix-cache.ts';
import { loadPairSet } from '../src/data/load.ts';
import { PromptBuilder } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { installTokenizer, loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { SMALL_GQA, maxAbsDiff, tempCache } from './helpers/engine.ts';
import { needShared } from './helpers/shared.ts';

const EXACT = 1e-5;

/** max |a − b| relative to max(1, max |b|): float32 rounding of sums in a different order scales with the values */
function relDiff(a: Float32Array, b: Float32Array): number {
  let m = 1;
  for (const x of b) m = Math.max(m, Math.abs(x));
  return maxAbsDiff(a, b) / m;
}

/** seeded prompts: groups sharing a long head, a prompt that is a prefix of another, unshared ones, a duplicate */
function workload(vocab: number): number[][] {
  let s = 12345;
  const rnd = () => { s = (s * 1103515245 + 12345) % 2147483648; return 1 + (s % (vocab - 1)); };
  const seq = (n: number) => Array.from({ length: n }, rnd);
  const head = seq(20);
  const toolsA = seq(15);
  const toolsB = seq(9);
  const a1 = [...head, ...toolsA, ...seq(6)];
  return [
    a1,
    [...head, ...toolsA, ...seq(4)],
    [...head, ...toolsB, ...seq(7)],
    [...head, ...toolsB, ...seq(3)],
    a1.slice(0, 30), // a prefix of a1
    seq(11), // unshared
    [head[0]!, ...seq(5)], // shares one token
    [...a1], // duplicate of a1
    seq(1),
  ];
}

const FAMILIES = SMALL_GQA;

describe('shared-prefix reuse equals forward', () => {
  let tmp: string;
  let cache: ReturnType<typeof tempCache>;
  const engines = new Map<Family, OnnxEngine>();
  before(async () => {
    cache = tempCache();
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-prefix-'));
    for (const { family, opts } of FAMILIES) {
      const dir = join(tmp, family);
      await writeRandomCheckpoint(dir, family, { ...opts, seed: 11 });
      engines.set(family, await createEngine(dir, { cacheDir: cache.dir, threads: 2 }));
    }
  });
  after(async () => {
    for (const e of engines.values()) await e.dispose();
    cache?.cleanup();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  test('plan boundaries = every lcp with another prompt (brute force)', () => {
    const ps = workload(97);
    const plan = prefixPlan(ps);
    ps.forEach((p, i) => {
      const brute = [...new Set(ps.flatMap((q, j) => (j === i ? [] : [lcp(p, q)])).filter((x) => x > 0))].sort((a, b) => a - b);
      assert.deepEqual(plan[i], brute, `prompt ${i}`);
    });
  });

  for (const { family } of FAMILIES) {
    test(`${family}: hidden and logits at the last position, with and without steering`, async (t) => {
      const e = engines.get(family)!;
      let worst = 0;
      const ps = workload(e.vocabSize);
      for (const steer of [undefined, { layer: 2, vector: Array.from({ length: 48 }, (_, i) => Math.sin(i + 1)), alpha: 2.5 }]) {
        const ref = await e.forward(ps, { hiddenAt: 'last', logitsAt: 'last', steer });
        const { results, stats } = await e.forwardShared(ps, { hiddenAt: 'last', logitsAt: 'last', steer });
        ps.forEach((_, i) => {
          assert.deepEqual(results[i]!.hiddenPositions, ref[i]!.hiddenPositions);
          const dh = relDiff(results[i]!.hidden, ref[i]!.hidden);
          const dl = relDiff(results[i]!.logits, ref[i]!.logits);
          assert.ok(dh <= EXACT && dl <= EXACT, `prompt ${i}: hidden ${dh}, logits ${dl}`);
          worst = Math.max(worst, dh, dl);
        });
        const total = ps.reduce((a, p) => a + p.length, 0);
        assert.equal(stats.promptTokens, total);
        assert.equal(stats.computedTokens, plannedReuse(ps).computedTokens);
        assert.ok(stats.computedTokens < 0.7 * total, `computed ${stats.computedTokens} of ${total}`);
      }
      t.diagnostic(`${family}: worst relative difference ${worst.toExponential(2)}`);
    });
  }

  test('several positions (suffix only), a tiny batch budget, and a shared cache across calls', async () => {
    const e = engines.get('llama')!;
    const ps = workload(e.vocabSize).slice(0, 8); // the 1-token prompt has no position -2
    const sel = [-1, -2];
    const ref = await e.forward(ps, { hiddenAt: sel, logitsAt: 'none' });
    const saved = e.maxBatchTokens;
    e.maxBatchTokens = 40;
    try {
      const pc = new PrefixCache();
      const boundaries = prefixPlan(ps);
      const first = await e.forwardShared(ps.slice(0, 5), { hiddenAt: sel, logitsAt: 'none', cache: pc, boundaries: boundaries.slice(0, 5) });
      const second = await e.forwardShared(ps.slice(5), { hiddenAt: sel, logitsAt: 'none', cache: pc, boundaries: boundaries.slice(5) });
      const again = await e.forwardShared(ps.slice(0, 5), { hiddenAt: sel, logitsAt: 'none', cache: pc, boundaries: boundaries.slice(0, 5) });
      const all = [...first.results, ...second.results];
      ps.forEach((_, i) => assert.ok(relDiff(all[i]!.hidden, ref[i]!.hidden) <= EXACT, `prompt ${i}: ${relDiff(all[i]!.hidden, ref[i]!.hidden)}`));
      // second pass: every prefix is a cache hit, only suffixes computed, and bytes identical to the first pass
      assert.ok(pc.hits > 0);
      assert.equal(again.stats.computedTokens, ps.slice(0, 5).reduce((a, p, i) => a + p.length - Math.max(0, ...boundaries[i]!.filter((b) => b <= p.length - 2)), 0));
      again.results.forEach((r, i) => assert.deepEqual(r.hidden, first.results[i]!.hidden, `prompt ${i} bytes`));
    } finally {
      e.maxBatchTokens = saved;
    }
  });

  for (const family of ['llama', 'qwen3'] as const) {
    test(`${family}: firstTokenShared equals generate(maxNewTokens 1) — token, prompt-last and first-token hidden states`, async () => {
      const e = engines.get(family)!;
      const ps = workload(e.vocabSize);
      for (const steer of [undefined, { layer: 1, vector: Array.from({ length: 48 }, (_, i) => Math.cos(i * 0.7)), alpha: 3 }]) {
        const ref = await e.generate(ps, { maxNewTokens: 1, stopIds: [], steer, returnPromptLastHidden: true, returnFirstTokenHidden: true });
        const { results, stats } = await e.firstTokenShared(ps, { stopIds: [], steer });
        ps.forEach((_, i) => {
          assert.deepEqual(results[i]!.generatedIds, ref[i]!.generatedIds, `prompt ${i} token`);
          assert.equal(results[i]!.finish, ref[i]!.finish);
          const dp = relDiff(results[i]!.promptLastHidden!, ref[i]!.promptLastHidden!);
          const df = relDiff(results[i]!.firstTokenHidden!, ref[i]!.firstTokenHidden!);
          assert.ok(dp <= EXACT && df <= EXACT, `prompt ${i}: prompt-last ${dp}, first-token ${df}`);
        });
        assert.equal(stats.computedTokens, plannedReuse(ps).computedTokens + ps.length);
      }
    });
  }

  test("hiddenAt 'all' reuses nothing and equals forward", async () => {
    const e = engines.get('qwen3')!;
    const ps = workload(e.vocabSize);
    const ref = await e.forward(ps, { hiddenAt: 'all', logitsAt: 'none' });
    const { results, stats } = await e.forwardShared(ps, { hiddenAt: 'all', logitsAt: 'none' });
    assert.equal(stats.computedTokens, stats.promptTokens);
    ps.forEach((_, i) => assert.ok(relDiff(results[i]!.hidden, ref[i]!.hidden) <= EXACT));
  });

  test('a tiny cache budget (every prefix evicted) gives the same results', async () => {
    const e = engines.get('llama')!;
    const ps = workload(e.vocabSize);
    const ref = await e.forwardShared(ps, { hiddenAt: 'last', logitsAt: 'none' });
    const pc = new PrefixCache(1);
    const { results } = await e.forwardShared(ps, { hiddenAt: 'last', logitsAt: 'none', cache: pc });
    assert.equal(pc.size, 0);
    ps.forEach((_, i) => assert.deepEqual(results[i]!.hidden, ref.results[i]!.hidden));
  });
});

test('bundled pair set, agent configuration, Llama-3.1 tokenizer and template: computed ≤ 0.6 × prompt tokens', async (t) => {
  const tpl = needShared(t, 'templates', 'llama-3.1-instruct.jinja');
  if (!tpl) return;
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-prefix-tok-'));
  try {
    await installTokenizer(dir, 'llama3', { template: readFileSync(tpl, 'utf8') });
    const b = new PromptBuilder(await loadPromptTokenizer(dir), { texts: loadPromptTexts() });
    const set = await loadPairSet('pairs');
    const ids = set.pairs.flatMap((p) => (['harmful', 'benign'] as const).map((k) => b.render(p[k].prompt, p.tools, 'agent', 'schema').ids!));
    const r = plannedReuse(ids);
    t.diagnostic(`agent.schema: ${ids.length} prompts, ${r.promptTokens} prompt tokens, ${r.computedTokens} computed, ratio ${r.ratio.toFixed(3)}`);
    assert.ok(r.ratio <= 0.6, `ratio ${r.ratio}`);
    assert.ok(r.computedTokens >= new Set(ids.map((x) => x.join(','))).size, 'at least one token per distinct prompt');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
