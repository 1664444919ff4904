/**
 * Sampling (src/engine/sample/, run/choose-token.ts): the processed distribution equals transformers' own
 * (`generate(do_sample=True)`'s processor list on recorded and synthetic logits, scripts/hf-fixtures/sampling.py)
 * within 1e-6 per probability; greedy rows take HF's `do_sample=False` choice; top_k 1 and top_p → 0 reduce to
 * greedy; draws pass a chi-square test against the processed distribution (seeded, so the test cannot flake — and a
 * wrong distribution is rejected, so it can fail); Philox matches Random123's known answers.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { argmax } from '../src/engine/run/argmax.ts';
import { TokenChooser, tokenChooser } from '../src/engine/run/choose-token.ts';
import { drawIndex } from '../src/engine/sample/draw.ts';
import { tokenHistory } from '../src/engine/sample/penalties.ts';
import { philox4x32, uniformAt } from '../src/engine/sample/philox.ts';
import { penalisedLogits, sampleDistribution, sampleWeights } from '../src/engine/sample/process.ts';
import { sampleToken } from '../src/engine/sample/token.ts';
import { makeRng } from '../src/util/rng.ts';
import { largest, topIndices } from '../src/engine/sample/select.ts';
import { choiceSettings, DRAWN_SEED_LIMIT, drawSeed, type SamplingSettings } from '../src/engine/sample/settings.ts';
import { chiSquare } from './helpers/chi-square.ts';
import { repoRoot } from './helpers/shared.ts';

interface FixtureCase { temperature: number; top_k?: number; top_p?: number; min_p?: number; repetition_penalty?: number; frequency_penalty?: number; presence_penalty?: number; logit_bias?: Record<string, number> }
interface FixtureRow { name: string; logits: number[]; prompt: number[]; generated: number[]; cases: Record<string, { processors: string[]; probs: number[]; greedy: number; kept: number }> }
const fx = JSON.parse(readFileSync(join(repoRoot, 'test', 'fixtures', 'sampling', 'processors.json'), 'utf8')) as { cases: Record<string, FixtureCase>; rows: FixtureRow[] };

const settingsOf = (c: FixtureCase): SamplingSettings => ({
  temperature: c.temperature, topK: c.top_k, topP: c.top_p, minP: c.min_p, repetitionPenalty: c.repetition_penalty,
  frequencyPenalty: c.frequency_penalty, presencePenalty: c.presence_penalty,
  logitBias: c.logit_bias && Object.fromEntries(Object.entries(c.logit_bias).map(([k, v]) => [Number(k), v])),
});

test('the fixture covers every processor and their combination, in HF generate\'s order', () => {
  assert.equal(fx.rows.length, 3);
  assert.deepEqual(fx.rows[0]!.cases.all!.processors, ['SequenceBiasLogitsProcessor', 'OpenAiPenalties', 'RepetitionPenaltyLogitsProcessor',
    'TemperatureLogitsWarper', 'TopKLogitsWarper', 'TopPLogitsWarper', 'MinPLogitsWarper']);
  // the cuts cut: top-k, top-p and min-p keep fewer tokens than the vocabulary
  for (const r of fx.rows) for (const n of ['top-k-5', 'top-p-0.8', 'min-p-0.1', 'all']) assert.ok(r.cases[n]!.kept < r.logits.length, `${r.name} ${n}`);
});

test('processed distributions equal transformers\' within 1e-6 per probability, for each processor and all together', () => {
  for (const row of fx.rows) {
    const h = tokenHistory(row.prompt, row.generated);
    for (const [name, c] of Object.entries(fx.cases)) {
      const want = row.cases[name]!;
      const s = settingsOf(c);
      if (c.temperature === 0) continue; // a greedy case has no sampled distribution (its argmax is checked below)
      const got = sampleDistribution(Float32Array.from(row.logits), s, h);
      // the same tokens filtered (a −100 logit_bias underflows to probability 0 in float32 but is not filtered)
      assert.equal(got.filter((v) => v > 0).length, want.kept, `${row.name} ${name}: tokens kept`);
      let worst = 0;
      for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want.probs[i]!));
      assert.ok(worst <= 1e-6, `${row.name} ${name}: max |Δp| ${worst}`);
    }
  }
});

test('greedy rows (temperature 0 or none) choose HF\'s do_sample=False token: the argmax of the penalised logits', () => {
  for (const row of fx.rows) {
    const prompt = row.prompt, gen = row.generated;
    for (const [name, c] of Object.entries(fx.cases)) {
      const s = { ...settingsOf(c), temperature: 0 };
      assert.equal(new TokenChooser(s, prompt, gen).next(Float32Array.from(row.logits)), row.cases[name]!.greedy, `${row.name} ${name}`);
    }
    // no settings at all, or greedy without penalties: no chooser, the plain argmax as before sampling existed
    assert.equal(tokenChooser(undefined, prompt), undefined);
    assert.equal(tokenChooser({ temperature: 0, topK: 3, repetitionPenalty: 1 }, prompt), undefined);
  }
  // the penalties did move the greedy choice somewhere (the check above is not only the raw argmax)
  const r0 = fx.rows[0]!;
  assert.notEqual(r0.cases['greedy-penalised']!.greedy, argmax(Float32Array.from(r0.logits)));
});

test('top_k 1 and top_p → 0 reduce to greedy exactly, at any temperature and seed', () => {
  for (const row of fx.rows) {
    const logits = Float32Array.from(row.logits);
    const best = argmax(logits);
    for (const s of [{ topK: 1 }, { topP: 0 }, { topP: 1e-12 }, { topK: 1, topP: 0.5 }]) {
      for (const temperature of [0.5, 1, 2, 10]) {
        for (let seed = 0; seed < 20; seed++) {
          const c = new TokenChooser({ ...s, temperature, seed }, row.prompt);
          for (let step = 0; step < 5; step++) assert.equal(c.next(logits), best);
        }
      }
    }
  }
});

/** draws of a row's token at steps 0..n-1 of one seed, and at step 0 of seeds 0..n-1 */
function draws(z: Float64Array, n: number, seed: number, across: 'steps' | 'seeds'): Float64Array {
  const counts = new Float64Array(z.length);
  for (let k = 0; k < n; k++) counts[drawIndex(z, across === 'steps' ? uniformAt(seed, k) : uniformAt(seed + k, 0))]!++;
  return counts;
}

