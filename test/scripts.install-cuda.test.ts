/**
 * `npm run install:cuda` (scripts/install-cuda.ts) either installs onnxruntime-node's CUDA provider and shows it loads,
 * or fails with one line and a non-zero exit — never exit 0 having installed nothing. Exercised end to end against a
 * copy of the onnxruntime-node package (the real one is never touched) and a scripted NuGet v3 feed on loopback that
 * serves a stand-in .nupkg: its provider files are placed, found present, and then honestly fail the load check (they
 * are not ELF libraries). The one branch a CPU host cannot reach is a provider that loads; `npm run check:gpu` covers
 * it on a GPU host.
 */
import { spawn } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

const require = createRequire(import.meta.url);
const realOrt = dirname(require.resolve('onnxruntime-node/package.json'));
const AdmZip = createRequire(join(realOrt, 'package.json'))('adm-zip') as new () => { addFile(n: string, b: Buffer): void; toBuffer(): Buffer };
const linuxX64 = process.platform === 'linux' && process.arch === 'x64';
const PKG = 'microsoft.ml.onnxruntime.gpu.linux';
const VERSION = (JSON.parse(readFileSync(join(realOrt, 'package.json'), 'utf8')) as { version: string }).version;
const FILES = ['libonnxruntime_providers_cuda.so', 'libonnxruntime_providers_shared.so', 'libonnxruntime_providers_tensorrt.so'];

let tmp = '';
/** the copy of node_modules/onnxruntime-node the script installs into */
let ortDir = '';
let binDir = '';

function standInNupkg(entries = FILES): Buffer {
  const zip = new AdmZip();
  for (const f of entries) zip.addFile(`runtimes/linux-x64/native/${f}`, Buffer.from(`stand-in for ${f}, not an ELF library\n`));
  return zip.toBuffer();
}

/** Runs the install script; resolves with exit code, stdout, stderr. */
function install(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    const p = spawn(process.execPath, ['--import', 'tsx', 'scripts/install-cuda.ts', '--ort-dir', ortDir, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d));
    p.stderr.on('data', (d: Buffer) => (stderr += d));
    p.on('close', (code) => res({ code: code ?? -1, stdout, stderr }));
  });
}

/** A NuGet v3 feed on loopback: index -> PackageBaseAddress -> version list -> .nupkg (or 404 per `versions`). */
function feed(nupkg: Buffer, versions: string[], truncate = false): Promise<{ server: Server; index: string }> {
  return new Promise((res) => {
    const server = createServer((req, reply) => {
      const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const json = (v: unknown) => { reply.writeHead(200, { 'content-type': 'application/json' }); reply.end(JSON.stringify(v)); };
      if (req.url === '/v3/index.json') json({ version: '3.0.0', resources: [{ '@id': `${base}/flat/`, '@type': 'PackageBaseAddress/3.0.0' }] });
      else if (req.url === `/flat/${PKG}/index.json`) json({ versions });
      else if (req.url === `/flat/${PKG}/${VERSION}/${PKG}.${VERSION}.nupkg` && truncate) {
        // the connection drops halfway through the package
        reply.writeHead(200, { 'content-length': nupkg.length });
        reply.write(nupkg.subarray(0, nupkg.length >> 1), () => reply.destroy());
      } else if (req.url === `/flat/${PKG}/${VERSION}/${PKG}.${VERSION}.nupkg`) { reply.writeHead(200, { 'content-length': nupkg.length }); reply.end(nupkg); }
      else { reply.writeHead(404); reply.end(); }
    });
    server.listen(0, '127.0.0.1', () => res({ server, index: `http://127.0.0.1:${(server.address() as { port: number }).port}/v3/index.json` }));
  });
}

async function withFeed<T>(nupkg: Buffer, versions: string[], body: (index: string) => Promise<T>, truncate = false): Promise<T> {
  const { server, index } = await feed(nupkg, versions, truncate);
  try {
    return await body(index);
  } finally {
    server.close();
  }
}

const providerFiles = () => FILES.filter((f) => existsSync(join(binDir, f)));
const clear = () => { for (const f of FILES) rmSync(join(binDir, f), { force: true }); };

before(() => {
  if (!linuxX64) return;
  tmp = mkdtempSync(join(tmpdir(), 'safekeep-install-cuda-'));
  // a real, loadable onnxruntime-node (JS, metadata, binding and runtime copied: onnxruntime looks for providers
  // next to its own libonnxruntime.so.1, so links would point it back at the real folder)
  ortDir = join(tmp, 'node_modules', 'onnxruntime-node');
  binDir = join(ortDir, 'bin', 'napi-v6', 'linux', 'x64');
  mkdirSync(binDir, { recursive: true });
  for (const d of ['dist', 'script']) cpSync(join(realOrt, d), join(ortDir, d), { recursive: true });
  copyFileSync(join(realOrt, 'package.json'), join(ortDir, 'package.json'));
  for (const f of ['libonnxruntime.so.1', 'onnxruntime_binding.node']) copyFileSync(join(realOrt, 'bin/napi-v6/linux/x64', f), join(binDir, f));
  let common = require.resolve('onnxruntime-common', { paths: [realOrt] });
  while (basename(common) !== 'onnxruntime-common') common = dirname(common);
  symlinkSync(common, join(tmp, 'node_modules', 'onnxruntime-common'));
});

