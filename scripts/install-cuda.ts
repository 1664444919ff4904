/**
 * `npm run install:cuda [-- --from FILE.nupkg] [--index URL] [--force] [--no-load-check]`: install onnxruntime-node's
 * CUDA execution provider (libonnxruntime_providers_cuda.so and its companions) next to the binding, then check that
 * it loads by running a one-node session on the CUDA provider. It either ends with the provider installed and
 * loading (exit 0), or with one line on stderr saying why not and what to do (exit 1; bad flags: exit 2).
 *
 * Why not onnxruntime-node's own installer (script/install.js, 1.30): its flag parser's `default:` branch validates
 * `--onnxruntime-node-install=cuda12` and then falls out of the switch without returning it, so the flag reads as
 * "not given"; under `npm run` the npm_config_local_prefix / npm_package_json variables then make it take the "local
 * install" early exit — exit 0, nothing installed. And `.npmrc` sets its switch to skip (onnxruntime-node-install),
 * so its postinstall does nothing under `npm ci` (nor under `npm run`, whose scripts get the same setting). This script uses the installer's own metadata (script/install-metadata.js: which files, which
 * NuGet package, which version — always the version of the installed binding) and does the download itself.
 *
 * Offline hosts: download the .nupkg the failure line names on a machine with internet, copy it over, and run
 * `npm run install:cuda -- --from <file>`. `--index` points at a NuGet v3 mirror (e.g. a company feed).
 * `--no-load-check` only places the files (a cluster login node without a GPU); then run `npm run check:gpu` on a GPU
 * node. `--ort-dir` installs into another onnxruntime-node package folder (the tests use a copy).
 */
import { spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { DataType, encodeModel } from '../src/engine/graph/onnx/proto.ts';
import { formatBytes } from '../src/hub/progress.ts';

/** a failure the user can act on: one line, exit code (1: could not install, 2: bad flags) */
class InstallError extends Error {
  constructor(message: string, readonly exitCode = 1) {
    super(message);
  }
}

const USAGE = 'usage: npm run install:cuda [-- --from FILE.nupkg] [--index URL] [--force] [--no-load-check]';
const DEFAULT_INDEX = 'https://api.nuget.org/v3/index.json';
/** nuget.org's PackageBaseAddress, to name the download URL even when the index itself cannot be reached */
const NUGET_ORG_BASE = 'https://api.nuget.org/v3-flatcontainer/';
const INDEX_TIMEOUT_MS = 60_000;

interface Flags {
  from: string | null;
  index: string;
  force: boolean;
  loadCheck: boolean;
  ortDir: string | null;
}

function parseFlags(argv: string[]): Flags {
  const f: Flags = { from: null, index: DEFAULT_INDEX, force: false, loadCheck: true, ortDir: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined || v.startsWith('--')) throw new InstallError(`${a} needs a value. ${USAGE}`, 2);
      return v;
    };
    if (a === '--from') f.from = value();
    else if (a === '--index') f.index = value();
    else if (a === '--ort-dir') f.ortDir = value();
    else if (a === '--force') f.force = true;
    else if (a === '--no-load-check') f.loadCheck = false;
    else if (a === '--help' || a === '-h') { process.stdout.write(`${USAGE}\n`); process.exit(0); }
    else throw new InstallError(`unknown flag ${a}. ${USAGE}`, 2);
  }
  return f;
}

interface Target {
  /** the onnxruntime-node package folder */
  ortDir: string;
  version: string;
  /** the folder holding onnxruntime_binding.node and libonnxruntime.so.1, where onnxruntime looks for providers */
  binDir: string;
  packageName: string;
  packageVersion: string;
  /** file name in binDir -> entry path in the .nupkg */
  files: { name: string; entry: string }[];
}

interface InstallMetadata {
  manifests: Record<string, Record<string, { package: string; path: string }>>;
  packages: Record<string, { name: string; versions: { feed: string; version: string }[] }>;
}

