/**
 * The results-folder lock (src/util/lock.ts) and its use by extraction: a second process is refused at once with
 * one line naming the holder (pid, command, since when); a lock left by a dead process is taken over; the lock is
 * re-entrant within a process and gone after release. Two real `safekeep extract` runs into one --results folder:
 * the second exits 2 with that line, the first completes.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { LOCK_NAME, lockFolder } from '../src/util/lock.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { repoRoot } from './helpers/shared.ts';

const root = mkdtempSync(join(tmpdir(), 'safekeep-lock-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** lockFolder(dir) in another process: its exit code and stderr */
function otherProcess(dir: string): { status: number | null; stderr: string } {
  const code = `import(${JSON.stringify(join(repoRoot, 'src', 'util', 'lock.ts'))}).then((m) => { try { m.lockFolder(${JSON.stringify(dir)}, 'safekeep extract --other'); process.stdout.write('got it'); } catch (e) { process.stderr.write(e.message); process.exit(2); } });`;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '-e', code], { cwd: repoRoot, encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, stderr: r.stderr };
}

test('held: another process is refused with who holds it; after release it gets the lock', () => {
  const dir = join(root, 'a');
  const release = lockFolder(dir, 'safekeep extract --model m');
  const info = JSON.parse(readFileSync(join(dir, LOCK_NAME), 'utf8'));
  assert.equal(info.pid, process.pid);
  const r = otherProcess(dir);
  assert.equal(r.status, 2);
  assert.match(r.stderr, new RegExp(`^.*/a is in use by pid ${process.pid} \\(safekeep extract --model m, since \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z\\); wait for it to finish, or use another --results folder`));
  // re-entrant here: a nested taker does not release the outer hold
  const inner = lockFolder(dir);
  inner();
  assert.ok(existsSync(join(dir, LOCK_NAME)));
  release();
  assert.ok(!existsSync(join(dir, LOCK_NAME)));
  assert.equal(otherProcess(dir).status, 0);
  assert.ok(!existsSync(join(dir, LOCK_NAME)), 'released at the other process\'s exit');
});

test('a lock of a dead pid is taken over; one from another host is not', () => {
  const dir = join(root, 'b');
  const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout;
  lockFolder(dir)(); // creates the folder
  writeFileSync(join(dir, LOCK_NAME), JSON.stringify({ pid: Number(dead), host: hostname(), command: 'safekeep extract', since: '2026-01-01T00:00:00Z' }));
  const release = lockFolder(dir, 'me');
  assert.equal(JSON.parse(readFileSync(join(dir, LOCK_NAME), 'utf8')).command, 'me');
  release();
  writeFileSync(join(dir, LOCK_NAME), JSON.stringify({ pid: Number(dead), host: 'node-17', command: 'safekeep extract', since: '2026-01-01T00:00:00Z' }));
  assert.throws(() => lockFolder(dir), (e: unknown) => e instanceof SafekeepError && /in use by pid \d+ on node-17 /.test(e.message));
});

test('two safekeep extract runs into one --results folder: the second exits 2 naming the first, the first completes', { timeout: 180_000 }, async () => {
  const dir = join(root, 'x');
  await writePlantedModel(join(dir, 'planted'));
  const env = { ...process.env, SAFEKEEP_CACHE: join(dir, '.graphs'), SAFEKEEP_QUIET: '1' };
  const args = [join(repoRoot, 'bin', 'safekeep.mjs'), 'extract', '--model', join(dir, 'planted'), '--configs', 'agent', '--repr', 'schema', '--limit', '80', '--batch-tokens', '300', '--results', join(dir, 'results')];
  const lock = join(dir, 'results', 'planted', 'cache', LOCK_NAME);
  // both at once: whichever reaches the cache first holds it while it computes; the other is refused
  const run = () => {
    const c = spawn(process.execPath, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    c.stderr.on('data', (b) => { stderr += b; });
    return new Promise<{ code: number | null; stderr: string; pid: number }>((res) => c.on('exit', (code) => res({ code, stderr, pid: c.pid! })));
  };
  const rs = await Promise.all([run(), run()]);
  const ok = rs.filter((r) => r.code === 0);
  const refused = rs.filter((r) => r.code === 2);
  assert.equal(ok.length, 1, rs.map((r) => r.stderr).join('\n---\n'));
  assert.equal(refused.length, 1, rs.map((r) => r.stderr).join('\n---\n'));
  const second = refused[0]!;
  assert.equal(second.stderr.trim().split('\n').length, 1, second.stderr);
  assert.match(second.stderr, new RegExp(`^safekeep: .*results/planted/cache is in use by pid ${ok[0]!.pid} \\(safekeep extract --model .*, since .*\\)`));
  assert.ok(existsSync(join(dir, 'results', 'planted', 'cache', 'prompt.agent.schema.safetensors')));
  assert.ok(!existsSync(lock));
});
