/**
 * Shards: `--shard i/n` (0-based i, as Slurm's SLURM_ARRAY_TASK_ID with `--array=0-(n-1)` and Kubernetes'
 * JOB_COMPLETION_INDEX count) picks shard i of a deterministic partition of a command's work items.
 *
 * The partition is contiguous in item order and balances COST (tokens), not counts: item k goes to the shard whose
 * cost interval [i·T/n, (i+1)·T/n) holds the midpoint of the item's cost span (T = total cost). Contiguity keeps
 * items that share a prompt prefix (one configuration's rows) together, so each shard's prefix cache stays useful.
 * Any code that loops over work items becomes shardable with one line:
 *     const mine = selectShard(items, (it) => tokensOf(it), shard);
 */
import { SafekeepError } from './errors.ts';

export interface Shard {
  /** 0 ≤ index < count */
  index: number;
  count: number;
}

/** `i/n` → Shard (0-based i). */
export function parseShard(s: string): Shard {
  const m = /^(\d+)\/(\d+)$/.exec(s.trim());
  if (!m) throw new SafekeepError(`--shard must be i/n with 0 ≤ i < n (0-based, e.g. 0/4), got '${s}'`);
  const index = Number(m[1]);
  const count = Number(m[2]);
  if (!(count >= 1) || index >= count) throw new SafekeepError(`--shard ${s}: need 0 ≤ i < n (0-based: the shards of n=4 are 0/4 … 3/4)`);
  return { index, count };
}

export const shardLabel = (s: Shard): string => `${s.index}/${s.count}`;
/** Folder name of a shard's part files: `shard-<i>-of-<n>`. */
export const shardDirName = (s: Shard): string => `shard-${s.index}-of-${s.count}`;

/**
 * The shard of each item: contiguous, balanced by cost. [item] → shard index.
 * Zero-cost items follow their neighbours; every cost must be finite and ≥ 0.
 */
export function partitionByCost(costs: readonly number[], count: number): number[] {
  if (!(Number.isInteger(count) && count >= 1)) throw new Error(`partitionByCost: count ${count}`);
  let total = 0;
  for (const c of costs) {
    if (!(Number.isFinite(c) && c >= 0)) throw new Error(`partitionByCost: cost ${c}`);
    total += c;
  }
  if (total === 0) return costs.map((_, k) => Math.min(count - 1, Math.floor((k * count) / Math.max(1, costs.length))));
  const out: number[] = [];
  let before = 0;
  for (const c of costs) {
    const mid = before + c / 2;
    out.push(Math.min(count - 1, Math.floor((mid * count) / total)));
    before += c;
  }
  return out;
}

/** The items of `shard` (in item order); `null` shard = all items. */
export function selectShard<T>(items: readonly T[], cost: (item: T, k: number) => number, shard: Shard | null): T[] {
  if (!shard) return [...items];
  const owner = partitionByCost(items.map(cost), shard.count);
  return items.filter((_, k) => owner[k] === shard.index);
}
