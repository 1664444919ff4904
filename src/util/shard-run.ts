/**
 * The on-disk record of a sharded run, the contract between shards, `safekeep merge` and `safekeep slurm status`:
 *
 *   <results>/<model>/shards/<command>/shard-<i>-of-<n>/shard.json   this file (progress, identity, options)
 *   <results>/<model>/shards/<command>/shard-<i>-of-<n>/...           the shard's own part files
 *
 * A shard writes only inside its own folder (every file atomically), so shards never race on a shared filesystem,
 * and a rerun of the same shard resumes from its parts. `identity` holds what must agree across shards for their
 * parts to be joinable (model, template, data, engine, options); merge refuses a set that disagrees, misses a shard,
 * or has two records for one shard, naming them.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { writeJsonAtomic } from './atomic.ts';
import { SafekeepError } from './errors.ts';
import { shardDirName, shardLabel, type Shard } from './shard.ts';

interface ShardRecord {
  format: 'safekeep-shard';
  command: string;
  shard: Shard;
  /** values that must be equal across the shards of one run (hashes and names) */
  identity: Record<string, string>;
  /** what merge needs to finish the run (paths, options); equal across shards */
  options: Record<string, unknown>;
  /** work items and their tokens assigned to this shard */
  items: number;
  tokens: number;
  doneItems: number;
  doneTokens: number;
  state: 'running' | 'done';
  host: string;
  pid: number;
  startedAt: string;
  updatedAt: string;
  /** seconds from start to done (this attempt) */
  seconds?: number;
}

export const shardsRoot = (resultsDir: string, command: string): string => join(resultsDir, 'shards', command);
const shardDir = (resultsDir: string, command: string, s: Shard): string => join(shardsRoot(resultsDir, command), shardDirName(s));

/** Progress of one shard, written to its shard.json (at most once a second, and at the end). */
export class ShardRun {
  readonly dir: string;
  private rec: ShardRecord;
  private lastWrite = 0;
  private readonly t0 = Date.now();

  constructor(resultsDir: string, command: string, shard: Shard, identity: Record<string, string>, options: Record<string, unknown>,
    work: { items: number; tokens: number; doneItems?: number; doneTokens?: number }) {
    this.dir = shardDir(resultsDir, command, shard);
    const now = new Date().toISOString();
    this.rec = {
      format: 'safekeep-shard', command, shard, identity, options, items: work.items, tokens: work.tokens,
      doneItems: work.doneItems ?? 0, doneTokens: work.doneTokens ?? 0, state: 'running', host: hostname(), pid: process.pid, startedAt: now, updatedAt: now,
    };
    this.write();
  }

  /** `items` work items with `tokens` tokens finished */
  add(items: number, tokens: number): void {
    this.rec.doneItems += items;
    this.rec.doneTokens += tokens;
    if (Date.now() - this.lastWrite >= 1000) this.write();
  }

  finish(): ShardRecord {
    this.rec = { ...this.rec, state: 'done', doneItems: this.rec.items, doneTokens: this.rec.tokens, seconds: (Date.now() - this.t0) / 1000 };
    this.write();
    return this.rec;
  }

  private write(): void {
    this.rec.updatedAt = new Date().toISOString();
    writeJsonAtomic(join(this.dir, 'shard.json'), this.rec);
    this.lastWrite = Date.now();
  }
}

export interface ShardEntry {
  /** folder name, e.g. shard-2-of-4 */
  name: string;
  dir: string;
  record: ShardRecord | null;
  /** why the record could not be read */
  error?: string;
}