/** What to install where, from onnxruntime-node's own metadata (so it follows the installed binding's version). */
function target(ortDir: string): Target {
  const pkg = JSON.parse(readFileSync(join(ortDir, 'package.json'), 'utf8')) as { version: string };
  const platform = `${process.platform}/${process.arch}`;
  const meta = createRequire(join(ortDir, 'package.json'))('./script/install-metadata.js') as InstallMetadata;
  const manifest = meta.manifests[`${platform}:cuda12`];
  if (!manifest) {
    const where = Object.keys(meta.manifests).filter((k) => k.endsWith(':cuda12')).map((k) => k.split(':')[0]).join(', ');
    throw new InstallError(`onnxruntime-node ${pkg.version} has no CUDA provider download for ${platform} (only for ${where}); use --device cpu`);
  }
  const entries = Object.entries(manifest);
  const pkgInfo = meta.packages[entries[0]![1].package];
  const nuget = pkgInfo?.versions.find((v) => v.feed === 'nuget');
  if (!pkgInfo || !nuget) throw new InstallError(`onnxruntime-node ${pkg.version}'s install metadata names no NuGet package for ${platform}`);
  return {
    ortDir,
    version: pkg.version,
    binDir: join(ortDir, 'bin', 'napi-v6', process.platform, process.arch),
    packageName: pkgInfo.name,
    packageVersion: nuget.version,
    files: entries.map(([file, m]) => ({ name: file.replace(/^\.\//, ''), entry: m.path })),
  };
}

function nupkgFileName(t: Target): string {
  return `${t.packageName.toLowerCase()}.${t.packageVersion.toLowerCase()}.nupkg`;
}

function nupkgUrl(base: string, t: Target): string {
  return `${base}${t.packageName.toLowerCase()}/${t.packageVersion.toLowerCase()}/${nupkgFileName(t)}`;
}

/** the first line of an error, with the cause fetch hides behind "fetch failed" */
function why(e: unknown): string {
  const err = e as Error & { cause?: { code?: string; message?: string } };
  const cause = err.cause?.code ?? err.cause?.message;
  const msg = String(err?.message ?? e).split('\n')[0]!;
  return cause && !msg.includes(cause) ? `${msg}: ${cause}` : msg;
}

async function getJson(url: string): Promise<unknown> {
  const res = await fetch(url, { signal: AbortSignal.timeout(INDEX_TIMEOUT_MS) });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  return res.json();
}

/** the .nupkg URL from a NuGet v3 index: PackageBaseAddress/3.0.0 + the package's version list */
async function resolveNupkg(index: string, t: Target): Promise<string> {
  const offline = `on a machine with internet download ${nupkgUrl(index === DEFAULT_INDEX ? NUGET_ORG_BASE : '<PackageBaseAddress of your feed>/', t)} and run \`npm run install:cuda -- --from <that file>\``;
  let idx: { resources?: { '@id': string; '@type': string }[] };
  try {
    idx = (await getJson(index)) as typeof idx;
  } catch (e) {
    throw new InstallError(`cannot reach the NuGet feed ${index} (${why(e)}) — ${offline}, or point --index at a NuGet mirror`);
  }
  const base = idx.resources?.find((r) => r['@type'] === 'PackageBaseAddress/3.0.0')?.['@id'];
  if (!base) throw new InstallError(`${index} is not a NuGet v3 index (no PackageBaseAddress/3.0.0 resource) — point --index at a NuGet v3 feed`);
  const baseSlash = base.endsWith('/') ? base : `${base}/`;
  let versions: string[] = [];
  try {
    versions = ((await getJson(`${baseSlash}${t.packageName.toLowerCase()}/index.json`)) as { versions?: string[] }).versions ?? [];
  } catch (e) {
    if (!/HTTP 404/.test(why(e))) throw new InstallError(`cannot read ${t.packageName}'s versions from ${baseSlash} (${why(e)}) — ${offline}`);
  }
  if (!versions.includes(t.packageVersion.toLowerCase())) {
    throw new InstallError(`the feed ${index} has no ${t.packageName} ${t.packageVersion} (the version onnxruntime-node ${t.version} needs) — ${offline}`);
  }
  return nupkgUrl(baseSlash, t);
}

/** Streams `url` to `dest` with byte progress on stderr. */
async function download(url: string, dest: string): Promise<void> {
  const offline = `download ${url} on a machine with internet and run \`npm run install:cuda -- --from <that file>\``;
  let res: Response;
  try {
    res = await fetch(url);
  } catch (e) {
    throw new InstallError(`cannot download ${url} (${why(e)}) — ${offline}`);
  }
  if (!res.ok || !res.body) throw new InstallError(`cannot download ${url} (HTTP ${res.status}) — ${offline}`);
  const total = Number(res.headers.get('content-length') ?? 0);
  let done = 0;
  let last = Date.now();
  // streamed to the file: the GPU package is hundreds of MB
  const count = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      done += chunk.length;
      if (Date.now() - last > 5000) {
        last = Date.now();
        process.stderr.write(`install:cuda: ${formatBytes(done)}${total ? ` of ${formatBytes(total)}` : ''}\n`);
      }
      cb(null, chunk);
    },
  });
  try {
    await pipeline(Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>), count, createWriteStream(dest));
  } catch (e) {
    throw new InstallError(`the download of ${url} broke off after ${formatBytes(done)} (${why(e)}) — run it again, or ${offline}`);
  }
  if (total && done !== total) throw new InstallError(`the download of ${url} ended at ${formatBytes(done)} of ${formatBytes(total)} — run it again`);
}

