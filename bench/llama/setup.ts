/**
 * `npm run bench:llama:setup`: installs node-llama-cpp (llama.cpp's Node binding, with prebuilt CPU binaries) into
 * the git-ignored scratch folder `.cache/llama-node/` for `npm run bench:llama`. Never a dependency of safekeep: it
 * lives in its own package.json there, and bench/llama.ts imports it by path.
 *
 * - pinned exactly: node-llama-cpp 3.21.1 and its linux-x64 binary package @node-llama-cpp/linux-x64 3.21.1 (newer
 *   node-llama-cpp releases did not install here);
 * - `--omit=optional`: node-llama-cpp lists every platform's binaries (CUDA, Vulkan, …) as optional dependencies;
 *   only the plain CPU package is wanted, and it is named explicitly;
 * - `--ignore-scripts`: node-llama-cpp's postinstall would look for binaries and otherwise download and build
 *   llama.cpp from source. The bench calls getLlama({gpu: false, build: 'never', skipDownload: true}), so it uses the
 *   prebuilt CPU binary or fails — it never builds, never downloads anything but the two npm packages.
 * Other platforms: pass `--binary @node-llama-cpp/mac-arm64-metal` (or the one for yours) to install that instead.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const NODE_LLAMA_CPP_VERSION = '3.21.1';
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** the scratch folder node-llama-cpp is installed into */
export const LLAMA_NODE_DIR = join(root, '.cache', 'llama-node');

function defaultBinaryPackage(): string {
  const arch = process.arch === 'arm64' ? 'arm64' : process.arch;
  if (process.platform === 'darwin') return arch === 'arm64' ? '@node-llama-cpp/mac-arm64-metal' : '@node-llama-cpp/mac-x64';
  if (process.platform === 'win32') return `@node-llama-cpp/win-${arch}`;
  return `@node-llama-cpp/linux-${arch}`;
}

function installedVersion(): string | null {
  const p = join(LLAMA_NODE_DIR, 'node_modules', 'node-llama-cpp', 'package.json');
  if (!existsSync(p)) return null;
  return (JSON.parse(readFileSync(p, 'utf8')) as { version: string }).version;
}

/** node-llama-cpp installed in the scratch folder (installing it first, with one stderr line, when missing) */
export function ensureLlamaNode(binary = defaultBinaryPackage(), force = false): void {
  if (!force && installedVersion() === NODE_LLAMA_CPP_VERSION) return;
  process.stderr.write(`bench:llama: installing node-llama-cpp@${NODE_LLAMA_CPP_VERSION} + ${binary} (prebuilt llama.cpp, CPU) into ${LLAMA_NODE_DIR} (npm, --ignore-scripts; not a safekeep dependency) ...\n`);
  mkdirSync(LLAMA_NODE_DIR, { recursive: true });
  writeFileSync(join(LLAMA_NODE_DIR, 'package.json'), JSON.stringify({
    name: 'safekeep-bench-llama-node', private: true, type: 'module',
    description: 'scratch install for `npm run bench:llama` (bench/llama/setup.ts); not part of safekeep',
    dependencies: { 'node-llama-cpp': NODE_LLAMA_CPP_VERSION, [binary]: NODE_LLAMA_CPP_VERSION },
  }, null, 2) + '\n');
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const r = spawnSync(npm, ['install', '--omit=optional', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: LLAMA_NODE_DIR, stdio: ['ignore', 2, 2] });
  if (r.status !== 0 || installedVersion() !== NODE_LLAMA_CPP_VERSION) {
    throw new Error(`bench:llama: npm install of node-llama-cpp@${NODE_LLAMA_CPP_VERSION} in ${LLAMA_NODE_DIR} failed (exit ${r.status})`);
  }
}

/** The parts of node-llama-cpp 3.21's API the bench uses (it is not a dependency, so no types from it). */
export interface NlcSequence {
  clearHistory(): Promise<void>;
  evaluate(tokens: number[], options?: Record<string, unknown>): AsyncGenerator<number, void, void>;
  controlledEvaluate(input: (number | [number, Record<string, unknown>])[], options?: Record<string, unknown>): Promise<({ next?: { token?: number; probabilities?: Map<number, number> } } | undefined)[]>;
}
export interface NlcContext {
  getSequence(): NlcSequence;
  readonly currentThreads: number;
  readonly idealThreads: number;
  readonly batchSize: number;
  readonly contextSize: number;
  readonly flashAttention: 'auto' | boolean;
  readonly kvCacheKeyType: unknown;
  dispose(): Promise<void>;
}
export interface NlcModel {
  createContext(options: Record<string, unknown>): Promise<NlcContext>;
  dispose(): Promise<void>;
}
export interface NlcLlama {
  readonly gpu: string | false;
  readonly buildType: string;
  readonly llamaCppRelease: { repo: string; release: string };
  readonly systemInfo: string;
  loadModel(options: Record<string, unknown>): Promise<NlcModel>;
  dispose(): Promise<void>;
}

/**
 * llama.cpp through node-llama-cpp, CPU only, the prebuilt binary or an error (never a build or a download);
 * `maxThreads: 0` lifts node-llama-cpp's thread budget, so a context's `threads` is the count llama.cpp runs
 * (its n_threads and n_threads_batch both).
 */
export async function loadLlamaCpp(): Promise<NlcLlama> {
  const entry = join(LLAMA_NODE_DIR, 'node_modules', 'node-llama-cpp', 'dist', 'index.js');
  if (!existsSync(entry)) throw new Error(`node-llama-cpp is not installed in ${LLAMA_NODE_DIR}: npm run bench:llama:setup`);
  const mod = (await import(pathToFileURL(entry).href)) as { getLlama(o: Record<string, unknown>): Promise<NlcLlama> };
  const llama = await mod.getLlama({ gpu: false, build: 'never', skipDownload: true, usePrebuiltBinaries: true, progressLogs: false, logLevel: 'error', maxThreads: 0 });
  if (llama.gpu !== false) throw new Error(`node-llama-cpp loaded a ${llama.gpu} backend; the bench wants the CPU one`);
  return llama;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const i = process.argv.indexOf('--binary');
  ensureLlamaNode(i >= 0 ? process.argv[i + 1] : undefined, true);
  const llama = await loadLlamaCpp();
  process.stdout.write(`node-llama-cpp ${installedVersion()} (${llama.buildType}, ${llama.llamaCppRelease.repo} ${llama.llamaCppRelease.release}), CPU: ${llama.systemInfo.trim()}\n`);
  await llama.dispose();
}
