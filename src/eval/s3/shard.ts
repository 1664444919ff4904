/**
 * The S³ evaluation's stage on the shared evaluation stage (src/eval/shard-stage.ts): `s3 eval --shard i/n` runs this
 * shard's token-balanced share of the (configuration × task) items; `safekeep merge` joins them in the
 * single-process order and writes the log, tables and trajectories exactly as one process does.
 * Token cost of an item is ESTIMATED from characters (≈ 4 per token: endpoints give us no tokenizer): one agent
 * turn (the request with its tool specs, plus the turn's budget), and for guarded configurations the guard's copies
 * of the request — the guard agent's call and one per LLM-checked skill — each with the same prompt. The loop's
 * later turns scale every item alike, so they do not change the balance.
 */
import type { S3Run } from '../../analysis/results.ts';
import type { InjecAgentSetting } from '../../data/injecagent.ts';
import { sampleId, type SampleLog } from '../../harness/log.ts';
import { evalStage } from '../shard-stage.ts';
import type { Shard } from '../../util/shard.ts';
import { s3Tasks, type S3Bench } from './tasks.ts';
import { s3Task, summarizeS3, type S3EvalOptions, type S3Item, type S3Summary, type ScoredTrajectory } from './eval.ts';
import { writeS3Tables, type S3Files } from './table.ts';
import type { S3Task } from './task.ts';

/** What merge needs to rebuild the tasks and write the tables (equal across shards). */
export interface S3MergeOptions {
  bench: S3Bench;
  dirs: { injecagent?: string; agentharm?: string; multistage?: string };
  settings: InjecAgentSetting[];
  /** per-group task limit; null = all */
  limit: number | null;
  /** configuration names, in --configs order */
  configs: string[];
  /** the run's name (results/<name>) and the tables' folder (results/<name>/s3) */
  name: string;
  out: string;
  /** where results.json, report.html and the shards go: results/<name>, or `--out DIR` itself */
  resultsDir: string;
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
  // a memory-stage skill runs only for a task with a memory store
  const runs = (s: { stage: string; check: string }) => s.check === 'llm' && (s.stage !== 'memory' || it.task.memory !== undefined);
  const guardCalls = guard ? (guard.guardDecision ? 1 : 0) + guard.skills.filter(runs).length : 0;
  return (prompt + maxTokens) + guardCalls * prompt;
}

/** The S³ run's shards go to <resultsDir>/shards/s3-eval/; its log's protocol is the run's meta. */
const stage = evalStage<S3MergeOptions>({ command: 's3-eval', resultsDir: (m) => m.resultsDir, protocol: (m) => m.meta });

/** A shard's log lines (src/harness/shard.ts). */
export const s3SamplesFile = (bench: S3Bench): string => stage.samplesFile(bench);

export function runS3Shard(items: readonly S3Item[], opts: S3EvalOptions, shard: Shard, m: S3MergeOptions,
  identity: Record<string, string>): Promise<{ dir: string; items: number; tokens: number; seconds: number }> {
  return stage.runShard(m, shard, identity, {
    task: s3Task(opts), items, cost: (it) => itemTokens(it, m.maxTokens), concurrency: opts.concurrency, onProgress: opts.onProgress,
  });
}

/** The end of every S³ run (one process or merged shards): the log is written, read back, and the tables computed from it. */
export function writeS3Run(m: S3MergeOptions, samples: readonly SampleLog<ScoredTrajectory>[]): { rows: ScoredTrajectory[]; summaries: S3Summary[]; files: S3Files & { log: string } } {
  const { log, rows } = stage.writeLog(m, samples);
  const summaries = summarizeS3(rows, m.configs);
  return { rows, summaries, files: { ...writeS3Tables(m.out, m.bench, m.name, summaries, rows, m.meta), log } };
}

/** The keys of a run's items in the one-process order (what merge expects from the shards). */
export function s3ExpectedKeys(m: S3MergeOptions): string[] {
  const tasks = loadS3Tasks(m);
  return m.configs.flatMap((c) => tasks.map((t) => sampleId(c, t.id)));
}