interface ZipEntry { getData(): Buffer }
interface Zip { getEntry(name: string): ZipEntry | null }

/** Extracts the provider files from the .nupkg (a zip) into binDir: each written beside its name, then renamed. */
function place(nupkg: string, t: Target): void {
  // adm-zip is onnxruntime-node's own dependency (its installer unpacks the same package with it)
  const AdmZip = createRequire(createRequire(import.meta.url).resolve('onnxruntime-node/package.json'))('adm-zip') as new (p: string) => Zip;
  let zip: Zip;
  try {
    zip = new AdmZip(nupkg);
  } catch (e) {
    throw new InstallError(`${nupkg} is not a readable .nupkg (${why(e)}) — download it again`);
  }
  const data = t.files.map((f) => {
    const entry = zip.getEntry(f.entry);
    if (!entry) throw new InstallError(`${nupkg} has no ${f.entry} — it is not ${t.packageName} ${t.packageVersion}`);
    return { ...f, bytes: entry.getData() };
  });
  mkdirSync(t.binDir, { recursive: true });
  for (const f of data) {
    const dest = join(t.binDir, f.name);
    writeFileSync(`${dest}.partial`, f.bytes);
    renameSync(`${dest}.partial`, dest);
  }
}

/** a one-node ONNX model, y = x + x over float [1], to start a session on the CUDA provider */
function addModel(): Uint8Array {
  const io = (name: string) => ({ name, elemType: DataType.FLOAT, dims: [1] });
  return encodeModel({
    opsets: { '': 17 },
    graph: { name: 'cuda-check', nodes: [{ opType: 'Add', inputs: ['x', 'x'], outputs: ['y'], name: 'add' }], initializers: [], inputs: [io('x')], outputs: [io('y')] },
  });
}

/**
 * Starts a session with only the CUDA provider and runs it, in a child process (a provider that fails to load can
 * take its process down). Returns null when it ran and gave 1.5 + 1.5 = 3, else the reason.
 */
