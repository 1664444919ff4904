/**
 * `safekeep merge RESULTS_DIR [--command C]` (results/<model>): joins the part files of every sharded command found
 * under RESULTS_DIR/shards/ (extract, reproduce, steer, guard-eval, s3-eval; in that order; or only C) into the files one process writes —
 * caches byte-identical — then runs what the command runs after its work items (reproduce: analyses, tables,
 * figures, report; s3-eval: tables, trajectories, figure, the report's S³ section). Refuses, naming them, missing/unfinished or duplicate shards and shards from a different
 * model/template/data/options. Idempotent: merging again reuses the assembled caches.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { completeShardSet, shardCommands } from '../../util/shard-run.ts';
import { finishSteer, type SteerMergeOptions } from '../../experiments/steer.ts';
import { finishGuardEval, type GuardMergeOptions } from '../../guard/shard.ts';
import { finishS3Eval, type S3MergeOptions } from '../../guard/s3/shard.ts';
import { writeS3ReportOf } from '../../report/s3-section.ts';
import { writeJsonAtomic } from '../../util/atomic.ts';
import { mergedFile } from '../../cluster/status.ts';
import { mergeReproduce, mergeShardCaches, type CacheMerge } from '../../experiments/merge.ts';
import { summarizeResults } from '../../experiments/summary.ts';

export const summary = 'join the part files of sharded runs (--shard i/n) into one result, then analyses and report';

/** Merge order: a later stage may read what an earlier one assembled. */
const MERGE_ORDER = ['extract', 'reproduce', 'steer', 'guard-eval', 's3-eval'] as const;

function describe(command: string, m: CacheMerge, seconds: number): string {
  const built = m.passes.filter((p) => !p.cached).map((p) => p.names.join('+'));
  const cached = m.passes.filter((p) => p.cached).length;
  return `${command}: ${m.shards.length} shards → ${built.length} caches assembled${built.length ? ` (${built.join(', ')})` : ''}${cached ? `, ${cached} already complete` : ''} in ${m.seconds.toFixed(2)} s; total ${seconds.toFixed(2)} s`;
}

export const flags: FlagTable = {
  usage: `merge RESULTS_DIR [--command ${MERGE_ORDER.join('|')}]`,
  flags: [{ name: 'command', value: 'C', default: 'every sharded command found, in pipeline order', help: 'merge only this command\'s shards' }],
  example: 'merge results/planted',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  if (a.positionals.length !== 1) throw new SafekeepError(`usage: safekeep merge RESULTS_DIR [--command ${MERGE_ORDER.join('|')}] (RESULTS_DIR: the results/<model> folder the shards wrote into)`);
  const only = a.values.get('command');
  if (only !== undefined && !(MERGE_ORDER as readonly string[]).includes(only)) throw new SafekeepError(`--command: one of ${MERGE_ORDER.join(', ')}, got '${only}'`);
  const dir = resolve(a.positionals[0]!);
  if (!existsSync(dir)) throw new SafekeepError(`${dir}: no such results folder`);
  const found = shardCommands(dir);
  const unknown = found.filter((c) => !(MERGE_ORDER as readonly string[]).includes(c));
  if (unknown.length) throw new SafekeepError(`${dir}/shards: unknown sharded commands ${unknown.join(', ')}`);
  if (found.length === 0) throw new SafekeepError(`${dir}: no shards to merge (nothing under ${dir}/shards/)`);
  if (only !== undefined && !found.includes(only)) throw new SafekeepError(`${dir}: no ${only} shards to merge (found: ${found.join(', ')})`);
  for (const command of MERGE_ORDER.filter((c) => (only ?? c) === c && found.includes(c))) {
    const t0 = performance.now();
    const done = (assembly?: number): void => writeJsonAtomic(mergedFile(dir, command), { at: new Date().toISOString(), seconds: (performance.now() - t0) / 1000, ...(assembly !== undefined ? { assemblySeconds: assembly } : {}) });
    if (command === 'reproduce') {
      const m = await mergeReproduce(dir);
      done(m.seconds);
      process.stdout.write(`${describe(command, m, (performance.now() - t0) / 1000)}\n${summarizeResults(m.report.results)}\nreport: ${m.report.files.html}\n`);
    } else if (command === 'extract') {
      const m = mergeShardCaches(dir, command);
      done(m.seconds);
      process.stdout.write(`${describe(command, m, (performance.now() - t0) / 1000)}\n`);
    } else if (command === 'steer') {
      const shards = completeShardSet(dir, command);
      const r = await finishSteer(dir, shards[0]!.record!.options as unknown as SteerMergeOptions, shards);
      done();
      process.stdout.write(`steer: ${shards.length} shards → ${r.sweeps.reduce((n, s) => n + s.rows.length, 0)} (requests, condition) generation files in ${((performance.now() - t0) / 1000).toFixed(2)} s\nTable 3: ${r.outDir}/table3.md\nreport: ${r.report}\n`);
    } else if (command === 's3-eval') {
      const shards = completeShardSet(dir, command);
      const m = shards[0]!.record!.options as unknown as S3MergeOptions;
      const r = finishS3Eval(m, shards);
      const rep = await writeS3ReportOf(m, r.summaries);
      done();
      process.stdout.write(`s3-eval: ${shards.length} shards → ${r.files.markdown}, ${r.files.trajectories} in ${((performance.now() - t0) / 1000).toFixed(2)} s\nreport: ${rep.html}\n`);
    } else {
      const shards = completeShardSet(dir, command);
      const r = finishGuardEval(shards[0]!.record!.options as unknown as GuardMergeOptions, shards);
      done();
      process.stdout.write(`guard-eval: ${shards.length} shards → ${r.files.markdown} in ${((performance.now() - t0) / 1000).toFixed(2)} s\n`);
    }
  }
  return 0;
}
