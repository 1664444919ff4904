/**
 * The embedding looked up on the host (`embeddings: 'host'`, the CPU's default; runtime/host-embeddings.ts) against
 * the graph's own Gather (`embeddings: 'graph'`, the GPU default): the same bits, for every storage dtype (F32, BF16,
 * F16), tied and untied tables, `--dtype bf16` rounding of f32/f16 storage, the q8 store's copy of the table and a
 * sharded checkpoint. Both engines run the same greedy generation and a left-padded batch forward; hidden states
 * (hidden[0] is the embedding itself) and logits must be bit-equal — the host path reads the same bytes
 * and converts them the way onnxruntime's Casts do, so any misplaced row, wrong offset or rounding shows.
 * What it saves is measured by bench:generate (docs/engine.md), not here.
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type * as ort from 'onnxruntime-node';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint, type RandomCheckpointOptions } from '../src/checkpoint/random.ts';
import { tensorName } from '../src/checkpoint/tensors.ts';
import type { DType } from '../src/checkpoint/types.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { resolveEngineConfig } from '../src/engine/engine-config.ts';
import type { ComputeDType } from '../src/engine/graph/precision.ts';
import { lookupEmbeddings } from '../src/engine/runtime/host-embeddings.ts';
import { tempCache } from './helpers/engine.ts';

const root = mkdtempSync(join(tmpdir(), 'safekeep-host-embed-'));
const cache = tempCache();
after(() => { rmSync(root, { recursive: true, force: true }); cache.cleanup(); });

const SHAPE: RandomCheckpointOptions = { numLayers: 2, hiddenSize: 32, numHeads: 4, numKvHeads: 2, intermediateSize: 64, vocabSize: 97, std: 0.2 };
const PROMPTS = [[5, 17, 3, 96, 40, 2, 77], [11, 0, 63], [90, 91, 92, 93, 94, 1, 8, 8, 8, 30, 31]];

const inputNames = (e: OnnxEngine): readonly string[] => (e as unknown as { session: ort.InferenceSession }).session.inputNames;

const cases: { name: string; storage: DType; tie: boolean; dtype: ComputeDType; shards?: number }[] = [
  { name: 'F32 untied, f32', storage: 'F32', tie: false, dtype: 'f32' },
  { name: 'F32 tied, f32', storage: 'F32', tie: true, dtype: 'f32' },
  { name: 'BF16 untied, f32', storage: 'BF16', tie: false, dtype: 'f32' },
  { name: 'F16 tied, f32', storage: 'F16', tie: true, dtype: 'f32' },
  { name: 'F32 untied, --dtype bf16 (rounded rows)', storage: 'F32', tie: false, dtype: 'bf16' },
  { name: 'F16 tied, --dtype bf16 (rounded rows)', storage: 'F16', tie: true, dtype: 'bf16' },
  { name: 'BF16 tied, --dtype f16', storage: 'BF16', tie: true, dtype: 'f16' },
  { name: 'F32 untied, q8 (the store\'s copy of the table)', storage: 'F32', tie: false, dtype: 'q8' },
  { name: 'F32 untied in 3 shards, f32', storage: 'F32', tie: false, dtype: 'f32', shards: 3 },
];

describe('host embedding lookup equals the graph\'s Gather, bit for bit', () => {
  for (const [i, c] of cases.entries()) {
    test(c.name, async () => {
      const dir = await writeRandomCheckpoint(join(root, `m${i}`), 'llama', { ...SHAPE, seed: 100 + i, dtype: c.storage, tieWordEmbeddings: c.tie, shards: c.shards ?? 1 });
      const host = await createEngine(dir, { cacheDir: cache.dir, threads: 1, dtype: c.dtype });
      const graph = await createEngine(dir, { cacheDir: cache.dir, threads: 1, dtype: c.dtype, embeddings: 'graph' });
      try {
        // the two engines really run different graphs: only the host's takes the rows as an input
        assert.ok(inputNames(host).includes('inputs_embeds'));
        assert.ok(!inputNames(graph).includes('inputs_embeds'));
        const a = await host.forward(PROMPTS);
        const b = await graph.forward(PROMPTS);
        for (let s = 0; s < PROMPTS.length; s++) {
          assert.deepEqual(a[s]!.hidden, b[s]!.hidden, `prompt ${s}: hidden states`);
          assert.deepEqual(a[s]!.logits, b[s]!.logits, `prompt ${s}: logits`);
        }
        const steer = { layer: 1, vector: new Float32Array(SHAPE.hiddenSize!).fill(1), alpha: 0.5 };
        const ga = await host.generate(PROMPTS, { maxNewTokens: 6, stopIds: [], steer });
        const gb = await graph.generate(PROMPTS, { maxNewTokens: 6, stopIds: [], steer });
        assert.deepEqual(ga.map((r) => r.generatedIds), gb.map((r) => r.generatedIds));
      } finally {
        await host.dispose();
        await graph.dispose();
      }
    });
  }
});

describe('lookupEmbeddings', () => {
  test('reads the rows of the stored table (checked against the checkpoint\'s own bytes), and refuses ids outside it', async () => {
    const dir = await writeRandomCheckpoint(join(root, 'lookup'), 'llama', { ...SHAPE, seed: 7 });
    const ckpt = await loadCheckpoint(dir);
    const e = ckpt.tensors.get(tensorName('embed'))!;
    const table = { file: e.file, offset: e.offset, dtype: e.dtype, rows: e.shape[0]!, dim: e.shape[1]!, roundBf16: false };
    const whole = lookupEmbeddings(table, Array.from({ length: table.rows }, (_, id) => id));
    const rows = lookupEmbeddings(table, [BigInt(96), BigInt(0), BigInt(96)]);
    const d = table.dim;
    assert.deepEqual(rows.subarray(0, d), whole.subarray(96 * d, 97 * d));
    assert.deepEqual(rows.subarray(d, 2 * d), whole.subarray(0, d));
    assert.deepEqual(rows.subarray(2 * d), whole.subarray(96 * d, 97 * d));
    assert.throws(() => lookupEmbeddings(table, [BigInt(97)]), /token id 97 is outside the embedding table \(97 rows\)/);
    assert.throws(() => lookupEmbeddings(table, [-1]), /token id -1 is outside/);
    // a file cut short under the engine is an error naming it, not rows of zeros
    truncateSync(e.file, e.offset + 10 * d * 4 + 3);
    assert.throws(() => lookupEmbeddings(table, [50]), /ended inside row 50/);
  });

  test('the engine option is validated, and the defaults follow the device', () => {
    assert.equal(resolveEngineConfig({}).embeddings, 'host');
    assert.equal(resolveEngineConfig({ device: 'webgpu' }).embeddings, 'graph');
    assert.equal(resolveEngineConfig({ device: 'cuda' }).embeddings, 'graph');
    assert.equal(resolveEngineConfig({ device: 'webgpu', embeddings: 'host' }).embeddings, 'host');
    assert.throws(() => resolveEngineConfig({ embeddings: 'disk' as 'host' }), /embeddings must be one of host, graph, got 'disk'/);
  });
});