test('chi-square: 24,000 draws follow the processed distribution (p > 0.001), and a wrong distribution is rejected', () => {
  const row = fx.rows[0]!; // the tiny model's recorded logits
  const h = tokenHistory(row.prompt, row.generated);
  for (const name of ['temperature-0.7', 'top-p-0.8', 'min-p-0.3-t1.5', 'all']) {
    const z = sampleWeights(Float32Array.from(row.logits), settingsOf(fx.cases[name]!), h);
    for (const across of ['steps', 'seeds'] as const) {
      const counts = draws(z, 24_000, 1234, across);
      const r = chiSquare(counts, row.cases[name]!.probs);
      assert.ok(r.df >= 3, `${name}: ${r.df} degrees of freedom`);
      assert.ok(r.p > 0.001, `${name} across ${across}: χ² ${r.statistic.toFixed(1)} on ${r.df} df, p ${r.p}`);
    }
  }
  // power: draws at temperature 0.7 tested against temperature 2's distribution (and top-p's against the unfiltered one)
  const t07 = draws(sampleWeights(Float32Array.from(row.logits), { temperature: 0.7, seed: 0 }, h), 24_000, 99, 'steps');
  assert.ok(chiSquare(t07, row.cases['temperature-2']!.probs).p < 1e-12);
  const z1 = sampleWeights(Float32Array.from(row.logits), { temperature: 0.8, seed: 0 }, h);
  const near = chiSquare(draws(z1, 24_000, 5, 'steps'), row.cases['temperature-0.7']!.probs);
  assert.ok(near.p < 0.001, `temperature 0.8 vs 0.7: p ${near.p}`);
});

