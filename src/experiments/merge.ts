/**
 * `safekeep merge` for the extraction stages: check the shard set (util/shard-run.ts), assemble the caches from the
 * shards' parts (cache/merge.ts, byte-identical to one process), and for `reproduce` run analyses and report.
 */
import { join } from 'node:path';
import { mergeCacheParts, type MergedPass } from '../cache/merge.ts';
import type { ShardEntry } from '../util/shard-run.ts';
import { finishReproduce, type ReproduceMergeOptions, type ReproduceResult } from './reproduce.ts';

export interface CacheMerge {
  shards: ShardEntry[];
  passes: MergedPass[];
  /** seconds spent checking the shard set and assembling the caches */
  seconds: number;
}

/** Assembles the caches of a complete shard set (extract, reproduce, the extraction stage of steer) into `<results>/cache`. */
export function mergeShardCaches(resultsDir: string, shards: ShardEntry[]): CacheMerge {
  const t0 = performance.now();
  const passes = mergeCacheParts(join(resultsDir, 'cache'), shards.map((e) => ({ name: e.name, dir: join(e.dir, 'cache') })));
  return { shards, passes, seconds: (performance.now() - t0) / 1000 };
}

/** A sharded `reproduce`: caches, then analyses, tables, figures and report as one process would write them. */
export async function mergeReproduce(resultsDir: string, shards: ShardEntry[], options: ReproduceMergeOptions): Promise<CacheMerge & { report: ReproduceResult }> {
  const m = mergeShardCaches(resultsDir, shards);
  const report = await finishReproduce(resultsDir, options);
  return { ...m, report };
}
