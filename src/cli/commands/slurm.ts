/**
 * `safekeep slurm reproduce|steer|guard-eval|s3-eval --model M --shards N [--results DIR] [--partition P] [--gpus-per-task 1]
 *    [--cpus-per-task C] [--time 02:00:00] [--mem 24G] [--merge-partition P] [--merge-time T] [--merge-mem M]
 *    [--sbatch-arg "--account=lab --qos=high"] [--only 3,7] [--dry-run]
 *    [-- FLAGS FOR reproduce]`
 * writes an sbatch job array (task i runs `reproduce --shard i/N`) and a merge job that depends on it
 * (`--dependency=afterok`, `--kill-on-invalid-dep=yes`) into RESULTS_DIR/slurm/, submits them with
 * `sbatch --parsable`, and prints the job ids and where the results land. `--only 3,7` resubmits failed tasks
 * alone (plus a new merge). `--dry-run` prints the scripts and submits nothing. Flags after `--` go to every task.
 * steer: the three caches ℓ* and R̂ come from are extracted first as their own array + merge (skipped when they
 * are already in RESULTS_DIR/cache), then the steer array + merge; `--only` applies to the first array submitted.
 * guard-eval: `guard eval --model M --results RESULTS` per task (flags such as --bench after `--`; tables in
 * RESULTS/<name>/guard); s3-eval: `s3 eval --model M --results RESULTS` per task, the same way. The stages and their
 * job arrays are the registry's (src/cli/stage-registry.ts).
 * `safekeep slurm status RESULTS_DIR`: shard progress from the results folder (no accounting database).
 * Assumes a shared filesystem: this repository, node, the model and the results folder at the same paths on
 * every node (the model is read in place by every task, never copied).
 */
import { join, resolve } from 'node:path';
import { numberValue, parseArgs, requireValue, type FlagTable, type ParsedArgs } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { repoRoot } from '../../data/locate.ts';
import { existsSync } from 'node:fs';
import { looksLikeRepoId, resolveModel } from '../../hub/resolve.ts';
import { hubEnv } from '../env.ts';
import { modelDirFor } from '../../hub/pull.ts';
import { stageScripts, submit, type Submission } from '../../cluster/slurm.ts';
import { SHARD_STAGES } from '../stage-registry.ts';
import type { SlurmResources } from '../../cluster/sbatch.ts';
import { statusLines } from '../../cluster/status.ts';
import { isSlurmMemory, modelWeightBytes, taskMemoryRequest } from '../../cluster/memory-request.ts';
import { RUN_FLAGS } from '../run-flags.ts';

export const summary = 'reproduce/steer/guard-eval/s3-eval (the registry\'s sharded stages) as Slurm job arrays + dependent merge/report jobs; `slurm status RESULTS_DIR`';

/** Every sharded stage but the bare extraction (submitted as steer's first stage) */
const SUBMITTABLE = SHARD_STAGES.filter((st) => st.command !== 'extract');

export const flags: FlagTable = {
  usage: `slurm ${SUBMITTABLE.map((x) => x.command).join('|')} --model M --shards N [flags] [-- FLAGS FOR THE COMMAND]  |  slurm status RESULTS_DIR`,
  flags: [
    { name: 'model', value: 'M', help: 'checkpoint folder or repo id (pulled once on the submitting node; tasks read it in place)' },
    { name: 'shards', value: 'N', help: 'array tasks (one --shard i/N each)' },
    { name: 'results', value: 'DIR', default: 'results', help: 'results root on the shared filesystem' },
    { name: 'partition', value: 'P', help: 'sbatch --partition' },
    { name: 'gpus-per-task', value: 'G', help: 'sbatch --gpus-per-task' },
    { name: 'cpus-per-task', value: 'C', help: 'sbatch --cpus-per-task' },
    { name: 'time', value: 'HH:MM:SS', help: 'sbatch --time per task' },
    { name: 'mem', value: 'SIZE', default: '2.7 × the model\'s weight files + 2G, ≥ 4G', help: 'sbatch --mem per task (e.g. 24G)' },
    { name: 'merge-partition', value: 'P', default: 'the cluster\'s default', help: 'partition of the merge jobs (CPU only; never the GPU --partition)' },
    { name: 'merge-time', value: 'HH:MM:SS', default: 'the partition\'s default', help: 'sbatch --time of the merge jobs' },
    { name: 'merge-mem', value: 'SIZE', default: 'as --mem', help: 'sbatch --mem of the merge jobs' },
    { name: 'sbatch-arg', value: '"ARGS"', help: 'extra sbatch arguments for every job, merges included (account, qos; GPUs go in --gpus-per-task)' },
    { name: 'only', value: 'i,j', help: 'resubmit only these tasks (plus a new merge job)' },
    { name: 'dry-run', boolean: true, help: 'print the scripts, submit nothing' },
  ],
  example: 'slurm reproduce --model models/planted --shards 4 --dry-run',
};

/** flags the submission sets itself, so they may not appear after `--` */
const OWNED = ['--shard', '--model', '--results'];

function positiveInt(a: ParsedArgs, flag: string): number | undefined {
  if (!a.values.has(flag)) return undefined;
  const n = numberValue(a, flag);
  if (!(Number.isInteger(n) && n >= 1)) throw new SafekeepError(`--${flag} must be a positive integer, got ${a.values.get(flag)}`);
  return n;
}