function loadCheck(t: Target): string | null {
  const child = `
    const ort = require(process.argv[1]);
    ort.env.logLevel = 'error';
    (async () => {
      try {
        const s = await ort.InferenceSession.create(Buffer.from(process.argv[2], 'base64'), { executionProviders: ['cuda'], logSeverityLevel: 3 });
        const r = await s.run({ x: new ort.Tensor('float32', Float32Array.of(1.5), [1]) });
        const y = r.y.data[0];
        process.stdout.write(JSON.stringify(y === 3 ? { ok: true } : { ok: false, error: 'the CUDA session ran but computed 1.5 + 1.5 = ' + y }));
      } catch (e) {
        process.stdout.write(JSON.stringify({ ok: false, error: String((e && e.message) || e) }));
      }
    })();`;
  const r = spawnSync(process.execPath, ['-e', child, t.ortDir, Buffer.from(addModel()).toString('base64')], { encoding: 'utf8', timeout: 180_000 });
  try {
    const out = JSON.parse(r.stdout) as { ok: boolean; error?: string };
    if (out.ok) return null;
    // the exception says only "Failed to load shared library"; onnxruntime's log line names the library and dlerror()
    const detail = /with error: ([^\n\x1b]*)/.exec(r.stderr ?? '')?.[1]?.trim();
    return `${(out.error ?? 'unknown error').split('\n')[0]!.trim()}${detail ? ` (${detail})` : ''}`;
  } catch {
    const tail = (r.stderr || '').trim().split('\n').pop() ?? '';
    return `the check process ${r.signal ? `was killed by ${r.signal}` : `exited with code ${r.status}`}${tail ? `: ${tail}` : ''}`;
  }
}

async function main(): Promise<string> {
  const flags = parseFlags(process.argv.slice(2));
  const ortDir = resolve(flags.ortDir ?? dirname(createRequire(import.meta.url).resolve('onnxruntime-node/package.json')));
  const t = target(ortDir);
  const shown = relative(process.cwd(), t.binDir) || '.';
  const present = (): string[] => t.files.map((f) => f.name).filter((n) => !existsSync(join(t.binDir, n)) || statSync(join(t.binDir, n)).size === 0);
  const wasInstalled = present().length === 0;
  if (!wasInstalled || flags.force || flags.from) {
    if (flags.from) {
      if (!existsSync(flags.from)) throw new InstallError(`--from ${flags.from}: no such file`, 2);
      place(flags.from, t);
    } else {
      const url = await resolveNupkg(flags.index, t);
      // the package goes next to its destination, not into the system temp folder, and is removed either way
      const work = join(t.binDir, '.install-cuda');
      mkdirSync(work, { recursive: true });
      try {
        process.stderr.write(`install:cuda: downloading ${url}\n`);
        const file = join(work, nupkgFileName(t));
        await download(url, file);
        place(file, t);
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    }
    const missing = present();
    if (missing.length) throw new InstallError(`after unpacking, ${missing.join(', ')} is still missing from ${shown} — check that folder is writable`);
  }
  const what = `onnxruntime-node ${t.version}'s CUDA provider (${t.packageName} ${t.packageVersion}) ${wasInstalled && !flags.force && !flags.from ? 'was already' : 'is'} in ${shown}`;
  if (!flags.loadCheck) return `${what}; load not checked (--no-load-check): run \`npm run check:gpu\` on the GPU host`;
  const err = loadCheck(t);
  if (err !== null) {
    throw new InstallError(`${what}, but it does not load: ${err} — it needs the CUDA 12 and cuDNN 9 libraries on the loader path (LD_LIBRARY_PATH) and a GPU; on a node without a GPU use --no-load-check, then run \`npm run check:gpu\` on the GPU host`);
  }
  return `${what} and loads (a session ran on the CUDA provider). Next: \`npm run check:gpu\`, then \`--device cuda\``;
}

try {
  process.stdout.write(`install:cuda: ${await main()}\n`);
} catch (e) {
  // anything else (an unwritable folder, a full disk) is still one line, never a stack dump or exit 0
  process.stderr.write(`install:cuda: ${e instanceof InstallError ? e.message : `failed: ${why(e)}`}\n`);
  process.exitCode = e instanceof InstallError ? e.exitCode : 1;
}
