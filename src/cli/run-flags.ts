/**
 * Flags shared by the pipeline commands (extract, reproduce, steer): model, data, engine options (ENGINE_FLAGS:
 * --dtype, --device, --threads, --max-memory), template, limit, results folder, batching and split seed →
 * `ContextOptions` of the extraction stage.
 */
import { engineOptions, ENGINE_FLAGS } from '../engine/cli-common.ts';
import type { ContextOptions } from '../experiments/extract.ts';
import { resolveModel } from '../hub/resolve.ts';
import { numberValue, requireValue, type ParsedArgs } from './args.ts';

export const RUN_FLAGS = [...ENGINE_FLAGS, 'data', 'limit', 'results', 'template', 'batch-tokens', 'split-seed'] as const;

export async function runContextOptions(a: ParsedArgs): Promise<ContextOptions> {
  const template = a.values.get('template');
  return {
    model: await resolveModel(requireValue(a, 'model')),
    data: a.values.get('data') ?? 'pairs',
    results: a.values.get('results') ?? 'results',
    engine: engineOptions(a),
    ...(template ? { template } : {}),
    ...(a.values.has('limit') ? { limit: numberValue(a, 'limit') } : {}),
    batchTokens: numberValue(a, 'batch-tokens', 4096),
    splitSeed: numberValue(a, 'split-seed', 0),
  };
}
