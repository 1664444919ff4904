/** `safekeep ARGS` as a child process, run to its exit: what the CLI tests check (exit code, stdout, stderr). */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from './shared.ts';

export interface CliRun {
  /** null when a signal ended it (then `signal` says which) */
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface CliRunOptions {
  cwd?: string;
  /** over the test process's environment */
  env?: Record<string, string>;
  /** killed (SIGTERM) after this long: a hang is a failed test, not a stuck suite */
  timeoutMs?: number;
}

export function runCli(args: readonly string[], o: CliRunOptions = {}): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(o.cwd ? { cwd: o.cwd } : {}),
      ...(o.env ? { env: { ...process.env, ...o.env } } : {}),
      ...(o.timeoutMs ? { timeout: o.timeoutMs } : {}),
    });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}
