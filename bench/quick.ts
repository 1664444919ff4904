/**
 * `npm run bench:quick`: is `safekeep reproduce --quick` within 30 minutes for a 0.5B model on this machine?
 * Writes a Qwen3-0.6B-shaped random checkpoint (28 layers, d 1024, 16/8 heads, head_dim 128, intermediate 3072,
 * vocab 151,936, tied; 2.4 GB f32) with the real Qwen3 tokenizer and template, renders every prompt `--quick`
 * extracts (all configurations + the two first-token passes), counts the tokens, measures prefill tokens/s on a
 * sample of those prompts with the real engine, and prints the projected extraction time. Random weights change
 * nothing about the cost. `-- --measure-all` runs the real `reproduce --quick` instead and times it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { installTokenizer } from '../src/prompts/tokenizer.ts';
import { engineEnv } from '../src/cli/env.ts';
import { openContext, renderRows, conditionName, type Condition } from '../src/experiments/extract.ts';
import { QUICK_PAIRS, TABLE1, TABLE2, reproduce } from '../src/experiments/reproduce.ts';

const dir = mkdtempSync(join(tmpdir(), 'bench-quick-'));
const engine = { ...engineEnv(), cacheDir: process.env.SAFEKEEP_CACHE ?? join(dir, '.graphs') };
try {
  const model = join(dir, 'qwen3-0.6b-shape');
  let t = performance.now();
  await writeRandomCheckpoint(model, 'qwen3', {
    numLayers: 28, hiddenSize: 1024, numHeads: 16, numKvHeads: 8, headDim: 128, intermediateSize: 3072,
    vocabSize: 151936, tieWordEmbeddings: true, seed: 5, std: 0.02,
  });
  await installTokenizer(model, 'qwen3');
  console.log(`wrote Qwen3-0.6B-shaped checkpoint in ${((performance.now() - t) / 1000).toFixed(0)} s`);
  if (process.argv.includes('--measure-all')) {
    t = performance.now();
    await reproduce({ model, data: 'pairs', results: join(dir, 'results'), quick: true, engine });
    console.log(`reproduce --quick: ${((performance.now() - t) / 60000).toFixed(1)} min`);
  } else {
    t = performance.now();
    const ctx = await openContext({ model, data: 'pairs', results: join(dir, 'results'), limit: QUICK_PAIRS, engine });
    console.log(`engine start: ${((performance.now() - t) / 1000).toFixed(1)} s`);
    const conditions: Condition[] = [{ config: 'chatbot', repr: null }, ...TABLE1.map((x) => x.c), ...TABLE2.map((x) => x.c)];
    const seen = new Set<string>();
    let tokens = 0;
    let prompts = 0;
    let sample: number[][] = [];
    for (const c of conditions) {
      if (seen.has(conditionName(c))) continue;
      seen.add(conditionName(c));
      const rows = renderRows(ctx, c);
      const n = rows.reduce((s, r) => s + r.ids.length, 0);
      // agent.schema / agent.flattened: prompt and first token share one prefill (+1 decode step each)
      const passes = 1;
      tokens += n * passes;
      prompts += rows.length * passes;
      console.log(`  ${conditionName(c).padEnd(18)} ${rows.length} prompts, mean ${(n / rows.length).toFixed(0)} tokens`);
      if (c.config === 'agent' && c.repr === 'schema') sample = rows.slice(0, 8).map((r) => r.ids);
    }
    await ctx.engine.forward([sample[0]!.slice(0, 32)], { hiddenAt: 'last', logitsAt: 'none' }); // warm-up
    t = performance.now();
    for (const ids of sample) await ctx.engine.forward([ids], { hiddenAt: 'last', logitsAt: 'none' });
    const secs = (performance.now() - t) / 1000;
    const sampleTokens = sample.reduce((s, x) => s + x.length, 0);
    const rate = sampleTokens / secs;
    await ctx.engine.dispose();
    console.log(`prefill on ${sample.length} real agent prompts: ${rate.toFixed(0)} tokens/s`);
    console.log(`--quick (${QUICK_PAIRS} pairs): ${prompts} prompt passes, ${tokens} tokens → projected ${(tokens / rate / 60).toFixed(1)} min of prefill (target < 30 min)`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
