/**
 * Sharding for commands whose work items each yield one JSON row (guard eval's method × case; any evaluation loop):
 * `runShardRows` runs this shard's token-balanced share of the items and writes their rows to its shard folder;
 * `mergeShardRows` reads every shard's rows back, each item exactly once, in the single-process order. Adding
 * `--shard` to such a command is these two calls (see src/eval/table4/shard.ts).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from './atomic.ts';
import { SafekeepError } from './errors.ts';
import { ShardRun, type ShardEntry } from './shard-run.ts';
import { selectShard, type Shard } from './shard.ts';

interface ShardRowsOptions<I, R> {
  /** results/<name>: the shard folder is results/<name>/shards/<command>/shard-<i>-of-<n>/ */
  resultsDir: string;
  command: string;
  shard: Shard;
  /** must agree across shards (model, template, data, options), see util/shard-run.ts */
  identity: Record<string, string>;
  /** what merge needs to finish the command */
  options: Record<string, unknown>;
  /** every work item, in the single-process order */
  items: readonly I[];
  /** tokens of an item (the partition balances these) */
  cost: (item: I) => number;
  /** runs items and returns one row per item, in order; `progress(done)` after each finished item */
  run: (mine: readonly I[], progress: (done: number) => void) => Promise<R[]>;
  /** rows file in the shard folder, e.g. rows-agentharm.jsonl */
  file: string;
}

export async function runShardRows<I, R>(o: ShardRowsOptions<I, R>): Promise<{ dir: string; items: number; tokens: number; seconds: number }> {
  const mine = selectShard(o.items, o.cost, o.shard);
  const costs = mine.map(o.cost);
  const run = new ShardRun(o.resultsDir, o.command, o.shard, o.identity, o.options, { items: mine.length, tokens: costs.reduce((a, b) => a + b, 0) });
  let last = 0;
  const rows = await o.run(mine, (done) => {
    run.add(done - last, costs.slice(last, done).reduce((a, b) => a + b, 0));
    last = done;
  });
  if (rows.length !== mine.length) throw new Error(`${o.command}: ${rows.length} rows for ${mine.length} items`);
  writeFileAtomic(join(run.dir, o.file), rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''));
  const rec = run.finish();
  return { dir: run.dir, items: rec.items, tokens: rec.tokens, seconds: rec.seconds ?? 0 };
}

/**
 * The rows of a complete shard set (util/shard-run.ts `completeShardSet`) in the order of `expected` (item keys):
 * refuses, naming them, an item in two shards, an item in none, and rows for items that are not expected.
 */
export function mergeShardRows<R>(shards: readonly ShardEntry[], file: string, keyOf: (row: R) => string, expected: readonly string[]): R[] {
  const byKey = new Map<string, { row: R; shard: string }>();
  for (const s of shards) {
    const path = join(s.dir, file);
    if (!existsSync(path)) throw new SafekeepError(`${s.dir}: no ${file} (shard ${s.name} did not finish writing)`);
    for (const line of readFileSync(path, 'utf8').split('\n').filter(Boolean)) {
      const row = JSON.parse(line) as R;
      const k = keyOf(row);
      const prev = byKey.get(k);
      if (prev) throw new SafekeepError(`${file}: item ${k} is in both ${prev.shard} and ${s.name} (duplicate shards)`);
      byKey.set(k, { row, shard: s.name });
    }
  }
  const missing = expected.filter((k) => !byKey.has(k));
  if (missing.length) throw new SafekeepError(`${file}: ${missing.length} of ${expected.length} items are in no shard (first: ${missing[0]}); did the data or options change?`);
  if (byKey.size !== expected.length) {
    const want = new Set(expected);
    const extra = [...byKey.keys()].filter((k) => !want.has(k));
    throw new SafekeepError(`${file}: shards hold ${extra.length} items that this run does not have (first: ${extra[0]})`);
  }
  return expected.map((k) => byKey.get(k)!.row);
}
