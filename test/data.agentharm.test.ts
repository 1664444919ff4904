/**
 * AgentHarm importer against ../shared/data/agentharm: counts (176 + 32 pairs, 176 + 176 test behaviors), the
 * pairing recomputed independently from the raw files, tool specs resolved from each side of tools.json, groups,
 * and clear errors for a broken copy.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { needShared } from './helpers/shared.ts';
import { agentHarmPairs, readAgentHarm } from '../src/data/agentharm.ts';
import { loadPairSet } from '../src/data/load.ts';
import { splitPairs } from '../src/data/split.ts';
import { SafekeepError } from '../src/util/errors.ts';

interface RawBehavior { id: string; prompt: string; target_functions: string[]; category: string }
const raw = (dir: string, kind: string, split: string): RawBehavior[] =>
  (JSON.parse(readFileSync(join(dir, 'dataset', `${kind}_behaviors_${split}.json`), 'utf8')) as { behaviors: RawBehavior[] }).behaviors;

test('AgentHarm: 176 + 32 natural pairs; raw behaviors 208 harmful + 208 benign', (t) => {
  const dir = needShared(t, 'data', 'agentharm');
  if (!dir) return;
  const ah = readAgentHarm(dir);
  assert.equal(ah.harmful.filter((b) => b.split === 'test_public').length, 176);
  assert.equal(ah.benign.filter((b) => b.split === 'test_public').length, 176);
  assert.equal(ah.harmful.filter((b) => b.split === 'validation').length, 32);
  assert.equal(ah.benign.filter((b) => b.split === 'validation').length, 32);
  const pairs = agentHarmPairs(ah);
  assert.equal(pairs.filter((p) => p.id.startsWith('test-')).length, 176);
  assert.equal(pairs.filter((p) => p.id.startsWith('val-')).length, 32);
  assert.equal(readAgentHarm(dir, ['test_public']).harmful.length, 176);
});

test('AgentHarm: every pair recomputed from the raw files (same id ⇒ harmful + benign prompt and targets)', (t) => {
  const dir = needShared(t, 'data', 'agentharm');
  if (!dir) return;
  const pairs = new Map(agentHarmPairs(readAgentHarm(dir)).map((p) => [p.id, p]));
  let differingTargets = 0;
  for (const [split, prefix] of [['test_public', 'test'], ['validation', 'val']] as const) {
    const benign: Map<string, RawBehavior> = new Map(raw(dir, "benign", split).map((x) => [x.id, x]));
    for (const h of raw(dir, 'harmful', split)) {
      const b: RawBehavior = benign.get(h.id)!;
      const p = pairs.get(`${prefix}-${h.id}`);
      assert.ok(p, `${prefix}-${h.id} missing`);
      assert.equal(p.harmful.prompt, h.prompt);
      assert.equal(p.benign.prompt, b.prompt);
      assert.deepEqual(p.harmful.targetFunctions, h.target_functions);
      assert.deepEqual(p.benign.targetFunctions, b.target_functions);
      assert.equal(p.category, h.category.toLowerCase());
      // tools = union of both sides' targets, harmful order first
      const union = [...h.target_functions, ...b.target_functions.filter((f: string) => !h.target_functions.includes(f))];
      assert.deepEqual(p.tools.map((x) => x.function.name), union);
      if (JSON.stringify(h.target_functions) !== JSON.stringify(b.target_functions)) differingTargets++;
    }
  }
  assert.ok(differingTargets > 0, 'expected some pairs whose sides call different tools (e.g. onion vs google search)');
});

test('AgentHarm: specs come from the behavior\'s own side of tools.json', (t) => {
  const dir = needShared(t, 'data', 'agentharm');
  if (!dir) return;
  const tools = JSON.parse(readFileSync(join(dir, 'tools.json'), 'utf8')) as Record<'harmful_tools' | 'benign_tools', { function: { name: string } }[]>;
  const ah = readAgentHarm(dir);
  for (const [kind, list] of [['harmful', ah.harmful], ['benign', ah.benign]] as const) {
    const side = new Map(tools[`${kind}_tools`].map((s) => [s.function.name, s]));
    for (const b of list) {
      assert.deepEqual(b.tools.map((s) => s.function.name), b.targetFunctions);
      for (const s of b.tools) assert.deepEqual(s, side.get(s.function.name));
    }
  }
  // a benign-only tool: redeem_gift_cards exists only among benign tools and is used by benign 13-1
  const p = agentHarmPairs(ah).find((x) => x.id === 'test-13-1')!;
  assert.ok(p.tools.some((s) => s.function.name === 'redeem_gift_cards'));
  assert.ok(p.tools.some((s) => s.function.name === 'purchase_credit_card_details'));
});

test('AgentHarm: the four variants of a behavior share a group and never straddle the split', async (t) => {
  const dir = needShared(t, 'data', 'agentharm');
  if (!dir) return;
  const set = await loadPairSet(dir);
  assert.equal(set.pairs.length, 208);
  const groups = new Map<string, string[]>();
  for (const p of set.pairs) groups.set(p.group!, [...(groups.get(p.group!) ?? []), p.id]);
  assert.equal(groups.size, 44 + 8);
  for (const ids of groups.values()) assert.equal(ids.length, 4);
  const sp = splitPairs(set);
  const ex = new Set(sp.extraction);
  for (const ids of groups.values()) assert.equal(new Set(ids.map((i) => ex.has(i))).size, 1);
  assert.equal(sp.extraction.length, 4 * Math.round(0.7 * 52));
});

test('AgentHarm: a broken copy fails with file + behavior + what', (t) => {
  const dir = needShared(t, 'data', 'agentharm');
  if (!dir) return;
  const d = mkdtempSync(join(tmpdir(), 'sk-ah-'));
  try {
    cpSync(dir, d, { recursive: true });
    const f = join(d, 'dataset', 'benign_behaviors_validation.json');
    const doc = JSON.parse(readFileSync(f, 'utf8')) as { behaviors: Record<string, unknown>[] };
    doc.behaviors[2]!.target_functions = ['query_google_search', 'no_such_tool'];
    writeFileSync(f, JSON.stringify(doc));
    assert.throws(() => readAgentHarm(d), (e: unknown) =>
      e instanceof SafekeepError && e.message.includes(f) && e.message.includes('behavior 3') && e.message.includes("'no_such_tool'"));
    delete doc.behaviors[2]!.prompt;
    writeFileSync(f, JSON.stringify(doc));
    assert.throws(() => readAgentHarm(d), (e: unknown) => e instanceof SafekeepError && e.message.includes('behavior 3') && e.message.includes('missing "prompt"'));
    rmSync(join(d, 'tools.json'));
    assert.throws(() => readAgentHarm(d), (e: unknown) => e instanceof SafekeepError && e.message.includes('no tools.json'));
  } finally { rmSync(d, { recursive: true, force: true }); }
});
