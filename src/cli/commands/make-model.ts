/**
 * `safekeep make-model planted --out DIR [--seed N] [--vocab-from FOLDER,...] [--lexicon pairs|agentharm|PATH]`
 * Writes the planted synthetic model (src/experiments/planted.ts): a tiny Llama-format checkpoint with a known
 * refusal direction, for the offline demo and end-to-end tests. Clearly synthetic.
 */
import { parseArgs, numberValue, requireValue } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { writePlantedModel } from '../../experiments/planted.ts';
import { loadPairSet } from '../../data/load.ts';

export const summary = 'write the planted synthetic model (known refusal direction) for demos and tests';

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, { values: ['out', 'seed', 'vocab-from', 'lexicon'] });
  const kind = args.positionals[0];
  if (kind !== 'planted') throw new SafekeepError(`make-model: unknown kind '${kind ?? ''}' (supported: planted)`);
  const out = requireValue(args, 'out');
  const vocabFrom = args.values.get('vocab-from');
  const lexicon = await loadPairSet(args.values.get('lexicon') ?? 'pairs');
  const truth = await writePlantedModel(out, {
    seed: numberValue(args, 'seed', 1234),
    lexiconPairs: lexicon.pairs,
    ...(vocabFrom ? { vocabFolders: vocabFrom.split(',') } : {}),
  });
  process.stdout.write(`planted synthetic model written to ${out}: vocab ${truth.vocabSize}, r planted at layers ${truth.plantedLayers.join(',')} (see PLANTED.json)\n`);
  return 0;
}
