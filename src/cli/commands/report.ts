/**
 * `safekeep report --results results.json --out DIR [--sae SAE]`: tables (md/csv/json), figures (svg/png) and a
 * self-contained report.html from an AnalysisResults file (as written by `safekeep reproduce` / writeReport).
 * `--sae`: the SAE features section computed from the run's folder (directions.safetensors and cache/ next to
 * results.json), without the model; prompts are named by their keys (no texts: the pair set is not read).
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { numberValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { DIRECTIONS_FILE, readDirectionsFile } from '../../experiments/directions-file.ts';
import { saeFeaturesSection } from '../../experiments/sae-features.ts';
import { SafekeepError } from '../../util/errors.ts';
import { SAE_FLAG_DEFS, openSae } from '../sae-flags.ts';
import { readResults } from '../../report/results-file.ts';
import { summaryLines } from '../../report/summary.ts';
import { writeReport } from '../../report/write-report.ts';

export const summary = 'write tables, figures and report.html from an AnalysisResults JSON file';

export const flags: FlagTable = {
  usage: 'report --results results.json --out DIR [--sae SAE]',
  flags: [
    { name: 'results', value: 'FILE', help: 'an AnalysisResults JSON file (results.json)' },
    { name: 'out', value: 'DIR', help: 'output folder' },
    ...SAE_FLAG_DEFS.map((f) => ({ ...f, help: f.name === 'sae' ? `${f.help}: (re)compute the SAE features section from directions.safetensors and cache/ beside results.json` : f.help })),
    { name: 'sae-top', value: 'N', default: '5', help: 'with --sae: features per direction, condition and ranking' },
    { name: 'sae-prompts', value: 'K', default: '3', help: 'with --sae: top-activating prompts per feature' },
  ],
  example: 'report --results results/planted/results.json --out /tmp/report',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const file = requireValue(args, 'results');
  const out = requireValue(args, 'out');
  const res = readResults(file);
  if (saeGiven(args)) res.saeFeatures = await saeFromRunFolder(args, file, res);
  const t0 = Date.now();
  const files = await writeReport(out, res, { log: (l) => process.stderr.write(`report: ${l}\n`) });
  process.stdout.write(
    `${files.tables.length / 3} tables, ${files.figures.length / 2} figures; report at ${files.html} and ${files.markdown} (${((Date.now() - t0) / 1000).toFixed(1)} s)\n` +
      summaryLines(res).join('\n') +
      '\n',
  );
  return 0;
}

/** `--sae` given (its companions without it are refused) */
function saeGiven(args: ReturnType<typeof parseArgs>): boolean {
  if (args.values.has('sae')) return true;
  for (const f of ['hook', 'sae-top', 'sae-prompts']) if (args.values.has(f)) throw new SafekeepError(`--${f} needs --sae`);
  return false;
}

/** The SAE section from the run's folder: its directions file and the caches of Figures 3–4. */
async function saeFromRunFolder(args: ReturnType<typeof parseArgs>, file: string, res: ReturnType<typeof readResults>) {
  const top = numberValue(args, 'sae-top', 5);
  const k = numberValue(args, 'sae-prompts', 3);
  if (!Number.isInteger(top) || top < 1) throw new SafekeepError(`--sae-top must be a positive integer, got ${top}`);
  if (!Number.isInteger(k) || k < 1) throw new SafekeepError(`--sae-prompts must be a positive integer, got ${k}`);
  if (res.dModel <= 0) throw new SafekeepError(`--sae: ${file} has no activations (an endpoint-only results shell)`);
  const sae = await openSae(args);
  const dir = dirname(file);
  const path = join(dir, DIRECTIONS_FILE);
  if (!existsSync(path)) throw new SafekeepError(`--sae: no ${DIRECTIONS_FILE} beside ${file} (the SAE section reads the run's folder: run reproduce, or reproduce --sae)`);
  const { directions } = readDirectionsFile(path);
  return saeFeaturesSection({
    sae, source: args.values.get('sae')!, cacheDir: join(dir, 'cache'), directions: Object.fromEntries(directions), lStar: res.lStar.layer, layers: res.layers, top, k,
  });
}
