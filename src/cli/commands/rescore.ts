/**
 * `safekeep rescore LOGDIR [--scorer substring] [--out DIR]`: Table 4 again from the per-sample logs of a
 * `guard eval` run (LOGDIR: its results/<name>/guard folder, or one log-<bench>.jsonl), no model needed — every logged
 * reply scored anew, the tables written into DIR (default LOGDIR/rescored/) exactly as `guard eval` writes them.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { choiceValue, parseArgs, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { RESCORERS, rescoreGuardLog, type Rescorer } from '../../eval/table4/rescore.ts';

export const summary = 'Table 4 again from a guard eval run\'s per-sample logs, with no model (a changed scorer is a rescoring)';

export const flags: FlagTable = {
  usage: 'rescore LOGDIR [--scorer substring] [--out DIR]',
  flags: [
    { name: 'scorer', value: RESCORERS.join('|'), default: 'substring', help: 'refusal / outcome scorer: the outcome classifier\'s substring list with the refusal-prefix rule' },
    { name: 'out', value: 'DIR', default: 'LOGDIR/rescored', help: 'where the rescored tables and log go' },
  ],
  example: 'rescore results/planted/guard',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  if (a.positionals.length !== 1) throw new SafekeepError('usage: safekeep rescore LOGDIR [--scorer substring] [--out DIR]');
  const where = resolve(a.positionals[0]!);
  if (!existsSync(where)) throw new SafekeepError(`${where}: no such folder or log`);
  const logs = statSync(where).isDirectory()
    ? readdirSync(where).filter((f) => /^log-(agentharm|injecagent)\.jsonl$/.test(f)).map((f) => join(where, f))
    : [where];
  if (logs.length === 0) throw new SafekeepError(`${where}: no guard eval logs (log-agentharm.jsonl, log-injecagent.jsonl)`);
  const scorer = choiceValue<Rescorer>(a, 'scorer', RESCORERS, 'substring');
  const out = resolve(a.values.get('out') ?? join(statSync(where).isDirectory() ? where : dirname(where), 'rescored'));
  for (const log of logs) {
    const r = rescoreGuardLog(log, out, scorer);
    process.stdout.write(readFileSync(r.files.markdown, 'utf8'));
    process.stdout.write(`\nrescored ${r.rows.length} samples of ${log} (${scorer}) → ${r.files.markdown}\n`);
  }
  return 0;
}
