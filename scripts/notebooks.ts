/**
 * `npm run notebooks [-- NAME.ipynb ...] [--install-kernel]`: executes the notebooks top to bottom in the TypeScript
 * Jupyter kernel (tslab) and writes their outputs — text and inline figures — back into notebooks/*.ipynb, so a code
 * host shows them without running anything. The test (test/notebooks.test.ts) executes them the same way into a
 * scratch folder. `--install-kernel` registers the kernel in your Jupyter data folder (for `jupyter lab notebooks/`)
 * and runs nothing.
 *
 * Needs: Jupyter's nbconvert (Debian: `apt-get install jupyter-nbconvert python3-nbclient jupyter-client`) and the
 * kernel (`npm ci --prefix notebooks/kernel`: tslab lives there, not in the root install, because its bundled
 * TypeScript 5.0 links a `tsc` into node_modules/.bin that would shadow the project's compiler).
 *
 * How the kernel reaches the package: notebook cells `import { … } from 'safekeep'`, which Node resolves by package
 * self-reference to dist/ (built here when older than src/). tslab type-checks with TypeScript's node10 resolution,
 * which knows no self-reference, so notebooks/node_modules/safekeep links to the repository; and it runs cells as
 * CommonJS, so the kernel starts Node with --experimental-require-module (require() of the ESM package; Node ≥ 22.12
 * does this by default).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const NOTEBOOKS_DIR = join(ROOT, 'notebooks');
const KERNEL_BIN = join(NOTEBOOKS_DIR, 'kernel', 'node_modules', '.bin', 'tslab');

/** the notebooks, in order */
export function notebookFiles(): string[] {
  return readdirSync(NOTEBOOKS_DIR).filter((f) => /^\d\d-.*\.ipynb$/.test(f)).sort();
}

/** Why the notebooks cannot run here (one line with what to do), or null when they can. */
export function missingPrerequisite(): string | null {
  const nbconvert = spawnSync('jupyter', ['nbconvert', '--version'], { encoding: 'utf8' });
  if (nbconvert.error || nbconvert.status !== 0) {
    return 'Jupyter nbconvert is not installed (Debian: apt-get install jupyter-nbconvert python3-nbclient jupyter-client)';
  }
  if (!existsSync(KERNEL_BIN)) return 'the TypeScript kernel is not installed (npm ci --prefix notebooks/kernel)';
  return null;
}

/** the kernelspec (Jupyter's kernel.json) of the tslab kernel as the notebooks need it */
function kernelSpec(): Record<string, unknown> {
  return {
    argv: [KERNEL_BIN, 'kernel', '--config-path', '{connection_file}'],
    display_name: 'TypeScript',
    language: 'typescript',
    env: { NODE_OPTIONS: '--experimental-require-module --no-warnings' },
  };
}

/** Writes the kernelspec under `jupyterPath`/kernels/tslab (a JUPYTER_PATH entry or Jupyter's data folder). */
export function writeKernelSpec(jupyterPath: string): void {
  const dir = join(jupyterPath, 'kernels', 'tslab');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'kernel.json'), `${JSON.stringify(kernelSpec(), null, 1)}\n`);
}

/** notebooks/node_modules/safekeep → the repository, for tslab's type checker (see the file comment) */
export function linkPackage(): void {
  const link = join(NOTEBOOKS_DIR, 'node_modules', 'safekeep');
  const target = relative(dirname(link), ROOT);
  try {
    if (lstatSync(link).isSymbolicLink() && readlinkSync(link) === target) return;
    rmSync(link, { recursive: true, force: true });
  } catch {
    // not there yet
  }
  mkdirSync(dirname(link), { recursive: true });
  symlinkSync(target, link);
}

/** newest modification time of the .ts files under a folder */
function newestTs(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) t = Math.max(t, newestTs(p));
    else if (e.name.endsWith('.ts')) t = Math.max(t, statSync(p).mtimeMs);
  }
  return t;
}

