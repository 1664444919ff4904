/**
 * `s3 eval --shard i/n`: this shard's token-balanced share of the (configuration × task) items, run as usual and
 * written to results/<name>/shards/s3-eval/shard-<i>-of-<n>/rows-<bench>.jsonl; `safekeep merge` joins the rows
 * in the single-process order and writes the tables and trajectories exactly as one process does (as `guard eval`
 * does, src/guard/shard.ts, through util/shard-rows.ts).
 * Token cost of an item is ESTIMATED from characters (≈ 4 per token: endpoints give us no tokenizer): one agent
 * turn (the request with its tool specs, plus the turn's budget), and for guarded configurations the guard's copies
 * of the request — the guard agent's call and one per LLM-checked skill — each with the same prompt. The loop's
 * later turns scale every item alike, so they do not change the balance.
 */
import { join } from 'node:path';
import type { S3Run } from '../../analysis/results.ts';
import type { InjecAgentSetting } from '../../data/injecagent.ts';
import type { ShardEntry } from '../../util/shard-run.ts';
import { mergeShardRows, runShardRows } from '../../util/shard-rows.ts';
import type { Shard } from '../../util/shard.ts';
import { s3Tasks, type S3Bench } from '../bench/s3-tasks.ts';
import { runS3Items, summarizeS3, type S3EvalOptions, type S3Item, type S3Summary, type ScoredTrajectory } from './eval.ts';
import { writeS3Tables, type S3Files } from './table.ts';
import type { S3Task } from './task.ts';

/** What merge needs to rebuild the tasks and write the tables (equal across shards). */
export interface S3MergeOptions {
  bench: S3Bench;
  dirs: { injecagent?: string; agentharm?: string };
  settings: InjecAgentSetting[];
  /** per-group task limit; null = all */
  limit: number | null;
  /** configuration names, in --configs order */
  configs: string[];
  /** the run's name (results/<name>) and the tables' folder (results/<name>/s3) */
  name: string;
  out: string;
  maxTokens: number;
  /** writeS3Tables' meta */
  meta: Record<string, unknown>;
  /** the report's S³ section without its rows, and the results shell when the model has no results.json */
  run: Omit<S3Run, 'configs'>;
  shell: { layers: number; dModel: number; synthetic: boolean; note: string };
}

function loadS3Tasks(m: Pick<S3MergeOptions, 'bench' | 'dirs' | 'settings' | 'limit'>): S3Task[] {
  return s3Tasks(m.bench, m.dirs, m.limit ?? Infinity, m.settings);
}

/** Estimated tokens of an item (see the file comment). */
export function itemTokens(it: S3Item, maxTokens: number): number {
  const prompt = Math.ceil(JSON.stringify({ messages: it.task.messages, tools: it.task.tools }).length / 4);
  const guard = it.config.config;
  const guardCalls = guard ? (guard.guardDecision ? 1 : 0) + guard.skills.filter((s) => s.check === 'llm').length : 0;
  return (prompt + maxTokens) + guardCalls * prompt;
}

const rowsFile = (bench: S3Bench): string => `rows-${bench}.jsonl`;
const itemKey = (config: string, taskId: string): string => `${config} × ${taskId}`;

export function runS3Shard(items: readonly S3Item[], opts: S3EvalOptions, shard: Shard, m: S3MergeOptions,
  identity: Record<string, string>): Promise<{ dir: string; items: number; tokens: number; seconds: number }> {
  return runShardRows({
    resultsDir: join(m.out, '..'), command: 's3-eval', shard, identity, options: { ...m }, file: rowsFile(m.bench),
    items, cost: (it) => itemTokens(it, m.maxTokens),
    run: (mine, progress) => runS3Items(mine, { ...opts, onProgress: (done, total) => { opts.onProgress?.(done, total); progress(done); } }),
  });
}

/** Joins the shards' rows (each item exactly once, in the one-process order) and writes the tables and trajectories. */
export function finishS3Eval(m: S3MergeOptions, shards: readonly ShardEntry[]): { rows: ScoredTrajectory[]; summaries: S3Summary[]; files: S3Files } {
  const tasks = loadS3Tasks(m);
  const expected = m.configs.flatMap((c) => tasks.map((t) => itemKey(c, t.id)));
  const rows = mergeShardRows<ScoredTrajectory>(shards, rowsFile(m.bench), (r) => itemKey(r.config, r.taskId), expected);
  const summaries = summarizeS3(rows, m.configs);
  return { rows, summaries, files: writeS3Tables(m.out, m.bench, m.name, summaries, rows, m.meta) };
}