/** Every shard folder of a command, as found (no checks): for `slurm status`. */
export function listShards(resultsDir: string, command: string): ShardEntry[] {
  const root = shardsRoot(resultsDir, command);
  if (!existsSync(root)) return [];
  return readdirSync(root, { withFileTypes: true }).filter((e) => e.isDirectory() && e.name.startsWith('shard-')).map((e) => {
    const dir = join(root, e.name);
    const path = join(dir, 'shard.json');
    if (!existsSync(path)) return { name: e.name, dir, record: null, error: 'no shard.json (not started)' };
    try {
      const record = JSON.parse(readFileSync(path, 'utf8')) as ShardRecord;
      if (record.format !== 'safekeep-shard') return { name: e.name, dir, record: null, error: 'not a safekeep shard record' };
      return { name: e.name, dir, record };
    } catch (err) {
      return { name: e.name, dir, record: null, error: `unreadable shard.json (${(err as Error).message})` };
    }
  }).sort((a, b) => (a.record?.shard.count ?? 0) - (b.record?.shard.count ?? 0) || (a.record?.shard.index ?? 0) - (b.record?.shard.index ?? 0) || a.name.localeCompare(b.name));
}

/** Commands with shard folders under `<results>/shards/`. */
export function shardCommands(resultsDir: string): string[] {
  const root = join(resultsDir, 'shards');
  if (!existsSync(root)) return [];
  return readdirSync(root, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name).sort();
}

/**
 * The complete, consistent shard set of a command, in shard order — or one SafekeepError naming what is wrong:
 * unreadable records, shards of different partitions (n) or commands, duplicates, shards that disagree on the
 * model/template/data/options, and missing or unfinished shards.
 */
export function completeShardSet(resultsDir: string, command: string): ShardEntry[] {
  const all = listShards(resultsDir, command);
  const where = shardsRoot(resultsDir, command);
  if (all.length === 0) throw new SafekeepError(`${where}: no shards of '${command}' to merge`);
  const bad = all.filter((e) => !e.record);
  if (bad.length) throw new SafekeepError(`${where}: ${bad.map((e) => `${e.name}: ${e.error}`).join('; ')}`);
  const es = all as Array<ShardEntry & { record: ShardRecord }>;
  const counts = new Map<number, string[]>();
  for (const e of es) counts.set(e.record.shard.count, [...(counts.get(e.record.shard.count) ?? []), e.name]);
  if (counts.size > 1) {
    throw new SafekeepError(`${where}: shards of different partitions: ${[...counts].map(([n, names]) => `n=${n} (${names.join(', ')})`).join(' vs ')}; delete the stale ones`);
  }
  for (const e of es) {
    if (e.record.command !== command) throw new SafekeepError(`${e.dir}: a '${e.record.command}' shard among '${command}' shards`);
    if (e.name !== shardDirName(e.record.shard)) throw new SafekeepError(`${e.dir}: folder holds shard ${shardLabel(e.record.shard)} (expected ${shardDirName(e.record.shard)}); duplicate or moved shard`);
  }
  const byIndex = new Map<number, string[]>();
  for (const e of es) byIndex.set(e.record.shard.index, [...(byIndex.get(e.record.shard.index) ?? []), e.name]);
  const dups = [...byIndex].filter(([, names]) => names.length > 1);
  if (dups.length) throw new SafekeepError(`${where}: duplicate shards: ${dups.map(([i, names]) => `${i} (${names.join(', ')})`).join('; ')}`);
  // identity: every key must agree; name the shards that differ from the first shard
  const ref = es[0]!;
  for (const key of new Set(es.flatMap((e) => Object.keys(e.record.identity)))) {
    const differ = es.filter((e) => e.record.identity[key] !== ref.record.identity[key]);
    if (differ.length) {
      throw new SafekeepError(`${where}: shards disagree on ${key}: ${ref.name} has ${ref.record.identity[key] ?? 'none'}, `
        + differ.map((e) => `${e.name} has ${e.record.identity[key] ?? 'none'}`).join(', '));
    }
  }
  const n = ref.record.shard.count;
  const missing: string[] = [];
  for (let i = 0; i < n; i++) {
    const e = es.find((x) => x.record.shard.index === i);
    if (!e) missing.push(`${i}/${n} (not started)`);
    else if (e.record.state !== 'done') missing.push(`${i}/${n} (${e.record.state}: ${e.record.doneItems}/${e.record.items} items, last update ${e.record.updatedAt} on ${e.record.host})`);
  }
  if (missing.length) throw new SafekeepError(`${where}: missing shards: ${missing.join(', ')}`);
  return es.sort((a, b) => a.record.shard.index - b.record.shard.index);
}
