/**
 * A harness task run as one shard (`--shard i/n`): the shard's token-balanced share of the items through the same
 * runner as one process (src/harness/runner.ts), its log lines into its shard folder; merge joins every shard's lines in
 * the single-process item order (util/shard-rows.ts checks: each item exactly once, none missing, none extra).
 */
import type { ShardEntry } from '../util/shard-run.ts';
import { mergeShardRows, runShardRows } from '../util/shard-rows.ts';
import type { Shard } from '../util/shard.ts';
import type { SampleLog } from './log.ts';
import { runTask, type Task } from './runner.ts';

export interface ShardTaskOptions<I, R, S> {
  /** results/<name>: the shard folder is results/<name>/shards/<command>/shard-<i>-of-<n>/ */
  resultsDir: string;
  command: string;
  shard: Shard;
  identity: Record<string, string>;
  /** what merge needs to finish the command (its registry entry reads it back) */
  options: Record<string, unknown>;
  /** the shard's log lines, e.g. samples-agentharm.jsonl */
  file: string;
  task: Task<I, R, S>;
  /** every item, in the single-process order */
  items: readonly I[];
  cost: (item: I) => number;
  concurrency?: number;
  onProgress?: (done: number, total: number) => void;
}

/** One SampleLog per item: items holding several samples are joined back by their first sample's id. */
export function runShardTask<I, R, S>(o: ShardTaskOptions<I, R, S>): Promise<{ dir: string; items: number; tokens: number; seconds: number }> {
  return runShardRows<I, SampleLog<S>>({
    resultsDir: o.resultsDir, command: o.command, shard: o.shard, identity: o.identity, options: o.options, file: o.file, items: o.items, cost: o.cost,
    run: async (mine, progress) => (await runTask(o.task, mine, {
      concurrency: o.concurrency, onProgress: (done, total) => { o.onProgress?.(done, total); progress(done); },
    })).samples,
  });
}

/** Every shard's log lines, in the order of `expected` (sample ids). */
export function mergeShardSamples<R>(shards: readonly ShardEntry[], file: string, expected: readonly string[]): SampleLog<R>[] {
  return mergeShardRows<SampleLog<R>>(shards, file, (s) => s.id, expected);
}
