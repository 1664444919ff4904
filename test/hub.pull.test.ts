/**
 * `pull`, `downloadHubFiles` and `resolveModel` against a mock hub on 127.0.0.1 (test/helpers/mockHub.ts):
 * only checkpoint files, verified; LFS redirect to another origin without the token; resume after a dropped
 * connection and from a leftover .part; wrong sha256 rejected and deleted; gated repos; reuse; datasets; CLI.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { createServer } from 'node:http';
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { pullModel, modelDirFor } from '../src/hub/pull.ts';
import { downloadHubFiles, readMarker } from '../src/hub/download.ts';
import { resolveModel } from '../src/hub/resolve.ts';
import { hubEnv } from '../src/cli/env.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { startMockHub, type MockHub } from './helpers/mockHub.ts';
import { runCli } from './helpers/cli.ts';

const root = mkdtempSync(join(tmpdir(), 'safekeep-hub-'));
const src = await writeRandomCheckpoint(join(root, 'src'), 'llama', { seed: 4, shards: 2, numLayers: 2 });
const single = await writeRandomCheckpoint(join(root, 'single'), 'qwen3', { seed: 5, numLayers: 2 });

function filesOf(dir: string): Record<string, Buffer> {
  const out: Record<string, Buffer> = {};
  for (const f of readdirSync(dir)) out[f] = readFileSync(join(dir, f));
  return out;
}

const ckptFiles: Record<string, Buffer> = {
  ...filesOf(src),
  'tokenizer.json': Buffer.from(JSON.stringify({ version: '1.0', model: { type: 'BPE', vocab: { a: 0 } } })),
  'tokenizer_config.json': Buffer.from('{"chat_template": "{{ messages }}"}'),
  'special_tokens_map.json': Buffer.from('{}'),
  'chat_template.jinja': Buffer.from('{% for m in messages %}{{ m.content }}{% endfor %}'),
  'tokenizer.model': Buffer.alloc(3000, 3),
  // never needed by a checkpoint:
  'README.md': Buffer.from('# model card\n'),
  'consolidated.safetensors': Buffer.alloc(4096, 7),
  'original/params.json': Buffer.from('{}'),
  '.gitattributes': Buffer.from('*.safetensors filter=lfs\n'),
};
const wanted = ['config.json', 'generation_config.json', 'model.safetensors.index.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'chat_template.jinja', 'tokenizer.model'].sort();
const datasetFiles = {
  'dataset/harmful.json': Buffer.from(JSON.stringify({ behaviors: [{ id: '1', prompt: 'x' }] })),
  'dataset/benign.json': Buffer.from(JSON.stringify({ behaviors: [{ id: '1', prompt: 'y' }] })),
  'README.md': Buffer.from('card'),
};

/** a port with nothing listening (ECONNREFUSED) */
const deadPort = await new Promise<number>((res) => {
  const s = createServer();
  s.listen(0, '127.0.0.1', () => { const p = (s.address() as AddressInfo).port; s.close(() => res(p)); });
});
const dead = `http://127.0.0.1:${deadPort}`;

const hub: MockHub = await startMockHub([
  { id: 'acme/tiny-llama', files: ckptFiles, revisions: { main: 'a'.repeat(40), v1: 'b'.repeat(40) } },
  { id: 'acme/tiny-qwen3', files: filesOf(single) },
  { id: 'acme/gated', files: filesOf(single), token: 'hf_secret' },
  { id: 'acme/nocfg', files: { 'README.md': Buffer.from('x') } },
  { id: 'ai-safety/agentharm', type: 'dataset', files: datasetFiles },
]);
after(async () => { await hub.close(); rmSync(root, { recursive: true, force: true }); });

let n = 0;
const fresh = (): string => join(root, `dl${n++}`);
const q = { progress: false };
const resolves = (): number => hub.requests.filter((r) => r.path.includes('/resolve/')).length;

function listTree(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else out.push(relative(dir, join(d, e.name)));
    }
  };
  walk(dir);
  return out.sort();
}

