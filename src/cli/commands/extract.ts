/**
 * `safekeep extract --model M --data pairs|agentharm|PATH --configs chatbot,+role,+instructions,agent,chatbot-long
 *    [--repr schema,flattened,pseudoword] [--first-token] [--limit N] [--results DIR] [--dtype f32|bf16|f16|q8|q4]
 *    [--device cpu|cuda|webgpu] [--threads N] [--template FILE] [--batch-tokens N] [--split-seed N]`
 * Caches the final-prompt-token residual stream (all layers) per configuration/representation under
 * results/<model>/cache/; `agent` is cached once per --repr. Resumable; progress on stderr; summary on stdout.
 * `--shard i/n` (0-based): only this shard's token-balanced share of the batches, into
 * results/<model>/shards/extract/shard-<i>-of-<n>/; `safekeep merge results/<model>` assembles the caches.
 */
import { parseArgs, type FlagTable } from '../args.ts';
import { RUN_FLAG_DEFS, runContextOptions } from '../run-flags.ts';
import {
  conditionPass, extractCondition, extractFirstToken, firstTokenPass, openContext, parseCondition, conditionName, runShard, type Condition,
} from '../../experiments/extract.ts';
import { parseShard } from '../../util/shard.ts';
import { SHARD_FLAG_DEF } from '../shard-flag.ts';
import type { ToolRepr } from '../../prompts/configurations.ts';

export const summary = 'cache final-prompt-token hidden states per prompt configuration (resumable)';

export const flags: FlagTable = {
  usage: 'extract --model M [--data pairs|agentharm|PATH] [--configs LIST] [--repr LIST] [--first-token] [flags]',
  flags: [
    ...RUN_FLAG_DEFS,
    { name: 'configs', value: 'LIST', default: 'chatbot,agent', help: 'configurations: chatbot, +role, +instructions, agent, chatbot-long' },
    { name: 'repr', value: 'LIST', default: 'schema', help: 'tool representations of agent: schema, flattened, pseudoword' },
    { name: 'first-token', boolean: true, help: 'also cache the first generated token (schema, flattened)' },
    SHARD_FLAG_DEF,
  ],
  example: 'extract --model models/planted --configs chatbot,agent --repr schema,flattened',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  const reprs = (a.values.get('repr') ?? 'schema').split(',');
  const conditions: Condition[] = [];
  for (const name of (a.values.get('configs') ?? 'chatbot,agent').split(',')) {
    if (name === 'agent') for (const r of reprs) conditions.push(parseCondition(`agent.${r}`));
    else conditions.push(parseCondition(name));
  }
  const ctx = await openContext(await runContextOptions(a));
  const shardArg = a.values.get('shard');
  if (shardArg !== undefined) {
    try {
      const passes = conditions.map((c) => conditionPass(ctx, c));
      if (a.booleans.has('first-token')) passes.push(firstTokenPass(ctx, 'schema'), firstTokenPass(ctx, 'flattened'));
      const r = await runShard(ctx, 'extract', passes, parseShard(shardArg), {});
      process.stdout.write(`shard ${shardArg}: ${r.items} batches (${r.tokens} padded tokens), computed ${r.computedRows} prompts in ${r.seconds.toFixed(1)} s → ${r.dir}\n`);
    } finally {
      await ctx.engine.dispose();
    }
    return 0;
  }
  try {
    for (const c of conditions) {
      const r = await extractCondition(ctx, c);
      process.stdout.write(`${conditionName(c)}: ${r.reused ? 'cached' : `computed ${r.computedRows} prompts`}${r.resumedBatches ? ` (resumed ${r.resumedBatches} batches)` : ''} → ${r.path}\n`);
    }
    if (a.booleans.has('first-token')) {
      for (const repr of ['schema', 'flattened'] as ToolRepr[]) {
        const r = await extractFirstToken(ctx, repr);
        process.stdout.write(`first token ${repr}: ${r.reused ? 'cached' : `computed ${r.computedRows} prompts`} → ${r.path}\n`);
      }
    }
  } finally {
    await ctx.engine.dispose();
  }
  return 0;
}
