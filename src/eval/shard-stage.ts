/**
 * The sharded stage of an evaluation on the harness (`guard eval --shard i/n`, `s3 eval --shard i/n`), written once:
 * a shard runs its token-balanced share of the items and writes their log lines to
 * results/<name>/shards/<command>/shard-<i>-of-<n>/samples-<bench>.jsonl; `safekeep merge` joins every shard's lines
 * in the one-process order (cli/stage-registry.ts) and the run ends as one process ends it — the per-sample log
 * written beside the tables, read back, its samples page written, and the tables computed from what the log holds
 * (so a rescoring reproduces them), and the Inspect log of the run (harness/inspect-log.ts). What differs per evaluation (items, cost, keys, tables) stays in its own stage.
 */
import { join } from 'node:path';
import { readEvalLog, writeEvalLog, type SampleLog } from '../harness/log.ts';
import { runShardTask } from '../harness/shard.ts';
import { writeInspectLog } from '../harness/inspect-log.ts';
import type { Task } from '../harness/runner.ts';
import { writeSamplesPage } from '../report/samples-page.ts';
import type { Shard } from '../util/shard.ts';

/** What every stage's merge options hold: the bench and the tables' folder (the rest is the stage's own). */
export interface StageRun {
  bench: string;
  out: string;
  /** what the tables record of the run; its `backend` names the model in the Inspect log */
  meta?: Record<string, unknown>;
}

export interface EvalStageDef<M extends StageRun> {
  /** the shard folder (results/<name>/shards/<command>/) and the log's task (<command>/<bench>) */
  command: string;
  /** results/<name>: where the shards go */
  resultsDir(m: M): string;
  /** the protocol the log's header names */
  protocol(m: M): Record<string, unknown>;
}

/** One shard's work: the harness task, every item in the one-process order, and each item's estimated tokens. */
export interface ShardWork<I, R, S> {
  task: Task<I, R, S>;
  items: readonly I[];
  cost: (item: I) => number;
  concurrency?: number;
  onProgress?: (done: number, total: number) => void;
}

export interface EvalStage<M extends StageRun> {
  command: string;
  /** a shard's log lines (src/harness/shard.ts) */
  samplesFile(bench: string): string;
  /** the per-sample log of a run, beside its tables */
  logFile(out: string, bench: string): string;
  runShard<I, R, S>(m: M, shard: Shard, identity: Record<string, string>, work: ShardWork<I, R, S>): Promise<{ dir: string; items: number; tokens: number; seconds: number }>;
  /** the end of every run (one process or merged shards): the log written, read back, its samples page; its rows */
  writeLog<S>(m: M, samples: readonly SampleLog<S>[]): { log: string; rows: S[] };
}

export function evalStage<M extends StageRun>(def: EvalStageDef<M>): EvalStage<M> {
  const samplesFile = (bench: string): string => `samples-${bench}.jsonl`;
  const logFile = (out: string, bench: string): string => join(out, `log-${bench}.jsonl`);
  // every field of the run's options, as the shard record and the log header keep them
  const fields = (m: M): Record<string, unknown> => ({ ...(m as StageRun) });
  return {
    command: def.command,
    samplesFile,
    logFile,
    runShard: (m, shard, identity, w) => runShardTask({
      resultsDir: def.resultsDir(m), command: def.command, shard, identity, options: fields(m), file: samplesFile(m.bench),
      task: w.task, items: w.items, cost: w.cost, concurrency: w.concurrency, onProgress: w.onProgress,
    }),
    writeLog: <S>(m: M, samples: readonly SampleLog<S>[]) => {
      const log = logFile(m.out, m.bench);
      writeEvalLog(log, { header: { format: 'safekeep-log', task: `${def.command}/${m.bench}`, protocol: def.protocol(m), context: fields(m) }, samples: [...samples] });
      const read = readEvalLog<S>(log);
      writeSamplesPage(log.replace(/log-([^/]+)\.jsonl$/, 'samples-$1.html'), read);
      // the same run as an Inspect log, for `inspect view` (results/<name>/inspect/<command>-<bench>.json)
      const model = m.meta?.backend;
      writeInspectLog(def.resultsDir(m), read, { model: typeof model === 'string' ? model : 'unknown', dataset: m.bench, args: fields(m) });
      return { log, rows: read.samples.map((s) => s.row) };
    },
  };
}