/** `npm run build` when dist/ is missing or older than src/; returns a failure line or null */
export function buildIfStale(): string | null {
  const entry = join(ROOT, 'dist', 'index.js');
  if (existsSync(entry) && statSync(entry).mtimeMs >= newestTs(join(ROOT, 'src'))) return null;
  process.stderr.write('notebooks: dist/ is missing or older than src/: npm run build\n');
  const r = spawnSync('npm', ['run', 'build'], { cwd: ROOT, encoding: 'utf8' });
  return r.status === 0 ? null : `npm run build failed: ${(r.stdout + r.stderr).trim().split('\n').slice(-3).join(' | ')}`;
}

interface ExecuteOptions {
  /** JUPYTER_PATH holding the kernelspec */
  jupyterPath: string;
  /** write the executed notebook here (default: in place) */
  outputDir?: string;
  /** environment for the kernel (e.g. NB_WORK) */
  env?: NodeJS.ProcessEnv;
  timeoutS?: number;
}

/** Runs one notebook top to bottom with nbconvert; a failing cell fails the run (no --allow-errors). */
export function executeNotebook(file: string, o: ExecuteOptions): { ok: boolean; log: string } {
  const args = ['nbconvert', '--to', 'notebook', '--execute', `--ExecutePreprocessor.timeout=${o.timeoutS ?? 900}`,
    // no per-cell timestamps: committed notebooks change only when their outputs do
    '--ExecutePreprocessor.record_timing=False', ...(o.outputDir ? ['--output-dir', o.outputDir] : ['--inplace']), file];
  const r = spawnSync('jupyter', args, {
    cwd: NOTEBOOKS_DIR, encoding: 'utf8', env: { ...process.env, ...o.env, JUPYTER_PATH: o.jupyterPath }, maxBuffer: 64 << 20,
  });
  return { ok: r.status === 0, log: `${r.stdout}${r.stderr}` };
}

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const missing = missingPrerequisite();
  if (argv.includes('--install-kernel')) {
    if (!existsSync(KERNEL_BIN)) { process.stderr.write('notebooks: the TypeScript kernel is not installed (npm ci --prefix notebooks/kernel)\n'); return 1; }
    const data = spawnSync('jupyter', ['--data-dir'], { encoding: 'utf8' });
    if (data.status !== 0) { process.stderr.write(`notebooks: ${missing ?? 'jupyter --data-dir failed'}\n`); return 1; }
    writeKernelSpec(data.stdout.trim());
    linkPackage();
    process.stdout.write(`notebooks: kernel "tslab" (TypeScript) registered in ${data.stdout.trim()}/kernels; open them with: jupyter lab notebooks/\n`);
    return 0;
  }
  if (missing) { process.stderr.write(`notebooks: ${missing}\n`); return 1; }
  const names = argv.filter((a) => a.endsWith('.ipynb')).map((a) => a.replace(/^notebooks\//, ''));
  const todo = names.length ? names : notebookFiles();
  for (const n of todo) if (!existsSync(join(NOTEBOOKS_DIR, n))) { process.stderr.write(`notebooks: no notebooks/${n}\n`); return 2; }
  const built = buildIfStale();
  if (built) { process.stderr.write(`notebooks: ${built}\n`); return 1; }
  linkPackage();
  const jupyterPath = join(ROOT, '.cache', 'jupyter');
  writeKernelSpec(jupyterPath);
  for (const n of todo) {
    const t0 = Date.now();
    const r = executeNotebook(n, { jupyterPath });
    if (!r.ok) { process.stderr.write(`${r.log.trim().split('\n').slice(-25).join('\n')}\nnotebooks: ${n} failed (above)\n`); return 1; }
    process.stdout.write(`notebooks/${n}: executed, outputs written (${((Date.now() - t0) / 1000).toFixed(0)} s)\n`);
  }
  return 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) process.exitCode = await main();
