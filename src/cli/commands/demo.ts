/**
 * `safekeep demo [--out DIR] [--results DIR] [--quick]`: the offline example. Writes the planted SYNTHETIC model
 * (known refusal direction) and runs `reproduce` on it: tables, figures and report.html under results/planted/.
 */
import { join } from 'node:path';
import { parseArgs, type FlagTable } from '../args.ts';
import { writePlantedModel } from '../../experiments/planted.ts';
import { loadSae } from '../../sae/load.ts';
import { reproduce } from '../../experiments/reproduce.ts';
import { summarizeResults } from '../../experiments/summary.ts';
import { loadPairSet } from '../../data/load.ts';
import { dataDirsEnv } from '../env.ts';

export const summary = 'offline demo: planted synthetic model → reproduce → report (no downloads)';

export const flags: FlagTable = {
  usage: 'demo [--out DIR] [--results DIR] [--quick]',
  flags: [
    { name: 'out', value: 'DIR', default: 'models/planted', help: 'where to write the planted model' },
    { name: 'results', value: 'DIR', default: 'results', help: 'results root' },
    { name: 'quick', boolean: true, help: 'the 30-pair quick run' },
  ],
  example: 'demo --quick',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  const out = a.values.get('out') ?? join('models', 'planted');
  const pairs = await loadPairSet('pairs', dataDirsEnv());
  const truth = await writePlantedModel(out, { lexiconPairs: pairs.pairs, sae: true });
  process.stderr.write(`demo: planted SYNTHETIC model in ${out} (r planted at layers ${truth.plantedLayers.join(', ')}), its dictionary in ${join(out, 'sae')}\n`);
  // with the planted dictionary, so the report's SAE section shows the planted features (planted-sae.ts)
  const sae = { sae: loadSae(join(out, 'sae')), source: join(out, 'sae') };
  const r = await reproduce({ model: out, data: 'pairs', results: a.values.get('results') ?? 'results', quick: a.booleans.has('quick'), sae });
  process.stdout.write(`${summarizeResults(r.results)}\nreport: ${r.files.html}\n`);
  return 0;
}