after(() => { if (tmp) rmSync(tmp, { recursive: true, force: true }); });

const skip = linuxX64 ? false : 'onnxruntime-node downloads its CUDA provider for linux/x64 only';

test('an unreachable feed: one line naming the reason and the offline route, exit 1, nothing placed', { skip }, async () => {
  clear();
  // a loopback port nothing listens on
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  const r = await install(['--index', `http://127.0.0.1:${port}/v3/index.json`]);
  assert.equal(r.code, 1);
  assert.equal(r.stdout, '');
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0]!, /^install:cuda: cannot reach the NuGet feed http:\/\/127\.0\.0\.1:\d+\/v3\/index\.json \(.*ECONNREFUSED.*\) — .*--from/);
  assert.deepEqual(providerFiles(), []);
});

test('a feed without the needed version: exit 1, names package and version', { skip }, async () => {
  clear();
  const r = await withFeed(standInNupkg(), ['1.0.0'], (index) => install(['--index', index]));
  assert.equal(r.code, 1);
  assert.match(r.stderr, new RegExp(`^install:cuda: the feed .* has no Microsoft\\.ML\\.OnnxRuntime\\.Gpu\\.Linux ${VERSION.replace(/\./g, '\\.')} `));
  assert.deepEqual(providerFiles(), []);
});

test('downloaded and placed, but a provider that does not load fails the load check: exit 1, files present, no leftovers', { skip }, async () => {
  clear();
  const r = await withFeed(standInNupkg(), [VERSION], (index) => install(['--index', index]));
  assert.equal(r.code, 1, r.stderr);
  assert.deepEqual(providerFiles(), FILES);
  assert.match(readFileSync(join(binDir, FILES[0]!), 'utf8'), /^stand-in for libonnxruntime_providers_cuda\.so/);
  const last = r.stderr.trim().split('\n').pop()!;
  assert.match(last, /^install:cuda: onnxruntime-node .*'s CUDA provider .* is in .*, but it does not load: .*Failed to load shared library \(.*libonnxruntime_providers_\w+\.so: [^)]+\) — it needs the CUDA 12 and cuDNN 9 libraries/);
  // the download's work folder and the .partial files are gone
  assert.deepEqual(readdirSync(binDir).sort(), ['libonnxruntime.so.1', 'onnxruntime_binding.node', ...FILES].sort());
});

test('already present: no download (the feed is unreachable), straight to the load check', { skip }, async () => {
  assert.deepEqual(providerFiles(), FILES, 'needs the previous test');
  const r = await install(['--index', 'http://127.0.0.1:9/v3/index.json']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /was already in .*, but it does not load/);
});

test('a download that breaks off: exit 1 with the bytes received, nothing placed, no work folder left', { skip }, async () => {
  clear();
  const r = await withFeed(standInNupkg(), [VERSION], (index) => install(['--index', index]), true);
  assert.equal(r.code, 1);
  assert.match(r.stderr.trim().split('\n').pop()!, /^install:cuda: the download of http:\/\/127\.0\.0\.1:\d+\/.*\.nupkg (broke off after|ended at) .* run it again/);
  assert.deepEqual(providerFiles(), []);
  assert.deepEqual(readdirSync(binDir).sort(), ['libonnxruntime.so.1', 'onnxruntime_binding.node']);
});

test('--no-load-check places the files and says the load is unchecked (exit 0)', { skip }, async () => {
  clear();
  const r = await withFeed(standInNupkg(), [VERSION], (index) => install(['--index', index, '--no-load-check']));
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^install:cuda: .* is in .*; load not checked \(--no-load-check\): run `npm run check:gpu`/);
  assert.deepEqual(providerFiles(), FILES);
});

test('--from: an offline .nupkg; a package missing a provider file or a missing file fails with the reason', { skip }, async () => {
  clear();
  const partial = join(tmp, 'partial.nupkg');
  writeFileSync(partial, standInNupkg(FILES.slice(0, 1)));
  let r = await install(['--from', partial, '--no-load-check']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /^install:cuda: .*partial\.nupkg has no runtimes\/linux-x64\/native\/libonnxruntime_providers_shared\.so — it is not Microsoft\.ML\.OnnxRuntime\.Gpu\.Linux/);
  assert.deepEqual(providerFiles(), [], 'nothing placed from an incomplete package');
  r = await install(['--from', join(tmp, 'nope.nupkg')]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^install:cuda: --from .*nope\.nupkg: no such file\n$/);
  const full = join(tmp, 'full.nupkg');
  writeFileSync(full, standInNupkg());
  r = await install(['--from', full, '--no-load-check']);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(providerFiles(), FILES);
});

test('bad flags exit 2 with the usage', { skip }, async () => {
  const r = await install(['--frm', 'x']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^install:cuda: unknown flag --frm\. usage: npm run install:cuda/);
});
