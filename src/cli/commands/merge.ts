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
import { writeJsonAtomic } from '../../util/atomic.ts';
import { mergedFile } from '../../cluster/status.ts';
import { SHARD_STAGES } from '../stage-registry.ts';

export const summary = 'join the part files of sharded runs (--shard i/n) into one result, then analyses and report';

/** Merge order: the registry's (a later stage may read what an earlier one assembled). */
const MERGE_ORDER = SHARD_STAGES.map((s) => s.command);

export const flags: FlagTable = {
  usage: `merge RESULTS_DIR [--command ${MERGE_ORDER.join('|')}]`,
  flags: [{ name: 'command', value: 'C', default: 'every sharded command found, in pipeline order', help: 'merge only this command\'s shards' }],
  example: 'merge results/planted',
};

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  if (a.positionals.length !== 1) throw new SafekeepError(`usage: safekeep merge RESULTS_DIR [--command ${MERGE_ORDER.join('|')}] (RESULTS_DIR: the results/<model> folder the shards wrote into)`);
  const only = a.values.get('command');
  if (only !== undefined && !MERGE_ORDER.includes(only)) throw new SafekeepError(`--command: one of ${MERGE_ORDER.join(', ')}, got '${only}'`);
  const dir = resolve(a.positionals[0]!);
  if (!existsSync(dir)) throw new SafekeepError(`${dir}: no such results folder`);
  const found = shardCommands(dir);
  const unknown = found.filter((c) => !MERGE_ORDER.includes(c));
  if (unknown.length) throw new SafekeepError(`${dir}/shards: unknown sharded commands ${unknown.join(', ')}`);
  if (found.length === 0) throw new SafekeepError(`${dir}: no shards to merge (nothing under ${dir}/shards/)`);
  if (only !== undefined && !found.includes(only)) throw new SafekeepError(`${dir}: no ${only} shards to merge (found: ${found.join(', ')})`);
  for (const stage of SHARD_STAGES.filter((s) => (only ?? s.command) === s.command && found.includes(s.command))) {
    const t0 = performance.now();
    const shards = completeShardSet(dir, stage.command);
    const line = await stage.merge(dir, shards);
    const seconds = (performance.now() - t0) / 1000;
    writeJsonAtomic(mergedFile(dir, stage.command), { at: new Date().toISOString(), seconds });
    process.stdout.write(`${line}\n(${stage.command}: ${shards.length} shards merged in ${seconds.toFixed(2)} s)\n`);
  }
  return 0;
}
