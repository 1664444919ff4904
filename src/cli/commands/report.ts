/**
 * `safekeep report --results results.json --out DIR`: tables (md/csv/json), figures (svg/png) and a
 * self-contained report.html from an AnalysisResults file (as written by `safekeep reproduce` / writeReport).
 */
import { parseArgs, requireValue, type FlagTable } from '../args.ts';
import { readResults } from '../../report/results-file.ts';
import { summaryLines } from '../../report/summary.ts';
import { writeReport } from '../../report/write-report.ts';

export const summary = 'write tables, figures and report.html from an AnalysisResults JSON file';

export const flags: FlagTable = {
  usage: 'report --results results.json --out DIR',
  flags: [
    { name: 'results', value: 'FILE', help: 'an AnalysisResults JSON file (results.json)' },
    { name: 'out', value: 'DIR', help: 'output folder' },
  ],
  example: 'report --results results/planted/results.json --out /tmp/report',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const file = requireValue(args, 'results');
  const out = requireValue(args, 'out');
  const res = readResults(file);
  const t0 = Date.now();
  const files = await writeReport(out, res, { log: (l) => process.stderr.write(`report: ${l}\n`) });
  process.stdout.write(
    `${files.tables.length / 3} tables, ${files.figures.length / 2} figures; report at ${files.html} and ${files.markdown} (${((Date.now() - t0) / 1000).toFixed(1)} s)\n` +
      summaryLines(res).join('\n') +
      '\n',
  );
  return 0;
}
