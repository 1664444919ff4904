/**
 * On a REAL single-node Slurm started here (test/helpers/slurm.ts; packages from scripts/slurm/install.sh):
 * `safekeep slurm reproduce --model <planted> --shards 4` submits a 4-task job array and a dependent merge job;
 * once Slurm ran them, the merged caches are byte-identical to a single-process `reproduce` and the results equal;
 * missing tasks are resubmitted alone with --only. `slurm steer --shards 3` chains four jobs (extract array, merge,
 * steer array, merge) and yields the single-process generations.
 * Skips, with the reason, where Slurm is not installed or we are not root. Stops only the daemons it started.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { reproduce } from '../src/experiments/reproduce.ts';
import { startSlurm, waitForJobs, type SlurmCluster } from './helpers/slurm.ts';
import { repoRoot } from './helpers/shared.ts';

let dir: string;
let cluster: SlurmCluster | string = 'not started';

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'slurm-'));
  cluster = await startSlurm(join(dir, 'slurm'));
  if (typeof cluster === 'string') process.stderr.write(`slurm test skipped: ${cluster}\n`);
});
after(async () => {
  if (typeof cluster !== 'string') await cluster.stop();
  rmSync(dir, { recursive: true, force: true });
});

function files(d: string, sub = ''): string[] {
  return readdirSync(join(d, sub), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(d, join(sub, e.name)) : [join(sub, e.name)])).sort();
}

test('slurm reproduce --shards 4 on a real single-node Slurm = one process', async (t) => {
  if (typeof cluster === 'string') { t.skip(cluster); return; }
  const c = cluster;
  const env = { ...c.env, SAFEKEEP_CACHE: join(dir, '.graphs'), SAFEKEEP_QUIET: '1' };
  process.env.SAFEKEEP_CACHE = env.SAFEKEEP_CACHE;
  process.env.SAFEKEEP_QUIET = '1';
  const model = join(dir, 'planted');
  await writePlantedModel(model);
  const one = await reproduce({ model, data: 'pairs', limit: 24, reps: 50, refusalTokens: 0, results: join(dir, 'one'), engine: { cacheDir: env.SAFEKEEP_CACHE, quiet: true } });

  const cli = (...argv: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...argv], { env, encoding: 'utf8', cwd: dir });
  const dry = cli('slurm', 'reproduce', '--model', model, '--shards', '4', '--results', join(dir, 'four'), '--dry-run', '--', '--limit', '24', '--reps', '50');
  assert.equal(dry.status, 0, dry.stderr);
  assert.match(dry.stdout, /#SBATCH --array=0-3/);
  assert.match(dry.stdout, /--shard "\$\{SLURM_ARRAY_TASK_ID\}\/4"/);
  assert.equal(existsSync(join(dir, 'four')), false, '--dry-run writes nothing');

  const sub = cli('slurm', 'reproduce', '--model', model, '--shards', '4', '--results', join(dir, 'four'), '--', '--limit', '24', '--reps', '50');
  assert.equal(sub.status, 0, sub.stderr);
  const ids = [...sub.stdout.matchAll(/job (\d+)/g)].map((m) => m[1]!);
  assert.equal(ids.length, 2, sub.stdout);
  assert.match(sub.stdout, new RegExp(`merge\\s+job ${ids[1]} after afterok:${ids[0]}`));
  const states = await waitForJobs(c.env, ids, 600_000);
  const four = join(dir, 'four', 'planted');
  const logs = (): string => {
    const l = join(four, 'slurm', 'logs');
    return existsSync(l) ? readdirSync(l).map((f) => `--- ${f}\n${readFileSync(join(l, f), 'utf8').slice(-2000)}`).join('\n') : 'no logs';
  };
  assert.deepEqual(states[ids[0]!], ['COMPLETED', 'COMPLETED', 'COMPLETED', 'COMPLETED'], `${JSON.stringify(states)}\n${logs()}\n${c.logs()}`);
  assert.deepEqual(states[ids[1]!], ['COMPLETED'], `${JSON.stringify(states)}\n${logs()}`);

  const cacheFiles = files(join(one.outDir, 'cache'));
  assert.deepEqual(files(join(four, 'cache')), cacheFiles);
  for (const f of cacheFiles) assert.ok(readFileSync(join(one.outDir, 'cache', f)).equals(readFileSync(join(four, 'cache', f))), `${f} differs`);
  const norm = (p: string): string => readFileSync(p, 'utf8').replaceAll(join(dir, 'four'), '<R>').replaceAll(join(dir, 'one'), '<R>');
  assert.equal(norm(join(four, 'results.json')), norm(join(one.outDir, 'results.json')));
  assert.ok(existsSync(join(four, 'report.html')));

  const st = cli('slurm', 'status', four);
  assert.equal(st.status, 0, st.stderr);
  assert.match(st.stdout, /reproduce \(n=4\): 4 done, 0 running or failed, 0 not started; 100% .*merged/);
  assert.match(st.stdout, new RegExp(`${ids[0]}\\s+reproduce shards array 0-3`));

  // a failed/missing task is resubmitted alone: tasks 1,3 first (their merge fails, naming 0/4 and 2/4), then 0,2
  const part = (only: string) => cli('slurm', 'reproduce', '--model', model, '--shards', '4', '--only', only, '--results', join(dir, 'again'), '--', '--limit', '24', '--reps', '50');
  const first = part('1,3');
  assert.equal(first.status, 0, first.stderr);
  const ids1 = [...first.stdout.matchAll(/job (\d+)/g)].map((m) => m[1]!);
  const s1 = await waitForJobs(c.env, ids1, 600_000);
  assert.deepEqual(s1[ids1[0]!], ['COMPLETED', 'COMPLETED']);
  assert.deepEqual(s1[ids1[1]!], ['FAILED'], 'merge refuses an incomplete shard set');
  const again = join(dir, 'again', 'planted');
  const mergeLog = readdirSync(join(again, 'slurm', 'logs')).find((f) => f.includes(`-${ids1[1]}.out`))!;
  assert.match(readFileSync(join(again, 'slurm', 'logs', mergeLog), 'utf8'), /missing shards: 0\/4 \(not started\), 2\/4 \(not started\)/);
  assert.match(cli('slurm', 'status', again).stdout, /not started: 0\/4, 2\/4 \(resubmit with --only 0,2\)/);
  const second = part('0,2');
  assert.equal(second.status, 0, second.stderr);
  const ids2 = [...second.stdout.matchAll(/job (\d+)/g)].map((m) => m[1]!);
  const s2 = await waitForJobs(c.env, ids2, 600_000);
  assert.deepEqual(s2[ids2[1]!], ['COMPLETED'], JSON.stringify(s2));
  for (const f of cacheFiles) assert.ok(readFileSync(join(one.outDir, 'cache', f)).equals(readFileSync(join(again, 'cache', f))), `${f} differs after --only`);
});

test('slurm steer --shards 3 on the real Slurm: extract array → merge → steer array → merge = one process', async (t) => {
  if (typeof cluster === 'string') { t.skip(cluster); return; }
  const c = cluster;
  const env = { ...c.env, SAFEKEEP_CACHE: join(dir, '.graphs'), SAFEKEEP_QUIET: '1' };
  process.env.SAFEKEEP_CACHE = env.SAFEKEEP_CACHE;
  process.env.SAFEKEEP_QUIET = '1';
  const model = join(dir, 'planted-steer');
  await writePlantedModel(model);
  const flags = ['--limit', '24', '--alphas', '0,0.8,1.2', '--max-new-tokens', '10'];
  const cli = (...argv: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...argv], { env, encoding: 'utf8', cwd: dir });
  const one = cli('steer', '--model', model, '--results', join(dir, 'steer-one'), ...flags);
  assert.equal(one.status, 0, one.stderr);
  const sub = cli('slurm', 'steer', '--model', model, '--shards', '3', '--results', join(dir, 'steer-three'), '--', ...flags);
  assert.equal(sub.status, 0, sub.stderr);
  const ids = [...sub.stdout.matchAll(/job (\d+)/g)].map((m) => m[1]!);
  assert.equal(ids.length, 4, sub.stdout);
  const states = await waitForJobs(c.env, ids, 600_000);
  assert.deepEqual(Object.values(states).flat(), Array(8).fill('COMPLETED'), `${JSON.stringify(states)}\n${c.logs()}`);
  const a = join(dir, 'steer-one', 'planted-steer', 'steering');
  const b = join(dir, 'steer-three', 'planted-steer', 'steering');
  const outs = files(a);
  assert.equal(outs.filter((f) => f.startsWith('generations.')).length, 6);
  assert.deepEqual(files(b), outs);
  for (const f of outs.filter((x) => !x.startsWith('log.'))) assert.ok(readFileSync(join(a, f)).equals(readFileSync(join(b, f))), `steering/${f} differs`);
  // the per-sample logs: the same lines, up to the measured latencies
  const unmeasured = (p: string): string => readFileSync(p, 'utf8').replace(/"latencyMs":[\d.e+-]+/g, '"latencyMs":0');
  for (const f of outs.filter((x) => x.startsWith('log.'))) assert.equal(unmeasured(join(b, f)), unmeasured(join(a, f)), `steering/${f} differs`);
});
