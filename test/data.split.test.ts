/**
 * The 7:3 extraction/evaluation split: deterministic, disjoint and complete, the documented 70 % share, stable under
 * any reordering of the input, dependent on the seed, keeping groups together, and identical for any two pair sets
 * with the same ids (= the same split for every prompt configuration).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { loadPairSet } from '../src/data/load.ts';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { splitGroupCounts, splitPairs } from '../src/data/split.ts';
import { repoRoot } from '../src/data/locate.ts';
import type { Pair } from '../src/data/types.ts';

const set = await loadPairSet('pairs');

/** Seeded Fisher–Yates (LCG) for reorderings. */
function shuffle<T>(xs: readonly T[], seed: number): T[] {
  const a = [...xs];
  let s = seed >>> 0;
  for (let i = a.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const j = s % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

test('split: disjoint, complete, round(0.7·groups) extraction groups', () => {
  const sp = splitPairs(set);
  assert.equal(sp.seed, 0);
  const ex = new Set(sp.extraction);
  const ev = new Set(sp.evaluation);
  assert.equal(ex.size, sp.extraction.length);
  assert.equal(ev.size, sp.evaluation.length);
  for (const id of ex) assert.ok(!ev.has(id), `${id} on both sides`);
  assert.deepEqual([...ex, ...ev].sort(), set.pairs.map((p) => p.id).sort());
  const groups = new Set(set.pairs.map((p) => p.group ?? p.id));
  const exGroups = new Set(set.pairs.filter((p) => ex.has(p.id)).map((p) => p.group ?? p.id));
  assert.equal(exGroups.size, Math.round(0.7 * groups.size));
  assert.deepEqual(splitGroupCounts(set.pairs, sp), { extraction: exGroups.size, evaluation: groups.size - exGroups.size });
});

test('split: the reference rule, recomputed independently (sha256(seed:group) order, first 70 % of groups)', () => {
  for (const seed of [0, 1, 42]) {
    const ranked = [...new Set(set.pairs.map((p) => p.group!))]
      .map((g) => ({ g, h: createHash('sha256').update(`${seed}:${g}`).digest('hex') }))
      .sort((a, b) => a.h.localeCompare(b.h));
    const exGroups = new Set(ranked.slice(0, Math.round(0.7 * ranked.length)).map((r) => r.g));
    const expected = new Set(set.pairs.filter((p) => exGroups.has(p.group!)).map((p) => p.id));
    assert.deepEqual(new Set(splitPairs(set, seed).extraction), expected, `seed ${seed}`);
  }
});

test('split: bundled pairs are grouped by scenario (read from the raw files): no scenario on both sides, any seed', () => {
  const dir = join(repoRoot, 'data', 'pairs');
  const scenarioOf = new Map<string, string>();
  for (const f of readdirSync(dir).filter((f) => f.endsWith('.json') && f !== 'tools.json')) {
    const doc = JSON.parse(readFileSync(join(dir, f), 'utf8')) as { scenarios: { id: string; pairs: { id?: string }[] }[] };
    for (const sc of doc.scenarios) sc.pairs.forEach((p, k) => scenarioOf.set(p.id ?? `${sc.id}-${k + 1}`, sc.id));
  }
  assert.equal(scenarioOf.size, set.pairs.length);
  const scenarios = new Set(scenarioOf.values());
  assert.ok(scenarios.size < set.pairs.length, 'scenarios hold several pairs');
  for (const seed of [0, 1, 2, 3]) {
    const sp = splitPairs(set, seed);
    const side = new Map<string, Set<string>>();
    for (const [which, ids] of [['extraction', sp.extraction], ['evaluation', sp.evaluation]] as const) {
      for (const id of ids) side.set(scenarioOf.get(id)!, (side.get(scenarioOf.get(id)!) ?? new Set()).add(which));
    }
    for (const [sc, sides] of side) assert.equal(sides.size, 1, `seed ${seed}: scenario ${sc} on both sides`);
    assert.equal(splitGroupCounts(set.pairs, sp).extraction, Math.round(0.7 * scenarios.size));
  }
});

test('split: deterministic and stable under reordering of the input', () => {
  const a = splitPairs(set, 3);
  for (const s of [1, 2, 3, 4, 5]) assert.deepEqual(splitPairs(shuffle(set.pairs, s), 3), a);
  assert.deepEqual(splitPairs([...set.pairs].reverse(), 3), a);
});

test('split: different seeds give different splits', () => {
  const a = new Set(splitPairs(set, 0).extraction);
  const b = splitPairs(set, 1).extraction;
  const overlap = b.filter((id) => a.has(id)).length;
  assert.ok(overlap < b.length, 'seed 1 equals seed 0');
  // two independent 70 % draws overlap by about 0.7² = 49 % of n; far from 100 %
  assert.ok(overlap / set.pairs.length < 0.62, `overlap ${overlap}`);
});

test('split: same ids ⇒ same split, whatever the content (identical across configurations)', () => {
  const other: Pair[] = set.pairs.map((p) => ({ ...p, harmful: { ...p.harmful, prompt: `[flattened] ${p.harmful.prompt}` } }));
  assert.deepEqual(splitPairs(other, 7), splitPairs(set, 7));
});

test('split: pairs of one group land on the same side; 70 % counts groups', () => {
  const grouped: Pair[] = set.pairs.map((p, i) => ({ ...p, group: `g${Math.floor(i / 4)}` }));
  const sp = splitPairs(grouped, 0);
  const side = new Map<string, boolean>();
  const ex = new Set(sp.extraction);
  for (const p of grouped) {
    const s = ex.has(p.id);
    const prev = side.get(p.group!);
    if (prev !== undefined) assert.equal(s, prev, `group ${p.group} split`);
    side.set(p.group!, s);
  }
  const groups = side.size;
  assert.equal([...side.values()].filter(Boolean).length, Math.round(0.7 * groups));
});
