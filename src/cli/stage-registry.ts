/**
 * Every sharded stage as one registry entry: what its shards record, how `safekeep merge` finishes it and how
 * `safekeep slurm` submits it. `merge` and `slurm` loop over `SHARD_STAGES`; a new shardable evaluation is one more
 * entry here, never another branch in either command.
 *
 * An entry's `options` reads back, and checks, what its shards recorded (`ShardRun`'s options): a record that lacks a
 * field the stage needs is refused with the field named, instead of being trusted by a cast. Row stages (the
 * evaluations on the harness) also name their work items, cost and key: merge rebuilds the items from the options
 * and takes each item's log line from exactly one shard.
 */
import { basename, join } from 'node:path';
import { existsSync } from 'node:fs';
import type { Stage } from '../cluster/slurm.ts';
import { mergeReproduce, mergeShardCaches, type CacheMerge } from '../experiments/merge.ts';
import type { ReproduceMergeOptions } from '../experiments/reproduce.ts';
import { finishSteer } from '../experiments/steer/merge.ts';
import type { SteerMergeOptions } from '../experiments/steer/shard.ts';
import { summarizeResults } from '../experiments/summary.ts';
import type { EvalRow } from '../eval/table4/eval.ts';
import type { ScoredTrajectory } from '../eval/s3/eval.ts';
import { s3ExpectedKeys, s3SamplesFile, writeS3Run, type S3MergeOptions } from '../eval/s3/shard.ts';
import { guardExpectedKeys, guardSamplesFile, writeGuardRun, type GuardMergeOptions } from '../eval/table4/shard.ts';
import { writeS3ReportOf } from '../report/s3-section.ts';
import { s3ReportRows } from '../eval/s3/table.ts';
import { SafekeepError } from '../util/errors.ts';
import type { ShardEntry } from '../util/shard-run.ts';
import type { SampleLog } from '../harness/log.ts';
import { mergeShardSamples } from '../harness/shard.ts';

/** What `safekeep slurm <command>` was asked for. */
export interface SlurmRequest {
  modelDir: string;
  /** the results root (results/) and this run's folder in it (results/<name>) */
  resultsRoot: string;
  resultsDir: string;
  /** the pipeline flags (cli/run-flags.ts) that steer's extraction stage takes from the passthrough */
  runFlags: readonly string[];
  /** flags after `--`, for every task */
  passthrough: string[];
  shards: number;
  /** resubmit only these tasks of the first array */
  only?: number[];
}

export interface ShardStage<M> {
  command: string;
  /** what a shard of this stage records, read back and checked */
  options(raw: Record<string, unknown>, resultsDir: string): M;
  /** merge: assemble the shards' parts into what one process writes, then what the command runs after its items */
  finish(resultsDir: string, m: M, shards: ShardEntry[]): Promise<string>;
  /** slurm: the results folder's name (results/<name>) */
  resultsName(modelDir: string, passthrough: readonly string[]): string;
  /** flags `safekeep slurm` sets itself for this stage (refused after `--`) */
  owned: readonly string[];
  /** slurm: the job arrays and merge jobs, in submission order */
  slurm(r: SlurmRequest): Stage[];
}

/** A stage with its types closed over: what `merge` and `slurm` loop over. */
export interface RegisteredStage {
  command: string;
  merge(resultsDir: string, shards: ShardEntry[]): Promise<string>;
  resultsName(modelDir: string, passthrough: readonly string[]): string;
  owned: readonly string[];
  slurm(r: SlurmRequest): Stage[];
}

function register<M>(s: ShardStage<M>): RegisteredStage {
  return {
    command: s.command,
    merge: (dir, shards) => s.finish(dir, s.options(shards[0]!.record!.options, dir), shards),
    resultsName: s.resultsName, owned: s.owned, slurm: s.slurm,
  };
}

/** `raw` has every key of `keys` (a shard record of this stage): a type guard, so no cast trusts it. */
function hasKeys<M>(raw: Record<string, unknown>, keys: readonly (keyof M & string)[]): raw is Record<string, unknown> & M {
  return keys.every((k) => k in raw);
}