test('Philox4x32-10 matches Random123\'s known-answer vectors; uniforms are in [0, 1) and uniform (chi-square on 20 bins)', () => {
  const hex = (w: number[]) => w.map((x) => x.toString(16).padStart(8, '0')).join(' ');
  assert.equal(hex(philox4x32([0, 0, 0, 0], [0, 0])), '6627e8d5 e169c58d bc57ac4c 9b00dbd8');
  assert.equal(hex(philox4x32([0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff], [0xffffffff, 0xffffffff])), '408f276d 41c83b0e a20bc7c6 6d5451fd');
  assert.equal(hex(philox4x32([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0])), 'd16cfe09 94fdcceb 5001e420 24126ea1');
  assert.equal(hex(philox4x32([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0], 7)), '4dfccaba 190a87f0 c47362ba b6b5242a');
  for (const seq of [(k: number) => uniformAt(42, k), (k: number) => uniformAt(k, 0), (k: number) => uniformAt(-k, 3)]) {
    const bins = new Float64Array(20);
    for (let k = 0; k < 20_000; k++) {
      const u = seq(k);
      assert.ok(u >= 0 && u < 1);
      bins[Math.floor(u * 20)]!++;
    }
    assert.ok(chiSquare(bins, new Float64Array(20).fill(0.05)).p > 0.001);
  }
  // a draw depends on (seed, step) only: the same value however often and in whatever order it is asked for
  assert.equal(uniformAt(7, 3), uniformAt(7, 3));
  assert.notEqual(uniformAt(7, 3), uniformAt(8, 3));
  assert.notEqual(uniformAt(7, 3), uniformAt(7, 4));
});

test('selection: the k-th largest and the top indices agree with a full sort (ties: the lower index first)', () => {
  // many ties (50 distinct values); k up to the heap's limit and past it (quickselect)
  const x = Float64Array.from({ length: 3000 }, (_, i) => Math.round(Math.sin(i * 12.9898) * 43758.5453 % 50));
  const sorted = [...x].sort((a, b) => b - a);
  for (const k of [1, 2, 10, 500, 1024, 1025, 2999, 3000]) assert.equal(largest(x, k), sorted[k - 1], `k ${k}`);
  const order = [...x.keys()].sort((a, b) => x[b]! - x[a]! || a - b);
  for (const m of [1, 7, 64, 1000, 2000, 3000]) assert.deepEqual([...topIndices(x, m)], order.slice(0, m), `m ${m}`);
  assert.equal(largest([-Infinity, 2, -Infinity], 2), -Infinity);
});

test('a sampled row needs a seed; the draw is a function of (logits, seed, step)', () => {
  assert.throws(() => new TokenChooser({ temperature: 1 }, [1]), /seed/);
  const row = fx.rows[1]!, logits = Float32Array.from(row.logits);
  const s = { temperature: 2, seed: 3 };
  const a = new TokenChooser(s, row.prompt), b = new TokenChooser(s, row.prompt);
  const ids = Array.from({ length: 30 }, () => a.next(logits));
  const again = Array.from({ length: 30 }, () => b.next(logits));
  assert.deepEqual(again, ids);
  assert.ok(new Set(ids).size > 5, 'temperature 2 varies the tokens');
});

test('drawn seeds: safe integers below 2^48 − 1, different from draw to draw; choice i takes seed + i', () => {
  const seeds = Array.from({ length: 50 }, drawSeed);
  for (const x of seeds) assert.ok(Number.isSafeInteger(x) && x >= 0 && x < DRAWN_SEED_LIMIT);
  assert.ok(new Set(seeds).size > 45);
  assert.deepEqual(choiceSettings({ temperature: 1, seed: 9 }, 3).map((c) => c.seed), [9, 10, 11]);
  assert.throws(() => choiceSettings({ temperature: 1, seed: Number.MAX_SAFE_INTEGER }, 2), /53-bit/);
});