test('pull: only the checkpoint files (shards named by the index), byte-identical, loadable, LFS via a CDN redirect without the token', async () => {
  const dest = fresh();
  const r = await pullModel('acme/tiny-llama', { endpoint: hub.endpoint, destDir: dest, ...q });
  assert.equal(r.commit, 'a'.repeat(40));
  assert.deepEqual(listTree(dest), [...wanted, '.safekeep-hub.json'].sort());
  for (const f of wanted) assert.deepEqual(readFileSync(join(dest, f)), ckptFiles[f], f);
  const ck = await loadCheckpoint(dest);
  assert.equal(ck.config.family, 'llama');
  assert.equal(r.downloaded, wanted.length);
  // downloads name the resolved commit; LFS went through the CDN origin
  const shardReqs = hub.requests.filter((x) => x.path.includes('model-00001-of-00002.safetensors'));
  assert.ok(shardReqs.every((x) => x.path.includes(`/resolve/${'a'.repeat(40)}/`)));
  assert.ok(hub.requests.some((x) => x.server === 'cdn' && x.status === 200));
  assert.ok(!hub.requests.some((x) => /consolidated|README|original/.test(x.path)));
  const m = readMarker(dest)!;
  assert.equal(m.complete, true);
  assert.equal(m.files['model-00002-of-00002.safetensors']!.size, ckptFiles['model-00002-of-00002.safetensors']!.length);
  // second pull: nothing downloaded, no file requests
  const before = resolves();
  const again = await pullModel('acme/tiny-llama', { endpoint: hub.endpoint, destDir: dest, ...q });
  assert.equal(again.downloaded, 0);
  assert.equal(resolves(), before);
});

test('pull: a connection dropped mid-file resumes with a Range request and ends byte-identical', async () => {
  const dest = fresh();
  const f = 'model-00002-of-00002.safetensors';
  const size = ckptFiles[f]!.length;
  const cut = Math.floor(size / 3);
  hub.dropOnce.set(f, cut);
  const first = hub.requests.length;
  const r = await pullModel('acme/tiny-llama', { endpoint: hub.endpoint, destDir: dest, ...q });
  assert.equal(hub.dropOnce.size, 0, 'the fault fired');
  const cdn = hub.requests.slice(first).filter((x) => x.server === 'cdn' && x.path.includes('/cdn/'));
  const forFile = cdn.filter((x) => x.range !== null || x.bytes === cut);
  assert.deepEqual(forFile.map((x) => [x.range, x.status, x.bytes]), [[null, 200, cut], [`bytes=${cut}-`, 206, size - cut]]);
  assert.deepEqual(readFileSync(join(dest, f)), ckptFiles[f]);
  assert.ok(!existsSync(join(dest, `${f}.part`)));
  assert.equal(r.files.length, wanted.length);
});

test('pull: resumes a .part left by an interrupted run (only the rest is transferred)', async () => {
  const dest = fresh();
  mkdirSync(dest, { recursive: true });
  const f = 'model-00001-of-00002.safetensors';
  const data = ckptFiles[f]!;
  const have = 12345;
  writeFileSync(join(dest, `${f}.part`), data.subarray(0, have));
  const first = hub.requests.length;
  await pullModel('acme/tiny-llama', { endpoint: hub.endpoint, destDir: dest, ...q });
  const cdn = hub.requests.slice(first).filter((x) => x.server === 'cdn' && x.range !== null);
  assert.deepEqual(cdn.map((x) => [x.range, x.status, x.bytes]), [[`bytes=${have}-`, 206, data.length - have]]);
  assert.deepEqual(readFileSync(join(dest, f)), data);
});

test('pull: a leftover .part from another version of the file is detected and the file fetched again from the start', async () => {
  const dest = fresh();
  mkdirSync(dest, { recursive: true });
  const f = 'model-00001-of-00002.safetensors';
  const data = ckptFiles[f]!;
  writeFileSync(join(dest, `${f}.part`), Buffer.alloc(5000, 9));
  const first = hub.requests.length;
  await pullModel('acme/tiny-llama', { endpoint: hub.endpoint, destDir: dest, ...q });
  const sha = createHash('sha256').update(data).digest('hex');
  const cdn = hub.requests.slice(first).filter((x) => x.server === 'cdn' && x.path.startsWith(`/cdn/${sha}`));
  assert.deepEqual(cdn.map((x) => [x.range, x.status]), [['bytes=5000-', 206], [null, 200]]);
  assert.deepEqual(readFileSync(join(dest, f)), data);
});

test('download lock: a lock left by a dead process is taken over; a live holder is waited for', async () => {
  const dead = await new Promise<number>((res) => { const c = spawn(process.execPath, ['-e', '0']); c.on('exit', () => res(c.pid!)); });
  const d1 = fresh();
  mkdirSync(d1, { recursive: true });
  writeFileSync(join(d1, '.safekeep-hub.lock'), String(dead));
  await pullModel('acme/tiny-qwen3', { endpoint: hub.endpoint, destDir: d1, ...q });
  assert.ok(!existsSync(join(d1, '.safekeep-hub.lock')));
  const d2 = fresh();
  mkdirSync(d2, { recursive: true });
  const holder = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 1500)']);
  writeFileSync(join(d2, '.safekeep-hub.lock'), String(holder.pid));
  const exited = new Promise<number>((res) => holder.on('exit', () => res(Date.now())));
  await pullModel('acme/tiny-qwen3', { endpoint: hub.endpoint, destDir: d2, ...q });
  const done = Date.now();
  assert.ok(done >= (await exited), 'pull finished only after the lock holder exited');
  await loadCheckpoint(d2);
  // two concurrent pulls into one folder in this process: serialised, both succeed, files intact
  const d3 = fresh();
  const [a, b] = await Promise.all([
    pullModel('acme/tiny-llama', { endpoint: hub.endpoint, destDir: d3, ...q }),
    pullModel('acme/tiny-llama', { endpoint: hub.endpoint, destDir: d3, ...q }),
  ]);
  assert.equal(a.downloaded + b.downloaded, wanted.length);
  for (const f of wanted) assert.deepEqual(readFileSync(join(d3, f)), ckptFiles[f], f);
});