function checked<M>(command: string, raw: Record<string, unknown>, keys: readonly (keyof M & string)[]): M {
  if (hasKeys<M>(raw, keys)) return raw;
  throw new SafekeepError(`${command} shards: the shard record lacks ${keys.filter((k) => !(k in raw)).join(', ')} (written by another safekeep version? rerun the shards)`);
}

/** `--name v` or `--name=v` in a flag list */
export function flagValue(argv: readonly string[], flag: string): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === flag) return argv[i + 1];
    if (argv[i]!.startsWith(`${flag}=`)) return argv[i]!.slice(flag.length + 1);
  }
  return undefined;
}

const array = (label: string, argv: string[], r: SlurmRequest, first: boolean): Stage => ({ kind: 'array', label, argv, shards: r.shards, ...(first && r.only ? { only: r.only } : {}) });
const mergeJob = (command: string, label = 'merge'): Stage => ({ kind: 'merge', label, command });
const cacheLine = (command: string, m: CacheMerge): string => {
  const built = m.passes.filter((p) => !p.cached).map((p) => p.names.join('+'));
  const cached = m.passes.filter((p) => p.cached).length;
  return `${command}: ${m.shards.length} shards → ${built.length} caches assembled${built.length ? ` (${built.join(', ')})` : ''}${cached ? `, ${cached} already complete` : ''} in ${m.seconds.toFixed(2)} s`;
};
const modelName = (modelDir: string): string => basename(modelDir);
/** an evaluation's results name: --name (as the command sanitizes it) or the model folder */
const evalName = (modelDir: string, passthrough: readonly string[]): string => (flagValue(passthrough, '--name') ?? basename(modelDir)).replace(/[^\w.-]+/g, '_');

/** The pipeline flags of a steer flag list, for its extraction stage (each takes a value). */
function runFlagsOf(argv: readonly string[], runFlags: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const name = a.startsWith('--') ? a.slice(2).split('=')[0]! : '';
    const inline = a.includes('=');
    if (runFlags.includes(name)) out.push(...(inline ? [a] : [a, argv[i + 1]!]));
    if (!inline && a.startsWith('--')) i++; // every steer flag takes a value
  }
  return out;
}

const STEER_CACHES = ['prompt.chatbot', 'prompt.agent.schema', 'prompt.agent.flattened'];

const extract: ShardStage<Record<string, unknown>> = {
  command: 'extract',
  options: (raw) => raw,
  finish: async (dir, _m, shards) => cacheLine('extract', mergeShardCaches(dir, shards)),
  resultsName: modelName, owned: [],
  slurm: (r) => [array('shards', ['extract', '--model', r.modelDir, '--results', r.resultsRoot, ...r.passthrough], r, true), mergeJob('extract')],
};

const reproduce: ShardStage<ReproduceMergeOptions> = {
  command: 'reproduce',
  options: (raw) => checked<ReproduceMergeOptions>('reproduce', raw, ['modelDir', 'modelName', 'baseManifest', 'groups']),
  finish: async (dir, m, shards) => {
    const r = await mergeReproduce(dir, shards, m);
    return `${cacheLine('reproduce', r)}\n${summarizeResults(r.report.results)}\nreport: ${r.report.files.html}`;
  },
  resultsName: modelName, owned: [],
  slurm: (r) => [array('shards', ['reproduce', '--model', r.modelDir, '--results', r.resultsRoot, ...r.passthrough], r, true), mergeJob('reproduce')],
};

