/**
 * `safekeep reproduce --model M [--data pairs|agentharm|PATH] [--quick] [--limit N] [--results DIR]
 *    [--dtype f32|bf16|f16|q8|q4] [--device cpu|cuda] [--threads N] [--template FILE] [--reps N] [--split-seed N]`
 * extract → analyses → figures → report (Tables 1–2, Figures 3–4) under results/<model>/, reusing caches.
 * `--shard i/n` (0-based): only this shard's token-balanced share of the extraction, into
 * results/<model>/shards/reproduce/shard-<i>-of-<n>/; `safekeep merge results/<model>` then finishes the run.
 */
import { numberValue, parseArgs } from '../args.ts';
import { RUN_FLAGS, runContextOptions } from '../run-flags.ts';
import { reproduce, reproduceShard } from '../../experiments/reproduce.ts';
import { parseShard } from '../../util/shard.ts';
import { summarizeResults } from '../../experiments/summary.ts';

export const summary = 'extract → analyses → figures → report: the paper\'s Tables 1–2 and Figures 3–4';

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, { values: [...RUN_FLAGS, 'reps', 'shard'], booleans: ['quick'] });
  const shardArg = a.values.get('shard');
  if (shardArg !== undefined) {
    const shard = parseShard(shardArg);
    const r = await reproduceShard({ ...(await runContextOptions(a)), quick: a.booleans.has('quick'), reps: numberValue(a, 'reps', 1000) }, shard);
    process.stdout.write(`shard ${shardArg}: ${r.items} batches (${r.tokens} padded tokens), computed ${r.computedRows} prompts in ${r.seconds.toFixed(1)} s → ${r.dir}\nwhen every shard is done: safekeep merge ${r.dir.replace(/\/shards\/.*$/, '')}\n`);
    return 0;
  }
  const r = await reproduce({ ...(await runContextOptions(a)), quick: a.booleans.has('quick'), reps: numberValue(a, 'reps', 1000) });
  process.stdout.write(summarizeResults(r.results) + `\nreport: ${r.files.html}\n`);
  return 0;
}
