/**
 * `safekeep reproduce --model M [--data pairs|agentharm|PATH] [--quick] [--limit N] [--results DIR]
 *    [--dtype f32|bf16|f16|q8|q4] [--device cpu|cuda|webgpu] [--threads N] [--template FILE] [--reps N] [--split-seed N]`
 * extract → analyses → figures → report (Tables 1–2, Figures 3–4) under results/<model>/, reusing caches.
 * `--sae DIR` (and `--hook`): the SAE features of the refusal and Schema Directions in each condition of Figures 3–4,
 * with their top-activating prompts (a figure and a section of report.html; without it the section says none was given).
 * `--shard i/n` (0-based): only this shard's token-balanced share of the extraction, into
 * results/<model>/shards/reproduce/shard-<i>-of-<n>/; `safekeep merge results/<model>` then finishes the run.
 */
import { numberValue, parseArgs, type FlagTable } from '../args.ts';
import { ANALYSIS_FLAG_DEFS, analysisOptions, RUN_FLAG_DEFS, runContextOptions } from '../run-flags.ts';
import { checkPairBudget, CV_BUDGET } from '../pair-budget.ts';
import { DEFAULT_REFUSAL_TOKENS, QUICK_PAIRS, reproduce, reproduceShard, type ReproduceSae } from '../../experiments/reproduce.ts';
import { parseShard } from '../../util/shard.ts';
import { SHARD_FLAG_DEF } from '../shard-flag.ts';
import { SafekeepError } from '../../util/errors.ts';
import { summarizeResults } from '../../experiments/summary.ts';
import { SAE_FLAG_DEFS, openSae } from '../sae-flags.ts';

export const summary = 'extract → analyses → figures → report: the paper\'s Tables 1–2 and Figures 3–4';

export const flags: FlagTable = {
  usage: 'reproduce --model M [--data pairs|agentharm|PATH] [--quick] [flags]',
  flags: [
    ...RUN_FLAG_DEFS,
    { name: 'reps', value: 'N', default: '1000', help: 'bootstrap resamples' },
    ...ANALYSIS_FLAG_DEFS,
    { name: 'refusal-tokens', value: 'N', default: String(DEFAULT_REFUSAL_TOKENS), help: 'behavioural refusal (chatbot vs agent): new tokens per answer; 0 = skip' },
    ...SAE_FLAG_DEFS.map((f) => ({ ...f, help: f.name === 'sae' ? `${f.help}: list the features of the refusal and Schema Directions per condition of Figures 3–4 (SAE at ℓ*)` : f.help })),
    { name: 'sae-top', value: 'N', default: '5', help: 'with --sae: features per direction, condition and ranking' },
    { name: 'sae-prompts', value: 'K', default: '3', help: 'with --sae: top-activating prompts per feature' },
    { name: 'quick', boolean: true, help: '30 pairs (sized for a 0.5B model on a 2-core CPU in < 30 min)' },
    { ...SHARD_FLAG_DEF, help: `${SHARD_FLAG_DEF.help}; extraction only (behavioural refusal is not run: run reproduce once after the merge, it reuses the caches)` },
  ],
  example: 'reproduce --model models/planted --quick',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  const refusalTokens = numberValue(a, 'refusal-tokens', DEFAULT_REFUSAL_TOKENS);
  if (!Number.isInteger(refusalTokens) || refusalTokens < 0) throw new SafekeepError(`--refusal-tokens must be a non-negative integer, got ${refusalTokens}`);
  if (a.values.has('sae') && a.values.has('shard')) throw new SafekeepError('--sae: a sharded reproduce only extracts; run reproduce --sae once after the merge (it reuses every cache)');
  const sae = await saeOption(a);
  const options = {
    ...(sae ? { sae } : {}),
    ...(await runContextOptions(a)), quick: a.booleans.has('quick'), reps: numberValue(a, 'reps', 1000), ...analysisOptions(a), refusalTokens,
  };
  await checkPairBudget(options, options.limit ?? (options.quick ? QUICK_PAIRS : undefined), CV_BUDGET);
  const shardArg = a.values.get('shard');
  if (shardArg !== undefined) {
    const r = await reproduceShard(options, parseShard(shardArg));
    process.stdout.write(`shard ${shardArg}: ${r.items} batches (${r.tokens} padded tokens), computed ${r.computedRows} prompts in ${r.seconds.toFixed(1)} s → ${r.dir}\nwhen every shard is done: safekeep merge ${r.dir.replace(/\/shards\/.*$/, '')}\n`);
    return 0;
  }
  const r = await reproduce(options);
  process.stdout.write(summarizeResults(r.results) + `\nreport: ${r.files.html}\ndirections: ${r.directionsFile}\n`);
  return 0;
}

/** `--sae` (opened before the engine, whose memory plan counts it) with its --sae-top / --sae-prompts, or undefined. */
async function saeOption(a: ReturnType<typeof parseArgs>): Promise<ReproduceSae | undefined> {
  const top = numberValue(a, 'sae-top', 5);
  const k = numberValue(a, 'sae-prompts', 3);
  if (!Number.isInteger(top) || top < 1) throw new SafekeepError(`--sae-top must be a positive integer, got ${top}`);
  if (!Number.isInteger(k) || k < 1) throw new SafekeepError(`--sae-prompts must be a positive integer, got ${k}`);
  if (!a.values.has('sae')) {
    for (const f of ['hook', 'sae-top', 'sae-prompts']) if (a.values.has(f)) throw new SafekeepError(`--${f} needs --sae`);
    return undefined;
  }
  return { sae: await openSae(a), source: a.values.get('sae')!, top, k };
}
