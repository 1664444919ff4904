/**
 * `safekeep reproduce --model M [--data pairs|agentharm|PATH] [--quick] [--limit N] [--results DIR]
 *    [--dtype f32|bf16] [--device cpu|cuda] [--template FILE] [--reps N]`
 * extract → analyses → figures → report (Tables 1–2, Figures 3–4) under results/<model>/, reusing caches.
 */
import { numberValue, parseArgs, requireValue } from '../args.ts';
import { reproduce } from '../../experiments/reproduce.ts';
import { resolveModel } from '../../hub/resolve.ts';
import { SafekeepError } from '../../util/errors.ts';
import { summarizeResults } from '../../experiments/summary.ts';

export const summary = 'extract → analyses → figures → report: the paper\'s Tables 1–2 and Figures 3–4';

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, {
    values: ['model', 'data', 'limit', 'results', 'dtype', 'device', 'template', 'batch-tokens', 'reps', 'split-seed'],
    booleans: ['quick'],
  });
  const dtype = a.values.get('dtype') ?? 'f32';
  if (dtype !== 'f32' && dtype !== 'bf16') throw new SafekeepError(`--dtype must be f32 or bf16, got '${dtype}'`);
  const device = a.values.get('device') ?? 'cpu';
  if (device !== 'cpu' && device !== 'cuda') throw new SafekeepError(`--device must be cpu or cuda, got '${device}'`);
  const template = a.values.get('template');
  const r = await reproduce({
    model: await resolveModel(requireValue(a, 'model')),
    data: a.values.get('data') ?? 'pairs',
    results: a.values.get('results') ?? 'results',
    dtype, device,
    ...(template ? { template } : {}),
    ...(a.values.has('limit') ? { limit: numberValue(a, 'limit') } : {}),
    quick: a.booleans.has('quick'),
    batchTokens: numberValue(a, 'batch-tokens', 4096),
    reps: numberValue(a, 'reps', 1000),
    splitSeed: numberValue(a, 'split-seed', 0),
  });
  process.stdout.write(summarizeResults(r.results) + `\nreport: ${r.files.html}\n`);
  return 0;
}
