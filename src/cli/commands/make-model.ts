/**
 * `safekeep make-model planted --out DIR [--seed N] [--vocab-from FOLDER,...] [--lexicon pairs|agentharm|PATH]`
 * Writes the planted synthetic model (src/experiments/planted.ts): a tiny Llama-format checkpoint with a known
 * refusal direction, for the offline demo and end-to-end tests. Clearly synthetic.
 */
import { parseArgs, numberValue, requireValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { writePlantedModel } from '../../experiments/planted.ts';
import { loadPairSet } from '../../data/load.ts';
import { dataDirsEnv } from '../env.ts';

export const summary = 'write the planted synthetic model (known refusal direction) for demos and tests';

export const flags: FlagTable = {
  usage: 'make-model planted --out DIR [--seed N] [--vocab-from FOLDER,...] [--lexicon pairs|agentharm|PATH] [--sae]',
  positionals: 'the kind of model (planted)',
  flags: [
    { name: 'out', value: 'DIR', help: 'output checkpoint folder' },
    { name: 'seed', value: 'N', default: '1234', help: 'weight seed' },
    { name: 'vocab-from', value: 'FOLDER,...', help: 'borrow tokenizer vocabularies from these model folders' },
    { name: 'lexicon', value: 'pairs|agentharm|PATH', default: 'pairs', help: 'pair set whose words the model reacts to' },
    { name: 'sae', boolean: true, help: "also write the planted dictionary into DIR/sae (a SAELens folder whose features include r and the Schema Direction's parts; src/experiments/planted-sae.ts)" },
  ],
  example: 'make-model planted --out models/planted',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const kind = args.positionals[0];
  if (kind !== 'planted') throw new SafekeepError(`make-model: unknown kind '${kind ?? ''}' (supported: planted)`);
  const out = requireValue(args, 'out');
  const vocabFrom = args.values.get('vocab-from');
  const lexicon = await loadPairSet(args.values.get('lexicon') ?? 'pairs', dataDirsEnv());
  const truth = await writePlantedModel(out, {
    seed: numberValue(args, 'seed', 1234),
    lexiconPairs: lexicon.pairs,
    ...(vocabFrom ? { vocabFolders: vocabFrom.split(',') } : {}),
    sae: args.booleans.has('sae'),
  });
  process.stdout.write(`planted synthetic model written to ${out}: vocab ${truth.vocabSize}, r planted at layers ${truth.plantedLayers.join(',')} (see PLANTED.json)${args.booleans.has('sae') ? `; its dictionary in ${out}/sae` : ''}\n`);
  return 0;
}
