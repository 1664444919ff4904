/**
 * Hub ids and the Hugging Face hub cache (src/hub/hf-cache.ts, resolve.ts): a checkpoint in the cache layout
 * (`models--org--name/refs/main`, `snapshots/<commit>/` symlinked into `blobs/`, as huggingface_hub writes it) is used
 * in place without the network; a half-finished snapshot never is; HF_HUB_OFFLINE=1 never reaches the hub; `pull
 * --hf-cache` writes that layout (blobs named by sha256 / git blob sha1, refs written) and it resolves offline; a
 * name that looks like a path and does not exist is "no such folder", not a hub lookup.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { pullModel } from '../src/hub/pull.ts';
import { resolveModel } from '../src/hub/resolve.ts';
import { findCachedSnapshot, linkSnapshotIntoCache } from '../src/hub/hf-cache.ts';
import { startMockHub } from './helpers/mockHub.ts';
import { repoRoot } from './helpers/shared.ts';

const root = mkdtempSync(join(tmpdir(), 'safekeep-hfc-'));
const ck = await writeRandomCheckpoint(join(root, 'src'), 'llama', { seed: 3, numLayers: 2, shards: 2 });
const files: Record<string, Buffer> = {};
for (const f of readdirSync(ck)) files[f] = readFileSync(join(ck, f));
const hub = await startMockHub([{ id: 'acme/cached', files, revisions: { main: 'c'.repeat(40) } }]);
after(async () => { await hub.close(); rmSync(root, { recursive: true, force: true }); });

/** a port with nothing listening: any request would fail */
const dead = 'http://127.0.0.1:9';
const q = { progress: false };
const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** The layout huggingface_hub writes: blobs by content hash, snapshot symlinks, refs/main. */
function writePythonCache(cache: string, repoId: string, commit: string, names: string[]): string {
  const repo = join(cache, `models--${repoId.replace('/', '--')}`);
  const snap = join(repo, 'snapshots', commit);
  mkdirSync(join(repo, 'blobs'), { recursive: true });
  mkdirSync(snap, { recursive: true });
  mkdirSync(join(repo, 'refs'), { recursive: true });
  for (const n of names) {
    const oid = sha256(files[n]!);
    writeFileSync(join(repo, 'blobs', oid), files[n]!);
    symlinkSync(join('..', '..', 'blobs', oid), join(snap, n));
  }
  writeFileSync(join(repo, 'refs', 'main'), commit);
  return snap;
}

test('a checkpoint Python downloaded into HF_HUB_CACHE is used in place, offline and without any request', async () => {
  const cache = join(root, 'hf1');
  const snap = writePythonCache(cache, 'acme/cached', 'd'.repeat(40), Object.keys(files));
  const before = hub.requests.length;
  const dir = await resolveModel('acme/cached', { hfCache: cache, modelsDir: join(root, 'models1'), endpoint: hub.endpoint, ...q });
  assert.equal(dir, snap);
  assert.equal(hub.requests.length, before, 'no request to the hub');
  const c = await loadCheckpoint(dir);
  assert.equal(c.config.numLayers, 2);
  assert.equal(await resolveModel('acme/cached', { hfCache: cache, endpoint: dead, offline: true, ...q }), snap);
});

test('a half-finished snapshot (a shard missing) is not used: offline it is an error naming where it looked', async () => {
  const cache = join(root, 'hf2');
  writePythonCache(cache, 'acme/cached', 'e'.repeat(40), Object.keys(files).filter((n) => n !== 'model-00002-of-00002.safetensors'));
  assert.equal(findCachedSnapshot(cache, 'acme/cached'), null);
  await assert.rejects(resolveModel('acme/cached', { hfCache: cache, modelsDir: join(root, 'm2'), endpoint: dead, offline: true, ...q }),
    /^SafekeepError: --model acme\/cached: not downloaded \(looked in .*m2\/acme--cached and the Hugging Face cache .*hf2\) and HF_HUB_OFFLINE is set$/);
  // online, it is pulled (into models/, the Python cache is left alone)
  const dir = await resolveModel('acme/cached', { hfCache: cache, modelsDir: join(root, 'm2'), endpoint: hub.endpoint, ...q });
  assert.equal(dir, join(root, 'm2', 'acme--cached'));
  await loadCheckpoint(dir);
});

test('HF_HUB_OFFLINE: pull refuses before any request', async () => {
  const before = hub.requests.length;
  await assert.rejects(pullModel('acme/cached', { endpoint: hub.endpoint, destDir: join(root, 'x'), offline: true, ...q }), /HF_HUB_OFFLINE is set, so nothing is downloaded/);
  assert.equal(hub.requests.length, before);
  assert.ok(!existsSync(join(root, 'x')));
});

test('pull --hf-cache writes the hub cache layout; it then resolves offline and loads', async () => {
  const cache = join(root, 'hf3');
  const r = await pullModel('acme/cached', { endpoint: hub.endpoint, hfCache: cache, ...q });
  const repo = join(cache, 'models--acme--cached');
  const commit = 'c'.repeat(40);
  assert.equal(r.dir, join(repo, 'snapshots', commit));
  assert.equal(readFileSync(join(repo, 'refs', 'main'), 'utf8'), commit);
  for (const n of Object.keys(files)) {
    const p = join(r.dir, n);
    assert.ok(lstatSync(p).isSymbolicLink(), `${n} is a symlink`);
    const lfs = n.endsWith('.safetensors');
    const oid = lfs ? sha256(files[n]!) : createHash('sha1').update(`blob ${files[n]!.length}\0`).update(files[n]!).digest('hex');
    assert.equal(readlinkSync(p), join('..', '..', 'blobs', oid), n);
    assert.deepEqual(readFileSync(p), files[n]);
  }
  // the snapshot holds the repo's files only (Python lists everything in it as part of the revision)
  assert.deepEqual(readdirSync(r.dir).sort(), Object.keys(files).sort());
  assert.equal(await resolveModel('acme/cached', { hfCache: cache, endpoint: dead, offline: true, ...q }), r.dir);
  await loadCheckpoint(r.dir);
  // a second pull reuses everything
  const again = await pullModel('acme/cached', { endpoint: hub.endpoint, hfCache: cache, ...q });
  assert.equal(again.downloaded, 0);
});

