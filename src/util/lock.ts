/**
 * An exclusive lock on a folder that one safekeep process writes (a results cache): `<dir>/.safekeep.lock` holds
 * who took it (pid, host, command, since when). A second process is refused at once with one line naming the
 * holder, instead of both writing the same parts and one finding its files deleted under it. A lock whose process
 * is gone (same host, pid no longer alive) is taken over; a lock from another host is left to that host. Within one
 * process the lock is re-entrant (stages of one run share the folder).
 */
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { SafekeepError } from './errors.ts';

export const LOCK_NAME = '.safekeep.lock';

interface LockInfo {
  pid: number;
  host: string;
  command: string;
  since: string;
}

/** Whether a process runs; a zombie (killed, not yet reaped by its parent) counts as gone. */
export function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^\S+ \(.*\) Z/s.test(stat);
  } catch {
    return true; // no /proc (macOS): kill(0) is all we know
  }
}

/** how many holders in this process, per lock file */
const held = new Map<string, number>();

function readInfo(lock: string): LockInfo | null {
  try {
    const j = JSON.parse(readFileSync(lock, 'utf8')) as Partial<LockInfo>;
    return typeof j.pid === 'number' && typeof j.host === 'string' ? { pid: j.pid, host: j.host, command: String(j.command ?? '?'), since: String(j.since ?? '?') } : null;
  } catch {
    return null;
  }
}

/**
 * Takes the lock on `dir` (created if missing) for `command`; returns the release function. Throws one
 * SafekeepError when another live process holds it.
 */
export function lockFolder(dir: string, command = `safekeep ${process.argv.slice(2).join(' ')}`.slice(0, 200)): () => void {
  mkdirSync(dir, { recursive: true });
  const lock = join(dir, LOCK_NAME);
  const release = (): void => {
    const n = (held.get(lock) ?? 1) - 1;
    if (n > 0) { held.set(lock, n); return; }
    held.delete(lock);
    if (readInfo(lock)?.pid === process.pid) rmSync(lock, { force: true });
    process.removeListener('exit', onExit);
  };
  const onExit = (): void => { if (held.has(lock) && readInfo(lock)?.pid === process.pid) rmSync(lock, { force: true }); };
  if (held.has(lock)) { held.set(lock, held.get(lock)! + 1); return release; }
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      const fd = openSync(lock, 'wx');
      const info: LockInfo = { pid: process.pid, host: hostname(), command, since: new Date().toISOString() };
      writeSync(fd, JSON.stringify(info) + '\n');
      closeSync(fd);
      held.set(lock, 1);
      process.on('exit', onExit);
      return release;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw new SafekeepError(`${lock}: cannot create the lock (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
    }
    const info = readInfo(lock);
    let age = 0;
    try { age = Date.now() - statSync(lock).mtimeMs; } catch { continue; /* released meanwhile */ }
    // unreadable: a writer between create and write, unless it is old (crashed then)
    const stale = info === null ? age > 5000 : info.host === hostname() && !pidAlive(info.pid);
    if (stale) { rmSync(lock, { force: true }); continue; }
    if (info === null) throw new SafekeepError(`${dir} is being locked by another safekeep process (${lock}); try again in a moment`);
    const where = info.host === hostname() ? `pid ${info.pid}` : `pid ${info.pid} on ${info.host}`;
    throw new SafekeepError(`${dir} is in use by ${where} (${info.command.slice(0, 120)}, since ${info.since}); wait for it to finish, or use another --results folder (delete ${lock} only if that process is gone)`);
  }
  throw new SafekeepError(`${lock}: could not take the lock (it keeps changing hands)`);
}
