/**
 * `--max-memory` through the extraction stage: bundled pairs in the agent configuration (prompts of ~1,000+ tokens
 * with the tool specs) on a tiny random qwen3 checkpoint with the real Qwen3 tokenizer and template, under a budget
 * that leaves only a few MiB per step — so suffixes and shared prefixes are prefilled in chunks and the prefix cache
 * is small. The cached final-prompt-token hidden states equal the run without a budget (≤ 1e-5 × max|value|), steps
 * never exceed the plan's chunk, and the manifest records the plan.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import { readSafetensorsHeader } from '../src/checkpoint/safetensors.ts';
import { OnnxEngine } from '../src/engine/engine.ts';
import { planMemory, RUNTIME_BYTES, STEP_FIXED, weightBytes } from '../src/engine/runtime/memory.ts';
import { extractCondition, openContext, parseCondition, renderRows } from '../src/experiments/extract.ts';
import { installTokenizer, npmTokenizerDir } from '../src/prompts/tokenizer.ts';
import { maxAbsDiff } from './helpers/engine.ts';

function vocabSize(): number {
  const tok = JSON.parse(readFileSync(join(npmTokenizerDir('qwen3'), 'tokenizer.json'), 'utf8')) as {
    model: { vocab: Record<string, number> }; added_tokens: { id: number }[];
  };
  let max = 0;
  for (const id of Object.values(tok.model.vocab)) if (id > max) max = id;
  for (const t of tok.added_tokens) if (t.id > max) max = t.id;
  return max + 1;
}

function readCache(path: string): Float32Array {
  const e = readSafetensorsHeader(path).entries[0]!;
  return readTensorF32({ ...e, dtype: e.dtype as 'F32' });
}

test('extract agent.schema under a small --max-memory budget = without one; the manifest records the plan', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-memextract-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  process.env.SAFEKEEP_QUIET = '1';
  try {
    const model = join(dir, 'tiny-qwen3');
    await writeRandomCheckpoint(model, 'qwen3', { vocabSize: vocabSize(), numLayers: 2, hiddenSize: 32, intermediateSize: 64, numHeads: 4, numKvHeads: 2, seed: 9 });
    await installTokenizer(model, 'qwen3');
    const c = parseCondition('agent.schema');
    const plain = await openContext({ model, data: 'pairs', results: join(dir, 'plain'), limit: 3, engine: { cacheDir: join(dir, '.graphs'), quiet: true } });
    const ref = await extractCondition(plain, c);
    await plain.engine.dispose();

    const cfg = (plain.engine as OnnxEngine).config;
    // the CPU's engine reads embedding rows on the host (engine-config.ts defaultEmbeddings): its plan counts no table
    const budget = RUNTIME_BYTES + weightBytes(cfg, 'f32', { hostEmbeddings: true }) + STEP_FIXED + 6 * 2 ** 20;
    const ctx = await openContext({ model, data: 'pairs', results: join(dir, 'budget'), limit: 3, engine: { cacheDir: join(dir, '.graphs'), maxMemory: budget, runtimeBytes: RUNTIME_BYTES } });
    const engine = ctx.engine as OnnxEngine;
    const plan = engine.memoryPlan!;
    assert.deepEqual(plan, planMemory(cfg, 'f32', budget, { hostEmbeddings: true }));
    let steps = 0;
    let widest = 0;
    const step = engine.step.bind(engine);
    engine.step = async (inp) => { steps++; widest = Math.max(widest, inp.width); return step(inp); };
    const got = await extractCondition(ctx, c);
    await ctx.engine.dispose();

    const a = readCache(got.path);
    const b = readCache(ref.path);
    let m = 1;
    for (const x of b) m = Math.max(m, Math.abs(x));
    assert.ok(maxAbsDiff(a, b) / m <= 1e-5, `max rel diff ${maxAbsDiff(a, b) / m}`);
    // the budget matters: the longest prompt does not fit one step, and no step was wider than the plan's chunk
    const longest = Math.max(...renderRows(ctx, c).map((r) => r.ids.length));
    assert.ok(plan.maxChunkTokens * 2 < longest, `plan chunk ${plan.maxChunkTokens}, longest prompt ${longest}`);
    assert.ok(widest <= plan.maxChunkTokens, `widest step ${widest} tokens, plan chunk ${plan.maxChunkTokens}`);
    assert.ok(steps > 6, `${steps} steps`);
    const manifest = JSON.parse(readFileSync(got.manifestPath, 'utf8')) as { memory: Record<string, number> };
    assert.equal(manifest.memory.budgetBytes, budget);
    assert.equal(manifest.memory.maxChunkTokens, plan.maxChunkTokens);
    assert.equal(manifest.memory.prefixCacheBytes, plan.prefixCacheBytes);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
