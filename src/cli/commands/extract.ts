/**
 * `safekeep extract --model M --data pairs|agentharm|PATH --configs chatbot,+role,+instructions,agent,chatbot-long
 *    [--repr schema,flattened,pseudoword] [--first-token] [--limit N] [--results DIR] [--dtype f32|bf16]
 *    [--device cpu|cuda] [--template FILE] [--batch-tokens N]`
 * Caches the final-prompt-token residual stream (all layers) per configuration/representation under
 * results/<model>/cache/; `agent` is cached once per --repr. Resumable; progress on stderr; summary on stdout.
 */
import { numberValue, parseArgs, requireValue } from '../args.ts';
import { extractCondition, extractFirstToken, openContext, parseCondition, conditionName, type Condition } from '../../experiments/extract.ts';
import { resolveModel } from '../../hub/resolve.ts';
import { SafekeepError } from '../../util/errors.ts';
import type { ToolRepr } from '../../prompts/configurations.ts';

export const summary = 'cache final-prompt-token hidden states per prompt configuration (resumable)';

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, {
    values: ['model', 'data', 'configs', 'repr', 'limit', 'results', 'dtype', 'device', 'template', 'batch-tokens', 'split-seed'],
    booleans: ['first-token'],
  });
  const dtype = a.values.get('dtype') ?? 'f32';
  if (dtype !== 'f32' && dtype !== 'bf16') throw new SafekeepError(`--dtype must be f32 or bf16, got '${dtype}'`);
  const device = a.values.get('device') ?? 'cpu';
  if (device !== 'cpu' && device !== 'cuda') throw new SafekeepError(`--device must be cpu or cuda, got '${device}'`);
  const reprs = (a.values.get('repr') ?? 'schema').split(',');
  const conditions: Condition[] = [];
  for (const name of (a.values.get('configs') ?? 'chatbot,agent').split(',')) {
    if (name === 'agent') for (const r of reprs) conditions.push(parseCondition(`agent.${r}`));
    else conditions.push(parseCondition(name));
  }
  const template = a.values.get('template');
  const limit = a.values.has('limit') ? numberValue(a, 'limit') : undefined;
  const ctx = await openContext({
    model: await resolveModel(requireValue(a, 'model')),
    data: a.values.get('data') ?? 'pairs',
    results: a.values.get('results') ?? 'results',
    dtype, device,
    ...(template ? { template } : {}),
    ...(limit !== undefined ? { limit } : {}),
    batchTokens: numberValue(a, 'batch-tokens', 4096),
    splitSeed: numberValue(a, 'split-seed', 0),
  });
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