function memValue(a: ParsedArgs, flag: string): string | undefined {
  const v = a.values.get(flag);
  if (v !== undefined && !isSlurmMemory(v)) throw new SafekeepError(`--${flag}: '${v}' is not a Slurm memory size (e.g. 24G, 512M)`);
  return v;
}

/** the merge jobs' resources: CPU only, their own partition/time/memory; the account-style --sbatch-arg still applies */
export function mergeResources(a: ParsedArgs, taskMem: string): SlurmResources {
  const extra = resources(a).extra;
  return {
    ...(a.values.get('merge-partition') ? { partition: a.values.get('merge-partition')! } : {}),
    ...(a.values.get('merge-time') ? { time: a.values.get('merge-time')! } : {}),
    mem: memValue(a, 'merge-mem') ?? taskMem,
    ...(extra ? { extra } : {}),
  };
}

export function resources(a: ParsedArgs): SlurmResources {
  const gpus = positiveInt(a, 'gpus-per-task');
  const cpus = positiveInt(a, 'cpus-per-task');
  const extra = (a.values.get('sbatch-arg') ?? '').split(/\s+/).filter(Boolean);
  for (const x of extra) if (!x.startsWith('-')) throw new SafekeepError(`--sbatch-arg: '${x}' is not an sbatch option (e.g. --sbatch-arg "--account=lab --qos=high")`);
  return {
    ...(a.values.get('partition') ? { partition: a.values.get('partition')! } : {}),
    ...(gpus ? { gpusPerTask: gpus } : {}),
    ...(cpus ? { cpusPerTask: cpus } : {}),
    ...(a.values.get('time') ? { time: a.values.get('time')! } : {}),
    ...(extra.length ? { extra } : {}),
  };
}

function onlyList(a: ParsedArgs, shards: number): number[] | undefined {
  const v = a.values.get('only');
  if (v === undefined) return undefined;
  const xs = v.split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  if (xs.length === 0 || xs.some((x) => !Number.isInteger(x) || x < 0 || x >= shards)) throw new SafekeepError(`--only: task ids 0..${shards - 1}, comma-separated (got '${v}')`);
  return xs;
}

export async function run(argv: string[]): Promise<number> {
  const cut = argv.indexOf('--');
  const own = cut >= 0 ? argv.slice(0, cut) : argv;
  const passthrough = cut >= 0 ? argv.slice(cut + 1) : [];
  const [sub, ...rest] = own;
  if (sub === 'status') {
    const a = parseArgs(rest, { values: [] });
    if (a.positionals.length !== 1) throw new SafekeepError('usage: safekeep slurm status RESULTS_DIR');
    process.stdout.write(statusLines(resolve(a.positionals[0]!)).join('\n') + '\n');
    return 0;
  }
  const stage = SUBMITTABLE.find((x) => x.command === sub);
  if (!stage) throw new SafekeepError(`usage: safekeep slurm ${SUBMITTABLE.map((x) => x.command).join('|')}|status ... (got '${sub ?? ''}')`);
  const a = parseArgs(rest, flags);
  if (a.positionals.length) throw new SafekeepError(`unexpected '${a.positionals[0]}' (flags for ${sub} go after --)`);
  const owned = [...OWNED, ...stage.owned];
  for (const f of passthrough) if (owned.some((o) => f === o || f.startsWith(`${o}=`))) throw new SafekeepError(`${f} after --: set by safekeep slurm itself`);
  const shards = positiveInt(a, 'shards');
  if (!shards) throw new SafekeepError('missing required --shards N');
  const only = onlyList(a, shards);
  const dryRun = a.booleans.has('dry-run');
  // a repo id is pulled once here, on the submitting node; every task then reads the same folder
  const model = requireValue(a, 'model');
  const modelDir = dryRun && !existsSync(model) && looksLikeRepoId(model) ? modelDirFor(model, 'main', hubEnv().modelsDir) : await resolveModel(model, hubEnv());
  const resultsRoot = resolve(a.values.get('results') ?? 'results');
  const name = stage.resultsName(modelDir, passthrough);
  const resultsDir = join(resultsRoot, name);
  const taskMem = memValue(a, 'mem') ?? taskMemoryRequest(modelWeightBytes(modelDir));
  const stages = stage.slurm({ modelDir, resultsRoot, resultsDir, passthrough, shards, runFlags: RUN_FLAGS, ...(only ? { only } : {}) });
  const s: Submission = {
    command: sub!, resultsDir, modelName: name, stages, node: process.execPath, bin: join(repoRoot, 'bin', 'safekeep.mjs'),
    workdir: process.cwd(), resources: { ...resources(a), mem: taskMem }, mergeResources: mergeResources(a, taskMem),
  };
  if (dryRun) {
    for (const sc of stageScripts(s)) process.stdout.write(`# ${sc.path}${sc.stage.kind === 'merge' ? ' (submitted with --dependency=afterok:<previous job> --kill-on-invalid-dep=yes)' : ''}\n${sc.text}\n`);
    return 0;
  }
  const jobs = submit(s, process.env);
  for (const j of jobs) process.stdout.write(`${j.stage.padEnd(7)} job ${j.jobId}${j.array ? ` (array ${j.array})` : ''}${j.dependency ? ` after ${j.dependency}` : ''}\n`);
  process.stdout.write(`results: ${resultsDir}\nprogress: safekeep slurm status ${resultsDir}\nlogs: ${join(resultsDir, 'slurm', 'logs')}\n`);
  return 0;
}
