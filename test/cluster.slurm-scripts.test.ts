/**
 * sbatch scripts and `safekeep slurm ... --dry-run` (no Slurm needed): array range and --only, the task's
 * `--shard "${SLURM_ARRAY_TASK_ID}/n"`, resources (--mem on every job; the merge job's own partition, time and memory),
 * quoting, the merge job per stage, and user errors (exit 2).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { closeSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { arrayRange, arrayScript, mergeScript, parseJobId, shq } from '../src/cluster/sbatch.ts';
import { taskMemoryRequest } from '../src/cluster/memory-request.ts';
import { repoRoot } from './helpers/shared.ts';

test('sbatch pieces: ranges, quoting, job ids', () => {
  assert.equal(arrayRange(4), '0-3');
  assert.equal(arrayRange(1), '0');
  assert.equal(arrayRange(8, [7, 3, 3]), '3,7');
  assert.equal(shq('/a/b-c.d'), '/a/b-c.d');
  assert.equal(shq("it's here"), `'it'\\''s here'`);
  assert.equal(parseJobId('1234\n'), '1234');
  assert.equal(parseJobId('1234;cluster\n'), '1234');
  assert.throws(() => parseJobId('sbatch: error'), /no job id/);
});

test('array and merge scripts', () => {
  const a = arrayScript({
    name: 'safekeep-x', node: '/usr/bin/node', bin: '/r/bin/safekeep.mjs', argv: ['reproduce', '--model', '/m/My Model'], shards: 4, only: [3],
    logDir: '/res/slurm/logs', workdir: '/r', resources: { partition: 'gpu', gpusPerTask: 1, time: '02:00:00', extra: ['--account=lab'] },
  });
  for (const line of ['#SBATCH --array=3', '#SBATCH --gpus-per-task=1', '#SBATCH --partition=gpu', '#SBATCH --time=02:00:00', '#SBATCH --account=lab',
    '#SBATCH --output=/res/slurm/logs/%x-%A_%a.out', `exec /usr/bin/node /r/bin/safekeep.mjs reproduce --model '/m/My Model' --shard "\${SLURM_ARRAY_TASK_ID}/4"`]) {
    assert.ok(a.split('\n').includes(line), `missing: ${line}\n${a}`);
  }
  const m = mergeScript({ name: 'm', command: 'reproduce', node: '/usr/bin/node', bin: '/r/bin/safekeep.mjs', resultsDir: '/res', logDir: '/res/slurm/logs', workdir: '/r', resources: { gpusPerTask: 1, partition: 'cpu' } });
  assert.ok(m.includes('exec /usr/bin/node /r/bin/safekeep.mjs merge /res --command reproduce'));
  assert.ok(!m.includes('gpus'), 'the merge asks for no GPU');
  assert.ok(m.includes('#SBATCH --partition=cpu'));
});

test('safekeep slurm --dry-run: steer = extract array, merge, steer array, merge; user errors exit 2', () => {
  const dir = mkdtempSync(join(tmpdir(), 'slurm-dry-'));
  try {
    const run = (...args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'slurm', ...args], { encoding: 'utf8', cwd: dir });
    const r = run('steer', '--model', repoRoot, '--shards', '3', '--results', join(dir, 'res'), '--dry-run', '--', '--limit', '24', '--alphas', '0,1x', '--dtype', 'f32');
    assert.equal(r.status, 0, r.stderr);
    const scripts = r.stdout.split(/^# (?=\/)/m).filter(Boolean);
    assert.deepEqual(scripts.map((s) => s.split('\n')[0]!.split('/').pop()!.split(' ')[0]), ['01-extract.sbatch', '02-merge-extract.sbatch', '03-steer.sbatch', '04-merge.sbatch']);
    assert.match(scripts[0]!, /extract --model \S+ --results \S+ --configs chatbot,agent --repr schema,flattened --limit 24 --dtype f32 --shard/);
    assert.doesNotMatch(scripts[0]!, /--alphas/);
    assert.match(scripts[1]!, /merge \S+ --command extract/);
    assert.match(scripts[2]!, /steer --model \S+ --results \S+ --limit 24 --alphas 0,1x --dtype f32 --shard "\$\{SLURM_ARRAY_TASK_ID\}\/3"/);
    assert.match(scripts[3]!, /merge \S+ --command steer/);
    const bad = [
      run('reproduce', '--model', repoRoot, '--shards', '2', '--dry-run', '--', '--shard', '1/2'),
      run('reproduce', '--model', repoRoot, '--shards', '2', '--only', '2', '--dry-run'),
      run('reproduce', '--model', repoRoot, '--dry-run'),
      run('launch', '--model', repoRoot),
    ];
    for (const b of bad) {
      assert.equal(b.status, 2, b.stderr);
      assert.equal(b.stderr.trim().split('\n').length, 1, b.stderr);
    }
    assert.match(bad[0]!.stderr, /--shard after --: set by safekeep slurm itself/);
    assert.match(bad[1]!.stderr, /--only: task ids 0\.\.1/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('safekeep slurm s3-eval --dry-run: s3 eval array with --results RESULTS (tables in RESULTS/<name>/s3), then merge --command s3-eval', () => {
  const dir = mkdtempSync(join(tmpdir(), 'slurm-dry-s3-'));
  try {
    const run = (...args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'slurm', ...args], { encoding: 'utf8', cwd: dir });
    const res = join(dir, 'res');
    const r = run('s3-eval', '--model', repoRoot, '--shards', '4', '--results', res, '--dry-run', '--', '--bench', 'mixed', '--configs', 'none,full', '--name', 'my model');
    assert.equal(r.status, 0, r.stderr);
    const scripts = r.stdout.split(/^# (?=\/)/m).filter(Boolean);
    assert.deepEqual(scripts.map((s) => s.split('\n')[0]!.split('/').pop()!.split(' ')[0]), ['01-shards.sbatch', '02-merge.sbatch']);
    assert.ok(scripts[0]!.includes('#SBATCH --array=0-3'), scripts[0]);
    assert.ok(scripts[0]!.includes(`s3 eval --model ${repoRoot} --results ${res} --bench mixed --configs none,full --name 'my model' --shard "\${SLURM_ARRAY_TASK_ID}/4"`), scripts[0]);
    assert.ok(scripts[1]!.includes(`merge ${join(res, 'my_model')} --command s3-eval`), scripts[1]);
    const b = run('s3-eval', '--model', repoRoot, '--shards', '2', '--dry-run', '--', '--out', '/elsewhere');
    assert.equal(b.status, 2);
    assert.match(b.stderr, /--out after --: set by safekeep slurm itself/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('memory: every job asks for --mem (default from the weight files); the merge job gets no GPU partition or per-task time', () => {
  assert.equal(taskMemoryRequest(0), '4G');
  // 3 GiB of 16-bit weights: 2 × 3 × 1.35 (f32 load peak) + 2 = 10.1 → 11G
  assert.equal(taskMemoryRequest(3 * 2 ** 30), '11G');
  const dir = mkdtempSync(join(tmpdir(), 'slurm-mem-'));
  try {
    const model = join(dir, 'model');
    mkdirSync(model);
    // a sparse 3 GiB weight file: its size counts, no disk is used
    const fd = openSync(join(model, 'model.safetensors'), 'w');
    ftruncateSync(fd, 3 * 2 ** 30);
    closeSync(fd);
    const run = (...args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'slurm', ...args], { encoding: 'utf8', cwd: dir });
    const gpu = ['--partition', 'gpu', '--gpus-per-task', '1', '--time', '04:00:00', '--sbatch-arg', '--account=lab'];
    let r = run('reproduce', '--model', model, '--shards', '2', '--results', join(dir, 'res'), ...gpu, '--dry-run');
    assert.equal(r.status, 0, r.stderr);
    let [task, mergeJob] = r.stdout.split(/^# (?=\/)/m).filter(Boolean) as [string, string];
    for (const l of ['#SBATCH --partition=gpu', '#SBATCH --gpus-per-task=1', '#SBATCH --time=04:00:00', '#SBATCH --mem=11G', '#SBATCH --account=lab']) assert.ok(task.split('\n').includes(l), `task: ${l}\n${task}`);
    assert.doesNotMatch(mergeJob, /--partition|--time|gpu/, mergeJob);
    for (const l of ['#SBATCH --mem=11G', '#SBATCH --account=lab']) assert.ok(mergeJob.split('\n').includes(l), `merge: ${l}\n${mergeJob}`);
    r = run('reproduce', '--model', model, '--shards', '2', '--results', join(dir, 'res'), ...gpu, '--mem', '64G', '--merge-partition', 'cpu', '--merge-time', '00:30:00', '--merge-mem', '8G', '--dry-run');
    assert.equal(r.status, 0, r.stderr);
    [task, mergeJob] = r.stdout.split(/^# (?=\/)/m).filter(Boolean) as [string, string];
    assert.ok(task.includes('#SBATCH --mem=64G\n'));
    for (const l of ['#SBATCH --partition=cpu', '#SBATCH --time=00:30:00', '#SBATCH --mem=8G']) assert.ok(mergeJob.split('\n').includes(l), `merge: ${l}\n${mergeJob}`);
    assert.doesNotMatch(mergeJob, /gpu/);
    const bad = run('reproduce', '--model', model, '--shards', '2', '--mem', '24GB', '--dry-run');
    assert.equal(bad.status, 2);
    assert.equal(bad.stderr.trim(), "safekeep: --mem: '24GB' is not a Slurm memory size (e.g. 24G, 512M)");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
