/**
 * A sharded command as Slurm jobs: stages (job arrays and merges) chained with `--dependency=afterok` and
 * `--kill-on-invalid-dep=yes`, submitted with `sbatch --parsable`; scripts and job ids are kept in
 * RESULTS_DIR/slurm/ (scripts, jobs.json, logs/). Slurm does the scheduling, retries and accounting; we only
 * write scripts.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic, writeJsonAtomic } from '../util/atomic.ts';
import { SafekeepError } from '../util/errors.ts';
import { arrayRange, arrayScript, mergeScript, parseJobId, type SlurmResources } from './sbatch.ts';
import { readJobs, jobsFile, type SubmittedJob } from './status.ts';

/** One stage: a job array of a sharded safekeep command, or a merge of the results folder. */
export type Stage =
  | { kind: 'array'; label: string; argv: string[]; shards: number; only?: number[] }
  | { kind: 'merge'; label: string; command: string };

export interface Submission {
  /** the command the user asked for (reproduce, steer, guard-eval, s3-eval) */
  command: string;
  /** results/<model> (absolute): shards, merge, scripts and logs go here */
  resultsDir: string;
  /** for job names */
  modelName: string;
  stages: Stage[];
  node: string;
  bin: string;
  workdir: string;
  /** the array tasks' resources */
  resources: SlurmResources;
  /** the merge jobs' resources (no GPU; see sbatch.ts) */
  mergeResources: SlurmResources;
}

interface StageScript {
  stage: Stage;
  name: string;
  path: string;
  text: string;
}

export function stageScripts(s: Submission): StageScript[] {
  const slurmDir = join(s.resultsDir, 'slurm');
  const logDir = join(slurmDir, 'logs');
  return s.stages.map((stage, k) => {
    const name = `safekeep-${s.command}-${stage.label}-${s.modelName}`.replace(/[^\w.+-]+/g, '_');
    const path = join(slurmDir, `${String(k + 1).padStart(2, '0')}-${stage.label}.sbatch`);
    const text = stage.kind === 'array'
      ? arrayScript({
        name, node: s.node, bin: s.bin, argv: stage.argv, shards: stage.shards, ...(stage.only ? { only: stage.only } : {}),
        logDir, workdir: s.workdir, resources: s.resources,
      })
      : mergeScript({ name, command: stage.command, node: s.node, bin: s.bin, resultsDir: s.resultsDir, logDir, workdir: s.workdir, resources: s.mergeResources });
    return { stage, name, path, text };
  });
}

/**
 * Writes the scripts and submits them in order, each stage after the previous one succeeded. `env`: sbatch's
 * environment, which sbatch exports to every task.
 */
export function submit(s: Submission, env: NodeJS.ProcessEnv): SubmittedJob[] {
  const scripts = stageScripts(s);
  mkdirSync(join(s.resultsDir, 'slurm', 'logs'), { recursive: true });
  const jobs: SubmittedJob[] = [];
  let previous: string | null = null;
  for (const sc of scripts) {
    writeFileAtomic(sc.path, sc.text);
    const dependency = previous ? `afterok:${previous}` : undefined;
    const args = ['--parsable', ...(dependency ? [`--dependency=${dependency}`, '--kill-on-invalid-dep=yes'] : []), sc.path];
    const r = spawnSync('sbatch', args, { env, encoding: 'utf8' });
    if (r.error) throw new SafekeepError(`sbatch: ${(r.error as NodeJS.ErrnoException).code === 'ENOENT' ? 'not found (is this a Slurm login node?)' : r.error.message}`);
    if (r.status !== 0) {
      const earlier = jobs.length ? `; already submitted: ${jobs.map((j) => j.jobId).join(', ')} (scancel them)` : '';
      throw new SafekeepError(`sbatch ${sc.path} failed (exit ${r.status}): ${r.stderr.trim()}${earlier}`);
    }
    let jobId: string;
    try { jobId = parseJobId(r.stdout); } catch (e) { throw new SafekeepError((e as Error).message); }
    jobs.push({
      command: s.command, stage: sc.stage.label, jobId, script: sc.path, submittedAt: new Date().toISOString(),
      ...(sc.stage.kind === 'array' ? { array: arrayRange(sc.stage.shards, sc.stage.only) } : {}),
      ...(dependency ? { dependency } : {}),
    });
    previous = jobId;
  }
  writeJsonAtomic(jobsFile(s.resultsDir), [...readJobs(s.resultsDir), ...jobs]);
  return jobs;
}