const steer: ShardStage<SteerMergeOptions> = {
  command: 'steer',
  options: (raw) => checked<SteerMergeOptions>('steer', raw, ['table', 'layer', 'meanNorm', 'directionName', 'alphas', 'requests', 'pairs', 'keys', 'positions', 'protocol']),
  finish: async (dir, m, shards) => {
    const r = await finishSteer(dir, m, shards);
    return `steer: ${shards.length} shards → ${r.sweeps.reduce((n, s) => n + s.rows.length, 0)} (requests, condition) generation files\nTable 3: ${r.outDir}/table3.md\nreport: ${r.report}`;
  },
  resultsName: modelName, owned: [],
  slurm: (r) => {
    // ℓ* and R̂ come from three caches: extract them as their own sharded stage unless they are already merged
    const steerArgv = ['steer', '--model', r.modelDir, '--results', r.resultsRoot, ...r.passthrough];
    const cached = STEER_CACHES.every((c) => existsSync(join(r.resultsDir, 'cache', `${c}.safetensors`)));
    return cached
      ? [array('steer', steerArgv, r, true), mergeJob('steer')]
      : [array('extract', ['extract', '--model', r.modelDir, '--results', r.resultsRoot, '--configs', 'chatbot,agent', '--repr', 'schema,flattened', ...runFlagsOf(r.passthrough, r.runFlags)], r, true),
        mergeJob('extract', 'merge-extract'), array('steer', steerArgv, r, false), mergeJob('steer')];
  },
};

/**
 * An evaluation on the harness as a sharded stage: its shards hold log lines (src/harness/shard.ts); merge takes each
 * expected item's line from exactly one shard, in the one-process order, and ends the run as one process does.
 */
interface RowStage<M, R> {
  command: string;
  /** the shards' log-lines file */
  file(m: M): string;
  options(raw: Record<string, unknown>, resultsDir: string): M;
  /** the keys of the run's work items, in the one-process order, rebuilt from its options */
  expected(m: M): string[];
  /** what one process does after its items: the log, the tables (and the report) */
  write(m: M, samples: SampleLog<R>[]): Promise<string>;
  /** the evaluation's argv words (`guard eval`) */
  argv: string[];
}

function rowStage<M, R>(r: RowStage<M, R>): ShardStage<M> {
  return {
    command: r.command,
    options: r.options,
    finish: async (_dir, m, shards) => `${r.command}: ${shards.length} shards → ${await r.write(m, mergeShardSamples<R>(shards, r.file(m), r.expected(m)))}`,
    resultsName: evalName,
    // the evaluation writes into RESULTS/<name>/<folder>, which the merge job reads
    owned: ['--out', '--results'],
    slurm: (q) => [array('shards', [...r.argv, '--model', q.modelDir, '--results', q.resultsRoot, ...q.passthrough], q, true), mergeJob(r.command)],
  };
}

const guardEval = rowStage<GuardMergeOptions, EvalRow>({
  command: 'guard-eval', argv: ['guard', 'eval'],
  file: (m) => guardSamplesFile(m.bench),
  options: (raw) => checked<GuardMergeOptions>('guard-eval', raw, ['bench', 'dataDir', 'settings', 'limit', 'methods', 'name', 'out', 'maxTokens', 'judgeMaxTokens', 'meta', 'injecagentFormat']),
  expected: guardExpectedKeys,
  write: async (m, samples) => {
    const r = writeGuardRun(m, samples);
    return `${r.files.markdown} (${samples.length} samples, per-sample log ${r.files.log})`;
  },
});

const s3Eval = rowStage<S3MergeOptions, ScoredTrajectory>({
  command: 's3-eval', argv: ['s3', 'eval'],
  file: (m) => s3SamplesFile(m.bench),
  // the report goes where the shards are (the merged folder), also for shards that did not record it
  options: (raw, dir) => ({ ...checked<S3MergeOptions>('s3-eval', raw, ['bench', 'dirs', 'settings', 'limit', 'configs', 'name', 'out', 'maxTokens', 'meta', 'run', 'shell']), resultsDir: dir }),
  expected: s3ExpectedKeys,
  write: async (m, samples) => {
    const r = writeS3Run(m, samples);
    const rep = await writeS3ReportOf(m, s3ReportRows(r.summaries));
    return `${r.files.markdown}, ${r.files.trajectories} (${samples.length} samples, per-sample log ${r.files.log})\nreport: ${rep.html}`;
  },
});

/** In merge order: a later stage may read what an earlier one assembled (steer reads extract's caches). */
export const SHARD_STAGES: readonly RegisteredStage[] = [register(extract), register(reproduce), register(steer), register(guardEval), register(s3Eval)];