test('the head-and-bound sampler (sample/token.ts) draws the processed distribution: chi-square on the fixtures, a 20k vocabulary', () => {
  const h0 = tokenHistory([], []);
  const cases: [FixtureRow, string][] = [];
  for (const row of fx.rows.slice(1)) for (const name of ['temperature-0.7', 'temperature-2', 'top-p-0.8', 'top-p-0.3']) cases.push([row, name]);
  for (const [row, name] of cases) {
    const s = settingsOf(fx.cases[name]!);
    const h = tokenHistory(row.prompt, row.generated);
    for (const head of [16, 128]) {
      const stats = { head: 0, tail: 0, full: 0 };
      const counts = new Float64Array(row.logits.length);
      const z = penalisedLogits(Float32Array.from(row.logits), s, h);
      for (let seed = 0; seed < 20_000; seed++) counts[sampleToken(z, { temperature: s.temperature!, topP: s.topP }, (k) => uniformAt(seed, 0, k), { head, stats })]!++;
      const r = chiSquare(counts, row.cases[name]!.probs);
      assert.ok(r.p > 0.001, `${row.name} ${name} head ${head}: χ² ${r.statistic.toFixed(1)} on ${r.df} df, p ${r.p} (${JSON.stringify(stats)})`);
      if (head === 128 && name.startsWith('temperature')) assert.ok(stats.head + stats.tail > stats.full, `${row.name} ${name} head ${head}: the bounded path drew (${JSON.stringify(stats)})`);
    }
  }
  // a 20,000-token vocabulary shaped like a model's (a normal bulk, a few tokens far above it): rejection from the
  // tail bins is exercised at temperature 1.2, the distribution is the exact one
  const rng = makeRng(5);
  const V = 20_000;
  const logits = Float32Array.from({ length: V }, () => rng.normal() * 2.5);
  for (let k = 0; k < 40; k++) logits[rng.int(V)] = 6 + rng.uniform() * 6;
  for (const s of [{ temperature: 1.2 }, { temperature: 0.8, topP: 0.9 }]) {
    const exact = sampleDistribution(logits, s, h0);
    const z = penalisedLogits(logits, s, h0);
    const stats = { head: 0, tail: 0, full: 0 };
    const counts = new Float64Array(V);
    for (let seed = 0; seed < 20_000; seed++) counts[sampleToken(z, s, (k) => uniformAt(seed, 3, k), { stats })]!++;
    const r = chiSquare(counts, exact);
    assert.ok(r.p > 0.001, `${JSON.stringify(s)}: χ² ${r.statistic.toFixed(1)} on ${r.df} df, p ${r.p}`);
    assert.ok(stats.full < 200, `${JSON.stringify(s)}: ${JSON.stringify(stats)}`);
    if (s.temperature === 1.2) assert.ok(stats.tail > 100, `the tail was drawn from: ${JSON.stringify(stats)}`);
  }
});

test('top-p on the head path picks the token the full distribution picks for the same uniform', () => {
  const rng = makeRng(9);
  const V = 5000;
  const logits = Float32Array.from({ length: V }, () => rng.normal() * 2);
  for (let k = 0; k < 30; k++) logits[rng.int(V)] = 7 + rng.uniform() * 5;
  const s = { temperature: 0.7, topP: 0.9 };
  const z = penalisedLogits(logits, s, tokenHistory([], []));
  const w = sampleWeights(logits, s, tokenHistory([], []));
  let onHead = 0;
  for (let i = 0; i < 500; i++) {
    const u = (i + 0.5) / 500;
    const stats = { head: 0, tail: 0, full: 0 };
    const t = sampleToken(z, s, () => u, { stats });
    onHead += stats.head;
    assert.equal(t, drawIndex(w, u));
  }
  assert.equal(onHead, 500);
});