test('pull: a sha256 that does not match the LFS metadata is an error and the download is deleted', async () => {
  const dest = fresh();
  const f = 'model-00001-of-00002.safetensors';
  hub.wrongSha.add(f);
  try {
    await assert.rejects(pullModel('acme/tiny-llama', { endpoint: hub.endpoint, destDir: dest, ...q }), (e: unknown) => {
      assert.ok(e instanceof SafekeepError);
      assert.match(e.message, /model-00001-of-00002\.safetensors: sha256 mismatch \(expected [0-9a-f]{64}, got [0-9a-f]{64}\) against the hub's metadata; the download was deleted/);
      return true;
    });
    assert.ok(!existsSync(join(dest, f)));
    assert.ok(!existsSync(join(dest, `${f}.part`)));
    assert.equal(readMarker(dest)?.complete, false);
  } finally {
    hub.wrongSha.delete(f);
  }
  await pullModel('acme/tiny-llama', { endpoint: hub.endpoint, destDir: dest, ...q });
  assert.deepEqual(readFileSync(join(dest, f)), ckptFiles[f]);
});

test('pull: a corrupted local file is detected (git blob sha1 / sha256) and fetched again', async () => {
  const dest = fresh();
  await pullModel('acme/tiny-qwen3', { endpoint: hub.endpoint, destDir: dest, ...q });
  const cfg = readFileSync(join(dest, 'config.json'));
  const bad = Buffer.from(cfg);
  bad[5] = bad[5]! ^ 1;
  writeFileSync(join(dest, 'config.json'), bad);
  // files recorded in the marker with the same size and hash are trusted (fast reuse); without the marker,
  // every present file is re-hashed against the listing
  rmSync(join(dest, '.safekeep-hub.json'));
  const r = await pullModel('acme/tiny-qwen3', { endpoint: hub.endpoint, destDir: dest, ...q });
  assert.equal(r.downloaded, 1);
  assert.deepEqual(readFileSync(join(dest, 'config.json')), cfg);
});

test('gated repo: 401 without a token and 403 with a wrong one are clear errors; HF_TOKEN works and stays off the CDN', async () => {
  await assert.rejects(pullModel('acme/gated', { endpoint: hub.endpoint, destDir: fresh(), ...q, token: '' }),
    /acme\/gated: listing files needs authentication \(HTTP 401\): the repo is gated or private; set HF_TOKEN/);
  await assert.rejects(pullModel('acme/gated', { endpoint: hub.endpoint, destDir: fresh(), ...q, token: 'hf_wrong' }),
    /acme\/gated: listing files: access denied \(HTTP 403\); for a gated model, accept its license at http:\/\/127\.0\.0\.1:\d+\/acme\/gated/);
  const first = hub.requests.length;
  const dest = fresh();
  await pullModel('acme/gated', { endpoint: hub.endpoint, destDir: dest, ...q, token: 'hf_secret' });
  await loadCheckpoint(dest);
  const reqs = hub.requests.slice(first);
  assert.ok(reqs.filter((x) => x.server === 'hub').every((x) => x.authorization === 'Bearer hf_secret'));
  assert.ok(reqs.some((x) => x.server === 'cdn'));
  assert.ok(reqs.filter((x) => x.server === 'cdn').every((x) => x.authorization === null));
});

test('pull: unknown repo, unknown revision, repo without config.json, bad id', async () => {
  await assert.rejects(pullModel('acme/none', { endpoint: hub.endpoint, destDir: fresh(), ...q }), /acme\/none: listing files: not found \(HTTP 404\)/);
  await assert.rejects(pullModel('acme/tiny-llama', { endpoint: hub.endpoint, revision: 'v9', destDir: fresh(), ...q }), /--revision v9/);
  await assert.rejects(pullModel('acme/nocfg', { endpoint: hub.endpoint, destDir: fresh(), ...q }), /acme\/nocfg: the repo has no config\.json/);
  await assert.rejects(pullModel('../etc', { endpoint: hub.endpoint, destDir: fresh(), ...q }), /'\.\.\/etc' is not a Hugging Face repo id/);
  await assert.rejects(pullModel('acme/tiny-llama', { endpoint: dead, destDir: fresh(), ...q }), /cannot reach http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\); set HF_ENDPOINT/);
});

