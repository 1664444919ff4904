/**
 * Flags shared by the pipeline commands (extract, reproduce, steer): model, data, engine options (ENGINE_FLAGS:
 * --dtype, --device, --threads, --max-memory), template, limit, results folder, batching and split seed →
 * `ContextOptions` of the extraction stage.
 */
import { engineOptions, ENGINE_FLAG_DEFS } from './engine-flags.ts';
import type { ContextOptions } from '../experiments/extract.ts';
import { resolveModel } from '../hub/resolve.ts';
import { choiceValue, numberValue, positiveIntValue, requireValue, type FlagDef, type ParsedArgs } from './args.ts';
import { THINKING_FLAG_DEFS, thinkingOptions } from './thinking-flags.ts';
import { dataDirsEnv, hubEnv } from './env.ts';
import { SafekeepError } from '../util/errors.ts';


/** flag-table rows of the pipeline commands (extract, reproduce, steer) */
export const RUN_FLAG_DEFS: readonly FlagDef[] = [
  ...ENGINE_FLAG_DEFS,
  { name: 'data', value: 'pairs|agentharm|PATH', default: 'pairs', help: 'pair source' },
  { name: 'limit', value: 'N', help: 'keep N pairs, round-robin over categories' },
  { name: 'results', value: 'DIR', default: 'results', help: 'results root (results/<model>/)' },
  { name: 'template', value: 'FILE', help: 'chat template file instead of the model folder\'s' },
  { name: 'batch-tokens', value: 'N', default: '4096', help: 'tokens per forward batch' },
  { name: 'split-seed', value: 'N', default: '0', help: 'seed of the group-disjoint 7:3 extraction/evaluation split' },
  { name: 'gen-concurrency', value: 'N', default: '4', help: 'generation batches of 8 prompts in flight (steer, behavioural refusal): the scheduler decodes them together' },
  ...THINKING_FLAG_DEFS,
];
export const RUN_FLAGS = RUN_FLAG_DEFS.map((f) => f.name);

/** ℓ* rule and Schema Direction pairs (reproduce, steer) */
export const ANALYSIS_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'layer-rule', value: 'cv|peak', default: 'cv', help: 'ℓ*: 5-fold CV on the extraction split, or the paper\'s peak chatbot AUROC' },
  { name: 'schema-pairs', value: 'all|extraction', default: 'all', help: 'Schema Direction over all pairs (the paper\'s Eq. 2) or the extraction split' },
];

export function analysisOptions(a: ParsedArgs): { layerRule: 'cv' | 'peak'; schemaPairs: 'all' | 'extraction' } {
  return {
    layerRule: choiceValue(a, 'layer-rule', ['cv', 'peak'] as const, 'cv'),
    schemaPairs: choiceValue(a, 'schema-pairs', ['all', 'extraction'] as const, 'all'),
  };
}


/** --gen-concurrency: 1..1024 (the scheduler queues what it cannot admit; beyond that nothing is gained) */
function genConcurrencyValue(a: ParsedArgs): number {
  const n = positiveIntValue(a, 'gen-concurrency', 4);
  if (!(n <= 1024)) throw new SafekeepError(`--gen-concurrency must be at most 1024, got ${a.values.get('gen-concurrency')}`);
  return n;
}

export async function runContextOptions(a: ParsedArgs): Promise<ContextOptions> {
  const template = a.values.get('template');
  return {
    ...thinkingOptions(a),
    model: await resolveModel(requireValue(a, 'model'), hubEnv()),
    data: a.values.get('data') ?? 'pairs',
    dataDirs: dataDirsEnv(),
    results: a.values.get('results') ?? 'results',
    engine: engineOptions(a),
    ...(template ? { template } : {}),
    ...(a.values.has('limit') ? { limit: positiveIntValue(a, 'limit', Infinity) } : {}),
    batchTokens: numberValue(a, 'batch-tokens', 4096),
    splitSeed: numberValue(a, 'split-seed', 0),
    ...(a.values.has('gen-concurrency') ? { genConcurrency: genConcurrencyValue(a) } : {}),
  };
}