test('a name that looks like a path and does not exist is "no such folder", never a hub request', async () => {
  const before = hub.requests.length;
  const cwd = process.cwd();
  process.chdir(root);
  try {
    mkdirSync(join(root, 'ckpts'), { recursive: true });
    for (const name of ['models/nope', './x', '../y/z', '/abs/nope', 'ckpts/nope', 'acme/cached/']) {
      await assert.rejects(resolveModel(name, { endpoint: hub.endpoint, hfCache: join(root, 'none'), ...q }),
        (e: Error) => e.message === `--model ${name}: no such folder`, name);
    }
  } finally {
    process.chdir(cwd);
  }
  assert.equal(hub.requests.length, before);
});

test('CLI: HF_HUB_OFFLINE=1 and an id not downloaded → one line, exit 2; HF_HUB_CACHE makes inspect find a Python download', async () => {
  const cache = join(root, 'hf4');
  writePythonCache(cache, 'acme/cached', 'f'.repeat(40), Object.keys(files));
  const run = (args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> => new Promise((res) => {
    execFile(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { cwd: root, env: { ...process.env, HF_TOKEN: '', HF_ENDPOINT: dead, SAFEKEEP_MODELS: join(root, 'cm'), ...env }, timeout: 60_000 },
      (err, stdout, stderr) => res({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }));
  });
  const [a, b, c] = await Promise.all([
    run(['pull', 'acme/other'], { HF_HUB_OFFLINE: '1' }),
    run(['inspect', '--model', 'acme/other'], { HF_HUB_OFFLINE: '1', HF_HUB_CACHE: cache }),
    run(['inspect', '--model', 'acme/cached'], { HF_HUB_OFFLINE: '1', HF_HUB_CACHE: cache }),
  ]);
  assert.equal(a.code, 2);
  assert.match(a.stderr, /^safekeep: acme\/other: HF_HUB_OFFLINE is set, so nothing is downloaded \(unset it to pull\)\n$/);
  assert.equal(b.code, 2);
  assert.match(b.stderr, /^safekeep: --model acme\/other: not downloaded .* and HF_HUB_OFFLINE is set\n$/);
  assert.equal(c.code, 0, c.stderr);
  assert.match(c.stdout, /family\s+llama/);
});

test('pull --hf-cache takes only a 40-hex commit from the hub and a relative ref name: nothing is written outside the repo folder, no other model is touched', async () => {
  const victimSha = 'e'.repeat(40);
  const evilHub = await startMockHub([
    { id: 'acme/escape', files, revisions: { main: '../../../escaped' } },
    { id: 'acme/overwrite', files, revisions: { main: `../../models--acme--victim/snapshots/${victimSha}` } },
    { id: 'acme/upper', files, revisions: { main: 'C'.repeat(40) } },
  ]);
  try {
    const base = join(root, 'hf5');
    const cache = join(base, 'cache');
    const victim = writePythonCache(cache, 'acme/victim', victimSha, ['config.json']);
    const before = readFileSync(join(victim, 'config.json'));
    for (const id of ['acme/escape', 'acme/overwrite', 'acme/upper']) {
      await assert.rejects(pullModel(id, { endpoint: evilHub.endpoint, hfCache: cache, ...q }),
        (e: Error) => e.name === 'SafekeepError' && /commit .* not a 40-hex-digit sha/.test(e.message), id);
    }
    assert.ok(!existsSync(join(base, 'escaped')), 'nothing written outside the cache');
    assert.deepEqual(readdirSync(victim), ['config.json'], "the other model's snapshot keeps its files");
    assert.deepEqual(readFileSync(join(victim, 'config.json')), before);
    assert.ok(lstatSync(join(victim, 'config.json')).isSymbolicLink());
    // a revision naming a path outside refs/ is refused before any request
    const n = evilHub.requests.length;
    for (const revision of ['../../../x', 'a/../../b', '/abs', 'a\\b', 'a\0b']) {
      await assert.rejects(pullModel('acme/escape', { endpoint: evilHub.endpoint, hfCache: cache, revision, ...q }),
        (e: Error) => e.name === 'SafekeepError' && /revision .* cannot name a file under refs\//.test(e.message), revision);
    }
    assert.equal(evilHub.requests.length, n);
    // and the cache's own writer refuses a file name that would leave the snapshot
    assert.throws(() => linkSnapshotIntoCache(cache, 'acme/victim', 'main', victimSha, { '../../../blobs/x': 'a'.repeat(40) }),
      (e: Error) => e.name === 'SafekeepError' && /'\.' or '\.\.' segment/.test(e.message));
    // the CLI says it in one line, exit 2
    const r = await new Promise<{ code: number; stderr: string }>((res) => {
      execFile(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'pull', 'acme/escape', '--hf-cache', '--quiet'],
        { cwd: root, env: { ...process.env, HF_TOKEN: '', HF_ENDPOINT: evilHub.endpoint, HF_HUB_CACHE: cache, HF_HUB_OFFLINE: '' }, timeout: 60_000 },
        (err, _stdout, stderr) => res({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stderr }));
    });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /^safekeep: .*not a 40-hex-digit sha.*\n$/);
    assert.ok(!existsSync(join(base, 'escaped')));
  } finally {
    await evilHub.close();
  }
});
