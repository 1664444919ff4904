/** `safekeep serve …` as a child process, for the CLI tests of the guard proxy (upstream and local-model modes). */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from './shared.ts';

const bin = join(repoRoot, 'bin', 'safekeep.mjs');

export interface ServeChild {
  child: ChildProcess;
  /** the http://127.0.0.1:PORT/v1 base URL it printed */
  url: string;
  /** everything it wrote to stderr so far (one JSON line per request/stage) */
  stderr(): string;
}

/** Starts `safekeep serve ARGS` and resolves once it prints its URL; rejects with its stderr if it exits first. */
export async function startServeCli(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<ServeChild> {
  const child = spawn(process.execPath, [bin, 'serve', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => { err += d.toString(); });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /(http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.on('exit', (code) => reject(new Error(`serve exited ${code}: ${err}`)));
  });
  return { child, url, stderr: () => err };
}

/** SIGTERM, then the exit code */
export function stopServe(s: ServeChild): Promise<number | null> {
  return new Promise((resolve) => { s.child.on('exit', resolve); s.child.kill('SIGTERM'); });
}

/** `safekeep serve ARGS` run to its exit (bad flags): its exit code and stderr */
export async function serveExit(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [bin, 'serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  return { code, stderr };
}
