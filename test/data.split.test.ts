/**
 * The 7:3 extraction/evaluation split: deterministic, disjoint and complete, the documented 70 % share, stable under
 * any reordering of the input, dependent on the seed, keeping groups together, and identical for any two pair sets
 * with the same ids (= the same split for every prompt configuration).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { loadPairSet } from '../src/data/load.ts';
import { splitPairs } from '../src/data/split.ts';
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

test('split: disjoint, complete, round(0.7·n) extraction pairs', () => {
  const sp = splitPairs(set);
  assert.equal(sp.seed, 0);
  const ex = new Set(sp.extraction);
  const ev = new Set(sp.evaluation);
  assert.equal(ex.size, sp.extraction.length);
  assert.equal(ev.size, sp.evaluation.length);
  for (const id of ex) assert.ok(!ev.has(id), `${id} on both sides`);
  assert.deepEqual([...ex, ...ev].sort(), set.pairs.map((p) => p.id).sort());
  assert.equal(sp.extraction.length, Math.round(0.7 * set.pairs.length));
});

test('split: the reference rule, recomputed independently (sha256(seed:id) order, first 70 %)', () => {
  for (const seed of [0, 1, 42]) {
    const ranked = set.pairs
      .map((p) => ({ id: p.id, h: createHash('sha256').update(`${seed}:${p.id}`).digest('hex') }))
      .sort((a, b) => a.h.localeCompare(b.h));
    const expected = new Set(ranked.slice(0, Math.round(0.7 * ranked.length)).map((r) => r.id));
    assert.deepEqual(new Set(splitPairs(set, seed).extraction), expected, `seed ${seed}`);
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
