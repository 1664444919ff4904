/**
 * sbatch scripts for a sharded run (pure text; `slurm.ts` writes and submits them):
 *   - a job array, one shard per task: `SLURM_ARRAY_TASK_ID` → `--shard <id>/<n>` (`--array=0-(n-1)`, or the
 *     listed tasks with --only), every task reading the model from the shared filesystem in place;
 *   - a merge job (`safekeep merge RESULTS_DIR`), submitted with `--dependency=afterok:<array>` and
 *     `--kill-on-invalid-dep=yes`, so it runs only when every task succeeded and is dropped when one failed; it has
 *     its own resources (CPU only: no GPU, the default partition unless given one, its own time and memory).
 * Shared-filesystem assumption: the repository, node, the model folder and the results folder are at the same
 * paths on every node.
 */

export interface SlurmResources {
  partition?: string;
  /** GPUs per array task (`--gpus-per-task`) */
  gpusPerTask?: number;
  cpusPerTask?: number;
  /** wall-clock limit per task, Slurm's format (e.g. 02:00:00) */
  time?: string;
  /** memory per node, Slurm's format (e.g. 24G): without it a job gets the cluster's default, often a few GB */
  mem?: string;
  /** extra sbatch arguments, one per element (e.g. `--account=lab`) */
  extra?: readonly string[];
}

interface ArraySpec {
  /** job name, e.g. safekeep-reproduce-planted */
  name: string;
  /** node binary and safekeep entry point (absolute) */
  node: string;
  bin: string;
  /** the safekeep command and its arguments, without --shard */
  argv: readonly string[];
  shards: number;
  /** array task ids to run (default all 0..n-1) */
  only?: readonly number[];
  /** folder for the tasks' stdout/stderr */
  logDir: string;
  /** working directory of the tasks */
  workdir: string;
  resources: SlurmResources;
}

/** POSIX shell single-quoting. */
export function shq(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** `0-3` or `3,7` */
export function arrayRange(shards: number, only?: readonly number[]): string {
  if (!only || only.length === 0) return shards === 1 ? '0' : `0-${shards - 1}`;
  return [...new Set(only)].sort((a, b) => a - b).join(',');
}

function header(name: string, r: SlurmResources, output: string, extra: string[] = []): string[] {
  return [
    '#!/bin/bash',
    `#SBATCH --job-name=${shq(name)}`,
    `#SBATCH --output=${shq(output)}`,
    ...extra,
    ...(r.partition ? [`#SBATCH --partition=${shq(r.partition)}`] : []),
    ...(r.time ? [`#SBATCH --time=${shq(r.time)}`] : []),
    ...(r.cpusPerTask ? [`#SBATCH --cpus-per-task=${r.cpusPerTask}`] : []),
    ...(r.mem ? [`#SBATCH --mem=${shq(r.mem)}`] : []),
    ...(r.extra ?? []).map((a) => `#SBATCH ${a}`),
  ];
}

export function arrayScript(s: ArraySpec): string {
  return [
    ...header(s.name, s.resources, `${s.logDir}/%x-%A_%a.out`, [
      `#SBATCH --array=${arrayRange(s.shards, s.only)}`,
      '#SBATCH --ntasks=1',
      ...(s.resources.gpusPerTask ? [`#SBATCH --gpus-per-task=${s.resources.gpusPerTask}`] : []),
    ]),
    '# one shard of a token-balanced partition per array task; parts land in the shard\'s own folder (resumable)',
    'set -euo pipefail',
    `cd ${shq(s.workdir)}`,
    `exec ${shq(s.node)} ${shq(s.bin)} ${s.argv.map(shq).join(' ')} --shard "\${SLURM_ARRAY_TASK_ID}/${s.shards}"`,
    '',
  ].join('\n');
}

interface MergeSpec {
  name: string;
  /** the sharded command whose parts this job merges */
  command: string;
  node: string;
  bin: string;
  resultsDir: string;
  logDir: string;
  workdir: string;
  /**
   * the merge job's own resources (it needs no GPU: no GPU count is ever written; partition and time are its own,
   * not the array's GPU partition and per-task limit)
   */
  resources: SlurmResources;
}

export function mergeScript(s: MergeSpec): string {
  const { gpusPerTask: _g, ...r } = s.resources;
  return [
    ...header(s.name, r, `${s.logDir}/%x-%j.out`, ['#SBATCH --ntasks=1']),
    '# runs after every array task succeeded (afterok): parts → the files one process writes, then the command\'s own finish (reproduce: analyses, tables, figures, report)',
    'set -euo pipefail',
    `cd ${shq(s.workdir)}`,
    `exec ${shq(s.node)} ${shq(s.bin)} merge ${shq(s.resultsDir)} --command ${shq(s.command)}`,
    '',
  ].join('\n');
}

/** `sbatch --parsable` prints `jobid` or `jobid;cluster`. */
export function parseJobId(stdout: string): string {
  const id = stdout.trim().split(/\s+/).pop()?.split(';')[0] ?? '';
  if (!/^\d+$/.test(id)) throw new Error(`sbatch printed no job id: '${stdout.trim()}'`);
  return id;
}
