/**
 * Similar-length batching (batch.ts `planChunks`) under a token cap and a memory predicate: groups by hand, padding
 * waste by hand, every group within the caps, and on the bundled pair set (real Qwen3 tokenizer + template, 410
 * prompts per configuration) the padding of length-sorted groups against the set-order batches of the cache store
 * (measured: chatbot 20.4 % → 6.7 %, agent.schema 7.0 % → 0.4 %, agent.flattened 8.6 % → 0.5 %).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { planBatches } from '../src/cache/store.ts';
import { loadPairSet } from '../src/data/load.ts';
import { paddingWaste, planChunks } from '../src/engine/run/batch.ts';
import { PromptBuilder } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { installTokenizer, loadPromptTokenizer } from '../src/prompts/tokenizer.ts';

test('planChunks: sorted by length, split at the token cap and at the memory predicate; a too-long sequence alone', () => {
  const lengths = [5, 40, 6, 12, 7, 100];
  // sorted: 5(0) 6(2) 7(4) 12(3) 40(1) 100(5); cap 24 tokens: [0,2,4] (3·7=21), [3] (2·12 > 24 with the next), [1], [5]
  assert.deepEqual(planChunks(lengths, 1, 24, Infinity), [[0, 2, 4], [3], [1], [5]]);
  // a predicate allowing at most 2 rows
  assert.deepEqual(planChunks(lengths, 1, 4096, Infinity, (b) => b <= 2), [[0, 2], [4, 3], [1, 5]]);
  // the predicate sees (rows, widest): widths ≤ 12 only
  const seen: [number, number][] = [];
  const groups = planChunks(lengths, 1, 4096, Infinity, (b, w) => { seen.push([b, w]); return w <= 12; });
  assert.deepEqual(groups, [[0, 2, 4, 3], [1], [5]]);
  assert.deepEqual(seen, [[2, 6], [3, 7], [4, 12], [5, 40], [2, 100]]);
  // padding by hand: [5,6,7,12] padded to 12 → 48 vs 30 real; [40]; [100]
  const w = paddingWaste(lengths, groups);
  assert.deepEqual({ padded: w.padded, real: w.real }, { padded: 48 + 40 + 100, real: 170 });
  assert.ok(Math.abs(w.waste - (188 / 170 - 1)) < 1e-12);
});

test('bundled pair set: length-sorted groups pad less than set-order batches (chatbot, agent.schema)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-batching-'));
  try {
    await installTokenizer(dir, 'qwen3');
    const b = new PromptBuilder(await loadPromptTokenizer(dir), { texts: loadPromptTexts() });
    const set = await loadPairSet('pairs');
    for (const [cfg, repr] of [['chatbot', 'schema'], ['agent', 'schema']] as const) {
      const lengths = set.pairs.flatMap((p) => (['harmful', 'benign'] as const).map((k) => b.render(p[k].prompt, p.tools, cfg, repr).ids!.length));
      const setOrder = planBatches(lengths, 4096, 16).map(([s, e]) => Array.from({ length: e - s }, (_, i) => s + i));
      const sorted = planChunks(lengths, 16, 4096);
      for (const g of sorted) assert.ok(g.length === 1 || g.length * Math.max(...g.map((i) => lengths[i]!)) <= 4096);
      assert.deepEqual(sorted.flat().sort((x, y) => x - y), lengths.map((_, i) => i));
      const a = paddingWaste(lengths, setOrder);
      const s = paddingWaste(lengths, sorted);
      t.diagnostic(`${cfg}${cfg === 'agent' ? `.${repr}` : ''}: ${lengths.length} prompts, ${s.real} tokens; padding waste set order ${(100 * a.waste).toFixed(1)} % (${setOrder.length} batches), length-sorted ${(100 * s.waste).toFixed(1)} % (${sorted.length} batches)`);
      assert.ok(s.waste < a.waste, `${cfg}: sorted ${s.waste} vs set order ${a.waste}`);
      assert.ok(s.waste < 0.1, `${cfg}: sorted waste ${s.waste}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
