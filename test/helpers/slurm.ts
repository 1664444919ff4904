/**
 * A real single-node Slurm for tests: munged (as the munge user), slurmctld and slurmd started here with a
 * generated slurm.conf in a temp folder (no systemd, no accounting database: jobs are followed with
 * `scontrol show job`). Packages come from scripts/slurm/install.sh (Debian's slurmctld slurmd slurm-client munge);
 * where they are missing or we are not root, `startSlurm` returns the reason to skip with.
 * Only the daemons started here are stopped, by their own pids.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync, chownSync } from 'node:fs';
import { hostname, cpus, totalmem } from 'node:os';
import { join } from 'node:path';

export interface SlurmCluster {
  conf: string;
  /** environment for client commands (SLURM_CONF) */
  env: NodeJS.ProcessEnv;
  dir: string;
  stop(): Promise<void>;
  /** daemon logs, for failure messages */
  logs(): string;
}

const which = (cmd: string): string | null => {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
};

function mungeWorks(): boolean {
  const r = spawnSync('sh', ['-c', 'munge -n | unmunge'], { encoding: 'utf8' });
  return r.status === 0;
}

async function waitFor(cond: () => boolean, ms: number, what: string): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Starts the cluster in `dir`, or returns why it cannot (the test skips with that reason). */
export async function startSlurm(dir: string): Promise<SlurmCluster | string> {
  const missing = ['munged', 'munge', 'unmunge', 'slurmctld', 'slurmd', 'sbatch', 'scontrol', 'runuser'].filter((c) => !which(c));
  if (missing.length) return `Slurm not installed (missing ${missing.join(', ')}; run scripts/slurm/install.sh as root)`;
  if (process.getuid?.() !== 0) return 'starting munged/slurmd needs root';
  if (!existsSync('/etc/munge/munge.key')) return 'no /etc/munge/munge.key (munge package incomplete)';

  const started: Array<{ name: string; kill: () => void; done: Promise<void> }> = [];
  // munged: reuse one that answers; otherwise start it as the munge user and remember its pid
  let mungePid: number | null = null;
  if (!mungeWorks()) {
    mkdirSync('/run/munge', { recursive: true });
    const ids = spawnSync('id', ['-u', 'munge'], { encoding: 'utf8' }).stdout.trim();
    const gid = spawnSync('id', ['-g', 'munge'], { encoding: 'utf8' }).stdout.trim();
    chownSync('/run/munge', Number(ids), Number(gid));
    const r = spawnSync('runuser', ['-u', 'munge', '--', 'munged'], { encoding: 'utf8' });
    if (r.status !== 0) return `munged did not start: ${r.stderr.trim()}`;
    await waitFor(() => existsSync('/run/munge/munged.pid') && mungeWorks(), 10_000, 'munged');
    mungePid = Number(readFileSync('/run/munge/munged.pid', 'utf8').trim());
  }

  const host = hostname().split('.')[0]!;
  const state = join(dir, 'state');
  const spool = join(dir, 'spool');
  mkdirSync(state, { recursive: true });
  mkdirSync(spool, { recursive: true });
  const port = 16817 + Math.floor(Math.random() * 500) * 2;
  const memMb = Math.floor(totalmem() / 2 ** 20 / 2);
  const conf = join(dir, 'slurm.conf');
  writeFileSync(conf, [
    'ClusterName=safekeep-test',
    `SlurmctldHost=${host}(127.0.0.1)`,
    `SlurmctldPort=${port}`,
    `SlurmdPort=${port + 1}`,
    'SlurmUser=root',
    'SlurmdUser=root',
    'AuthType=auth/munge',
    'CredType=cred/munge',
    `StateSaveLocation=${state}`,
    `SlurmdSpoolDir=${spool}`,
    `SlurmctldPidFile=${join(dir, 'slurmctld.pid')}`,
    `SlurmdPidFile=${join(dir, 'slurmd.pid')}`,
    `SlurmctldLogFile=${join(dir, 'slurmctld.log')}`,
    `SlurmdLogFile=${join(dir, 'slurmd.log')}`,
    'ProctrackType=proctrack/linuxproc',
    'TaskPlugin=task/none',
    'JobAcctGatherType=jobacct_gather/none',
    'AccountingStorageType=accounting_storage/none',
    'MailProg=/bin/true',
    'SchedulerType=sched/backfill',
    'SelectType=select/cons_tres',
    'SelectTypeParameters=CR_CPU',
    'ReturnToService=2',
    'SlurmctldTimeout=30',
    'SlurmdTimeout=30',
    'MinJobAge=600',
    `NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus().length} RealMemory=${memMb} State=UNKNOWN`,
    'PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP',
    '',
  ].join('\n'));
  const env = { ...process.env, SLURM_CONF: conf };
  const daemon = (cmd: string, args: string[]): void => {
    const p: ChildProcess = spawn(cmd, args, { env, stdio: 'ignore' });
    const done = new Promise<void>((res) => p.once('exit', () => res()));
    started.push({ name: cmd, kill: () => { if (p.exitCode === null && p.pid) process.kill(p.pid, 'SIGTERM'); }, done });
  };
  const stop = async (): Promise<void> => {
    for (const d of started.reverse()) {
      d.kill();
      await Promise.race([d.done, new Promise((r) => setTimeout(r, 10_000))]);
    }
    started.length = 0;
    if (mungePid !== null) {
      try { process.kill(mungePid, 'SIGTERM'); } catch { /* already gone */ }
      mungePid = null;
    }
  };
  const logs = (): string => ['slurmctld.log', 'slurmd.log'].map((f) => {
    const p = join(dir, f);
    return existsSync(p) ? `--- ${f}\n${readFileSync(p, 'utf8').split('\n').slice(-30).join('\n')}` : `--- ${f}: none`;
  }).join('\n');
  try {
    daemon('slurmctld', ['-D', '-i', '-f', conf]);
    await waitFor(() => spawnSync('scontrol', ['ping'], { env, encoding: 'utf8' }).stdout.includes('UP'), 30_000, 'slurmctld');
    daemon('slurmd', ['-D', '-f', conf, '-N', host]);
    await waitFor(() => /State=(IDLE|MIXED)/.test(spawnSync('scontrol', ['show', 'node', host], { env, encoding: 'utf8' }).stdout), 60_000, 'slurmd (node IDLE)');
  } catch (e) {
    const l = logs();
    await stop();
    return `Slurm daemons did not come up: ${(e as Error).message}\n${l}`;
  }
  return { conf, env, dir, stop, logs };
}

/** `scontrol show job ID` → JobState of each task (array jobs list one record per task). */
export function jobStates(env: NodeJS.ProcessEnv, id: string): string[] {
  const r = spawnSync('scontrol', ['show', 'job', id], { env, encoding: 'utf8' });
  return [...r.stdout.matchAll(/JobState=(\S+)/g)].map((m) => m[1]!);
}

/** Waits until every task of the jobs left the queue's active states; returns their final states. */
export async function waitForJobs(env: NodeJS.ProcessEnv, ids: readonly string[], timeoutMs: number): Promise<Record<string, string[]>> {
  const active = /^(PENDING|CONFIGURING|RUNNING|COMPLETING|REQUEUED|RESIZING|SUSPENDED)$/;
  const t0 = Date.now();
  for (;;) {
    const states = Object.fromEntries(ids.map((id) => [id, jobStates(env, id)]));
    if (Object.values(states).every((s) => s.length > 0 && s.every((x) => !active.test(x)))) return states;
    if (Date.now() - t0 > timeoutMs) throw new Error(`jobs still active after ${timeoutMs} ms: ${JSON.stringify(states)}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}