test('downloadHubFiles: datasets use the datasets API paths; include filters', async () => {
  const dest = fresh();
  const first = hub.requests.length;
  const r = await downloadHubFiles({ repoId: 'ai-safety/agentharm', repoType: 'dataset', destDir: dest, endpoint: hub.endpoint, include: (p) => p.startsWith('dataset/'), ...q });
  assert.deepEqual(r.files.sort(), ['dataset/benign.json', 'dataset/harmful.json']);
  assert.deepEqual(readFileSync(join(dest, 'dataset/harmful.json')), datasetFiles['dataset/harmful.json']);
  assert.ok(!existsSync(join(dest, 'README.md')));
  const paths = hub.requests.slice(first).map((x) => x.path);
  assert.ok(paths[0]!.startsWith('/api/datasets/ai-safety/agentharm/revision/main?blobs=true'));
  assert.ok(paths.slice(1).every((p) => p.startsWith('/datasets/ai-safety/agentharm/resolve/')));
  await assert.rejects(downloadHubFiles({ repoId: 'ai-safety/agentharm', repoType: 'dataset', destDir: dest, endpoint: hub.endpoint, include: () => false, ...q }), /no files to download/);
});

test('resolveModel: folder → itself; owner/name → pulled into $SAFEKEEP_MODELS on first use, then reused offline', async () => {
  // the settings the CLI reads from SAFEKEEP_MODELS and HF_ENDPOINT
  const hubAt = (endpoint: string) => hubEnv({ SAFEKEEP_MODELS: join(root, 'models'), HF_ENDPOINT: endpoint });
  assert.equal(await resolveModel(single, hubAt(hub.endpoint)), single);
  const d = await resolveModel('acme/tiny-qwen3', hubAt(hub.endpoint));
  assert.equal(d, join(root, 'models', 'acme--tiny-qwen3'));
  assert.equal(modelDirFor('acme/tiny-qwen3', 'main', join(root, 'models')), d);
  assert.equal(modelDirFor('acme/tiny-qwen3', 'v1', join(root, 'models')), join(root, 'models', 'acme--tiny-qwen3@v1'));
  assert.equal(modelDirFor('acme/tiny-qwen3'), resolve('models', 'acme--tiny-qwen3'), 'default: models/');
  await loadCheckpoint(d);
  // unreachable: the complete download must be reused
  assert.equal(await resolveModel('acme/tiny-qwen3', hubAt(dead)), d);
  await assert.rejects(resolveModel('./no/such/dir', hubAt(dead)), /^SafekeepError: --model \.\/no\/such\/dir: no such folder$/);
  await assert.rejects(resolveModel('not an id', hubAt(dead)), /no such folder, and not a Hugging Face repo id/);
  await assert.rejects(resolveModel('acme/other', hubAt(dead)), /cannot reach/);
});

test('CLI: safekeep pull (HF_ENDPOINT, --revision, progress on stderr), gated → exit 2, inspect --model owner/name pulls', async () => {
  const models = join(root, 'cli-models');
  const env = { HF_TOKEN: '', HF_ENDPOINT: hub.endpoint, SAFEKEEP_MODELS: models };
  const run = (args: string[], e: Record<string, string> = env) => runCli(args, { cwd: root, env: e });
  const [a, b, c, d] = await Promise.all([
    run(['pull', 'acme/tiny-llama', '--revision', 'v1']),
    run(['pull', 'acme/gated']),
    run(['inspect', '--model', 'acme/tiny-qwen3']),
    run(['pull', 'acme/gated'], { ...env, HF_TOKEN: 'hf_secret' }),
  ]);
  assert.equal(a.code, 0, a.stderr);
  assert.match(a.stdout, /^acme\/tiny-llama@bbbbbbbbbbbb → .*acme--tiny-llama@v1 \(10 files, [\d.]+ kB; 10 downloaded, 0 already present\)\n$/);
  assert.match(a.stderr, /model-00001-of-00002\.safetensors \[#+\] 100% [\d.]+ kB\/[\d.]+ kB/);
  await loadCheckpoint(join(models, 'acme--tiny-llama@v1'));
  assert.equal(b.code, 2);
  assert.equal(b.stdout, '');
  assert.match(b.stderr, /^safekeep: acme\/gated: listing files needs authentication \(HTTP 401\).*HF_TOKEN.*\n$/);
  assert.equal(c.code, 0, c.stderr);
  assert.match(c.stdout, /family\s+qwen3/);
  assert.equal(d.code, 0, d.stderr);
});
