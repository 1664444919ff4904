/**
 * `generate(..., {haltAfterPrefill})`: the hook sees each row's last-prompt-token hidden states from the prefill
 * (equal to a separate forward's, ≤ 1e-5), with the caller's row index even when the engine splits the rows into
 * several internal batches; a halted row generates nothing ('halted'); the other rows generate exactly what a plain
 * generate does.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngineFromCheckpoint, type OnnxEngine } from '../src/engine/engine.ts';
import { maxAbsDiff, tempCache } from './helpers/engine.ts';

let tmp = '';
let cache: ReturnType<typeof tempCache>;
let engine: OnnxEngine;
const seqs = [[5, 17, 33, 42, 9, 61, 7, 88], [12, 3, 99], [44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56], [70]];

before(async () => {
  cache = tempCache();
  tmp = mkdtempSync(join(tmpdir(), 'safekeep-halt-'));
  await writeRandomCheckpoint(join(tmp, 'm'), 'llama', {
    seed: 3, numLayers: 3, hiddenSize: 48, numHeads: 6, numKvHeads: 2, intermediateSize: 96, vocabSize: 131, std: 0.2,
  });
  engine = await createEngineFromCheckpoint(await loadCheckpoint(join(tmp, 'm')), { cacheDir: cache.dir, threads: 2 });
});
after(async () => {
  await engine?.dispose();
  rmSync(tmp, { recursive: true, force: true });
  cache?.cleanup();
});

for (const maxBatchTokens of [4096, 16]) {
  test(`haltAfterPrefill: prefill hidden states, caller row indices, halted rows generate nothing (maxBatchTokens ${maxBatchTokens})`, async () => {
    engine.maxBatchTokens = maxBatchTokens; // 16 splits the four prompts into several internal batches
    try {
      const plain = await engine.generate(seqs, { maxNewTokens: 5, stopIds: [] });
      const forward = await engine.forward(seqs, { hiddenAt: 'last', logitsAt: 'none' });
      const seen = new Map<number, Float32Array>();
      const halted = new Set([1, 2]);
      const res = await engine.generate(seqs, {
        maxNewTokens: 5, stopIds: [],
        haltAfterPrefill: (row, h) => {
          seen.set(row, h.slice());
          return halted.has(row);
        },
      });
      assert.deepEqual([...seen.keys()].sort(), [0, 1, 2, 3]);
      for (let i = 0; i < seqs.length; i++) {
        assert.ok(maxAbsDiff(seen.get(i)!, forward[i]!.hidden) < 1e-5, `row ${i}: prefill hidden differs from forward`);
        if (halted.has(i)) {
          assert.deepEqual(res[i]!.generatedIds, []);
          assert.equal(res[i]!.finish, 'halted');
        } else {
          assert.deepEqual(res[i]!.generatedIds, plain[i]!.generatedIds, `row ${i}`);
          assert.equal(res[i]!.finish, plain[i]!.finish);
        }
      }
      // every row halted: nothing decoded, nothing generated
      const all = await engine.generate(seqs, { maxNewTokens: 5, stopIds: [], haltAfterPrefill: () => true });
      assert.ok(all.every((r) => r.finish === 'halted' && r.generatedIds.length === 0));
    } finally {
      engine.maxBatchTokens = 4096;
    }
  });
}
