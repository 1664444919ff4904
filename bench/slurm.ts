/**
 * `npm run bench:slurm [-- --tasks 1,2,4 --limit N]`: the planted-model `reproduce` as a Slurm job array of 1, 2, 4
 * tasks on a local single-node Slurm (started here like the cluster test; root + scripts/slurm/install.sh), against
 * one process on the same machine. Prints, per task count: wall time (submit → merge job done), the queue wait
 * (submit → first task running), per-task start-up (task lifetime − its in-process work), the shards' work, and the
 * merge job (cache assembly, then analyses + report). Numbers are printed, never asserted.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { listShards } from '../src/util/shard-run.ts';
import { startSlurm } from '../test/helpers/slurm.ts';

const args = process.argv.slice(2);
const opt = (name: string, fallback: string): string => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1]! : fallback;
};
const taskCounts = opt('tasks', '1,2,4').split(',').map(Number);
const limit = opt('limit', '');
const repo = join(import.meta.dirname, '..');
const bin = join(repo, 'bin', 'safekeep.mjs');

/** `scontrol show job` fields of every record of a job (array tasks: one record each). */
function jobRecords(env: NodeJS.ProcessEnv, id: string): Array<Record<string, string>> {
  const out = spawnSync('scontrol', ['show', '-o', 'job', id], { env, encoding: 'utf8' }).stdout;
  return out.trim().split('\n').filter(Boolean).map((line) => Object.fromEntries([...line.matchAll(/(\w+)=(\S*)/g)].map((m) => [m[1]!, m[2]!])));
}

const dir = mkdtempSync(join(tmpdir(), 'bench-slurm-'));
const cluster = await startSlurm(join(dir, 'slurm'));
if (typeof cluster === 'string') {
  console.log(`bench:slurm skipped: ${cluster}`);
  process.exit(0);
}
try {
  const env = { ...cluster.env, SAFEKEEP_CACHE: join(dir, '.graphs'), SAFEKEEP_QUIET: '1' };
  const model = join(dir, 'planted');
  await writePlantedModel(model);
  const extra = ['--reps', '1000', ...(limit ? ['--limit', limit] : [])];
  // warm the graph cache once, so every run below pays the same start-up
  spawnSync(process.execPath, [bin, 'extract', '--model', model, '--configs', 'chatbot', '--limit', '2', '--results', join(dir, 'warm')], { env });
  let t0 = performance.now();
  const single = spawnSync(process.execPath, [bin, 'reproduce', '--model', model, '--results', join(dir, 'single'), ...extra], { env, encoding: 'utf8' });
  const singleWall = (performance.now() - t0) / 1000;
  if (single.status !== 0) throw new Error(single.stderr);
  console.log(`machine: ${cpus().length} CPUs, load average ${loadavg().map((x) => x.toFixed(1)).join(' ')}; planted model, ${limit ? `${limit}` : 'all 205'} pairs, reps 1000`);
  console.log(`one process (no Slurm): ${singleWall.toFixed(1)} s`);
  console.log('| array tasks | wall (submit → merged) | queue wait | task start-up (mean) | shard work (max / sum) | merge job: assembly / total / job lifetime |');
  console.log('| --- | --- | --- | --- | --- | --- |');
  for (const k of taskCounts) {
    const results = join(dir, `r${k}`);
    t0 = performance.now();
    const sub = spawnSync(process.execPath, [bin, 'slurm', 'reproduce', '--model', model, '--shards', String(k), '--results', results, '--', ...extra], { env, encoding: 'utf8' });
    const submitted = Date.now();
    if (sub.status !== 0) throw new Error(sub.stderr);
    const [arrayId, mergeId] = [...sub.stdout.matchAll(/job (\d+)/g)].map((m) => m[1]!);
    for (;;) {
      const st = jobRecords(cluster.env, mergeId!)[0]?.JobState;
      if (st && !/PENDING|RUNNING|CONFIGURING|COMPLETING/.test(st)) {
        if (st !== 'COMPLETED') throw new Error(`merge job ${st}\n${cluster.logs()}`);
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const wall = (performance.now() - t0) / 1000;
    const tasks = jobRecords(cluster.env, arrayId!);
    const starts = tasks.map((t) => Date.parse(t.StartTime!));
    const lifetimes = tasks.map((t) => (Date.parse(t.EndTime!) - Date.parse(t.StartTime!)) / 1000);
    const work = listShards(join(results, 'planted'), 'reproduce').map((s) => s.record!.seconds ?? 0);
    const merged = JSON.parse(readFileSync(join(results, 'planted', 'shards', 'reproduce', 'merged.json'), 'utf8')) as { seconds: number; assemblySeconds: number };
    const mj = jobRecords(cluster.env, mergeId!)[0]!;
    const mergeLife = (Date.parse(mj.EndTime!) - Date.parse(mj.StartTime!)) / 1000;
    const startup = lifetimes.reduce((a, b) => a + b, 0) / k - work.reduce((a, b) => a + b, 0) / k;
    console.log(`| ${k} | ${wall.toFixed(1)} s | ${Math.max(0, (Math.min(...starts) - submitted) / 1000).toFixed(0)} s (1 s resolution) | ${startup.toFixed(1)} s | ${Math.max(...work).toFixed(1)} / ${work.reduce((a, b) => a + b, 0).toFixed(1)} s | ${merged.assemblySeconds.toFixed(2)} / ${merged.seconds.toFixed(1)} / ${mergeLife.toFixed(0)} s |`);
  }
} finally {
  await cluster.stop();
  rmSync(dir, { recursive: true, force: true });
}
