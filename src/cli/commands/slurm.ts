/**
 * `safekeep slurm reproduce --model M --shards N [--results DIR] [--partition P] [--gpus-per-task 1]
 *    [--cpus-per-task C] [--time 02:00:00] [--sbatch-arg "--account=lab --qos=high"] [--only 3,7] [--dry-run]
 *    [-- FLAGS FOR reproduce]`
 * writes an sbatch job array (task i runs `reproduce --shard i/N`) and a merge job that depends on it
 * (`--dependency=afterok`, `--kill-on-invalid-dep=yes`) into RESULTS_DIR/slurm/, submits them with
 * `sbatch --parsable`, and prints the job ids and where the results land. `--only 3,7` resubmits failed tasks
 * alone (plus a new merge). `--dry-run` prints the scripts and submits nothing. Flags after `--` go to every task.
 * `safekeep slurm status RESULTS_DIR`: shard progress from the results folder (no accounting database).
 * Assumes a shared filesystem: this repository, node, the model and the results folder at the same paths on
 * every node (the model is read in place by every task, never copied).
 */
import { basename, join, resolve } from 'node:path';
import { numberValue, parseArgs, requireValue, type ParsedArgs } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { repoRoot } from '../../data/locate.ts';
import { existsSync } from 'node:fs';
import { looksLikeRepoId, resolveModel } from '../../hub/resolve.ts';
import { modelDirFor } from '../../hub/pull.ts';
import { stageScripts, submit, type Stage, type Submission } from '../../cluster/slurm.ts';
import type { SlurmResources } from '../../cluster/sbatch.ts';
import { statusLines } from '../../cluster/status.ts';

export const summary = 'run reproduce as a Slurm job array + dependent merge/report job; `slurm status RESULTS_DIR`';

const SUBMIT_FLAGS = ['model', 'shards', 'results', 'partition', 'gpus-per-task', 'cpus-per-task', 'time', 'sbatch-arg', 'only'] as const;
/** flags the submission sets itself, so they may not appear after `--` */
const OWNED = ['--shard', '--model', '--results'];

function positiveInt(a: ParsedArgs, flag: string): number | undefined {
  if (!a.values.has(flag)) return undefined;
  const n = numberValue(a, flag);
  if (!(Number.isInteger(n) && n >= 1)) throw new SafekeepError(`--${flag} must be a positive integer, got ${a.values.get(flag)}`);
  return n;
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
  if (sub !== 'reproduce') throw new SafekeepError(`usage: safekeep slurm reproduce|status ... (got '${sub ?? ''}')`);
  const a = parseArgs(rest, { values: [...SUBMIT_FLAGS], booleans: ['dry-run'] });
  if (a.positionals.length) throw new SafekeepError(`unexpected '${a.positionals[0]}' (flags for ${sub} go after --)`);
  for (const f of passthrough) if (OWNED.some((o) => f === o || f.startsWith(`${o}=`))) throw new SafekeepError(`${f} after --: set by safekeep slurm itself`);
  const shards = positiveInt(a, 'shards');
  if (!shards) throw new SafekeepError('missing required --shards N');
  const only = onlyList(a, shards);
  const dryRun = a.booleans.has('dry-run');
  // a repo id is pulled once here, on the submitting node; every task then reads the same folder
  const model = requireValue(a, 'model');
  const modelDir = dryRun && !existsSync(model) && looksLikeRepoId(model) ? modelDirFor(model) : await resolveModel(model);
  const resultsRoot = resolve(a.values.get('results') ?? 'results');
  const resultsDir = join(resultsRoot, basename(modelDir));
  const argvFor = (command: string): string[] => [command, '--model', modelDir, '--results', resultsRoot, ...passthrough];
  const stages: Stage[] = [
    { kind: 'array', label: 'shards', argv: argvFor('reproduce'), shards, ...(only ? { only } : {}) },
    { kind: 'merge', label: 'merge' },
  ];
  const s: Submission = {
    command: sub, resultsDir, modelName: basename(modelDir), stages, node: process.execPath, bin: join(repoRoot, 'bin', 'safekeep.mjs'),
    workdir: process.cwd(), resources: resources(a),
  };
  if (dryRun) {
    for (const sc of stageScripts(s)) process.stdout.write(`# ${sc.path}${sc.stage.kind === 'merge' ? ' (submitted with --dependency=afterok:<previous job> --kill-on-invalid-dep=yes)' : ''}\n${sc.text}\n`);
    return 0;
  }
  const jobs = submit(s);
  for (const j of jobs) process.stdout.write(`${j.stage.padEnd(7)} job ${j.jobId}${j.array ? ` (array ${j.array})` : ''}${j.dependency ? ` after ${j.dependency}` : ''}\n`);
  process.stdout.write(`results: ${resultsDir}\nprogress: safekeep slurm status ${resultsDir}\nlogs: ${join(resultsDir, 'slurm', 'logs')}\n`);
  return 0;
}
