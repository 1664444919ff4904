/**
 * Checkpoint input bounded before anything is allocated: config.json sizes range-checked (and against the layers
 * the weights hold), safetensors headers checked for size, tensor count and nesting before parsing, element counts
 * that must be exact, weights that must be regular files (a folder or a FIFO is refused at once, never read or
 * waited on), and every refusal one short line — from the library and from `safekeep inspect` (exit 2, no abort).
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { MAX_HEADER_BYTES, MAX_TENSORS, readSafetensorsHeader } from '../src/checkpoint/safetensors.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { repoRoot } from './helpers/shared.ts';

const root = mkdtempSync(join(tmpdir(), 'safekeep-bnd-'));
after(() => rmSync(root, { recursive: true, force: true }));
const good = await writeRandomCheckpoint(join(root, 'good'), 'qwen2', { seed: 2, numLayers: 2 });

let n = 0;
function copy(): string {
  const d = join(root, `c${n++}`);
  cpSync(good, d, { recursive: true });
  return d;
}

/** A safetensors file from a raw header text and `data` bytes. */
function rawSafetensors(path: string, header: string, data = Buffer.alloc(0)): void {
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(header)));
  writeFileSync(path, Buffer.concat([len, Buffer.from(header), data]));
}

function editConfig(dir: string, edit: (c: Record<string, unknown>) => void): void {
  const p = join(dir, 'config.json');
  const c = JSON.parse(readFileSync(p, 'utf8'));
  edit(c);
  writeFileSync(p, JSON.stringify(c));
}

/** one SafekeepError line, short, matching */
function oneLine(re: RegExp) {
  return (e: unknown): boolean => {
    assert.ok(e instanceof SafekeepError, String(e));
    assert.ok(!e.message.includes('\n'));
    assert.ok(e.message.length < 400, `${e.message.length} characters: ${e.message.slice(0, 200)}`);
    assert.match(e.message, re);
    return true;
  };
}

const deep = (k: number): string => '['.repeat(k) + ']'.repeat(k);

const cases: { name: string; make: () => string; msg: RegExp }[] = [
  { name: 'num_hidden_layers 1e9', make: () => { const d = copy(); editConfig(d, (c) => { c.num_hidden_layers = 1e9; }); return d; }, msg: /config\.json: num_hidden_layers 1000000000 is beyond any real model \(at most 4096\)/ },
  { name: 'num_hidden_layers 1e15', make: () => { const d = copy(); editConfig(d, (c) => { c.num_hidden_layers = 1e15; }); return d; }, msg: /config\.json: num_hidden_layers 1000000000000000 is beyond any real model/ },
  { name: 'vocab_size 1e12', make: () => { const d = copy(); editConfig(d, (c) => { c.vocab_size = 1e12; }); return d; }, msg: /config\.json: vocab_size 1000000000000 is beyond any real model/ },
  { name: 'more layers than the weights hold', make: () => { const d = copy(); editConfig(d, (c) => { c.num_hidden_layers = 40; c.max_window_layers = 40; }); return d; }, msg: /config\.json: num_hidden_layers 40, but the weights \(1 file\) hold 2 layers/ },
  { name: 'config.json nested 100k deep', make: () => { const d = copy(); const c = readFileSync(join(d, 'config.json'), 'utf8'); writeFileSync(join(d, 'config.json'), c.replace(/}\s*$/, `, "x": ${deep(100_000)}}`)); return d; }, msg: /config\.json: JSON nested 100001 levels deep \(at most 64\)/ },
  { name: 'dtype nested 100k deep', make: () => { const d = copy(); rawSafetensors(join(d, 'model.safetensors'), `{"a":{"dtype":${deep(100_000)},"shape":[0],"data_offsets":[0,0]}}`); return d; }, msg: /model\.safetensors: header: JSON nested 100002 levels deep \(at most 3\); not a safetensors header/ },
  { name: 'shape nested 100k deep', make: () => { const d = copy(); rawSafetensors(join(d, 'model.safetensors'), `{"a":{"dtype":"F32","shape":${deep(100_000)},"data_offsets":[0,0]}}`); return d; }, msg: /header: JSON nested 1000\d\d levels deep/ },
  { name: 'shape [2^53-1, 2^53-1, 0]', make: () => { const d = copy(); rawSafetensors(join(d, 'model.safetensors'), `{"a":{"dtype":"F32","shape":[9007199254740991,9007199254740991,0],"data_offsets":[0,0]}}`); return d; }, msg: /tensor a: shape \[9007199254740991,9007199254740991,0\] has more elements than can be counted exactly/ },
  { name: 'shape [0, 2^53-1, 2^53-1]', make: () => { const d = copy(); rawSafetensors(join(d, 'model.safetensors'), `{"a":{"dtype":"F32","shape":[0,9007199254740991,9007199254740991],"data_offsets":[0,0]}}`); return d; }, msg: /has more elements than can be counted exactly/ },
  { name: 'a 5 M-element shape', make: () => { const d = copy(); rawSafetensors(join(d, 'model.safetensors'), `{"a":{"dtype":"F32","shape":[${new Array(5_000_000).fill(1).join(',')}],"data_offsets":[0,4]}}`, Buffer.alloc(4)); return d; }, msg: /tensor a: shape has 5000000 dimensions \(at most 8\)/ },
  { name: 'a 2 M-element shape of non-integers', make: () => { const d = copy(); rawSafetensors(join(d, 'model.safetensors'), `{"a":{"dtype":"F32","shape":[${new Array(2_000_000).fill(0.5).join(',')}],"data_offsets":[0,4]}}`, Buffer.alloc(4)); return d; }, msg: /tensor a: shape \[0\.5,0\.5,.*… \(\d+ characters\) is not a list of non-negative integers/ },
  { name: 'a 10 kB tensor name', make: () => { const d = copy(); rawSafetensors(join(d, 'model.safetensors'), `{"${'n'.repeat(10_000)}":{"dtype":"X","shape":[0],"data_offsets":[0,0]}}`); return d; }, msg: /tensor "nnnn.*… \(10002 characters\): unknown dtype "X"/ },
  { name: 'more tensors than a file may hold', make: () => { const d = copy(); rawSafetensors(join(d, 'model.safetensors'), '{' + Array.from({ length: MAX_TENSORS + 10 }, (_, i) => `"t${i}":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}`).join(',') + '}'); return d; }, msg: new RegExp(`header lists ${MAX_TENSORS + 10} entries \\(at most ${MAX_TENSORS} tensors a file\\)`) },
  { name: 'a header of 350 k empty tensors (~20 MB)', make: () => { const d = copy(); rawSafetensors(join(d, 'model.safetensors'), '{' + Array.from({ length: 350_000 }, (_, i) => `"t${i}":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}`).join(',') + '}'); return d; }, msg: new RegExp(`header length \\d+ bytes is not sane \\(limit ${MAX_HEADER_BYTES}`) },
  { name: 'weight symlinked to a folder', make: () => { const d = copy(); rmSync(join(d, 'model.safetensors')); mkdirSync(join(d, 'elsewhere')); symlinkSync(join(d, 'elsewhere'), join(d, 'model.safetensors')); return d; }, msg: /model\.safetensors: (a folder, not a regular file|cannot open \(a folder, not a file\))/ },
  { name: 'weight that is a FIFO', make: () => { const d = copy(); rmSync(join(d, 'model.safetensors')); execFileSync('mkfifo', [join(d, 'model.safetensors')]); return d; }, msg: /model\.safetensors: a FIFO, not a regular file; refusing to read it/ },
  { name: 'config.json that is a FIFO', make: () => { const d = copy(); rmSync(join(d, 'config.json')); execFileSync('mkfifo', [join(d, 'config.json')]); return d; }, msg: /config\.json: a FIFO, not a regular file/ },
];

test('the good checkpoint loads (each case below fails for its own reason)', async () => {
  await loadCheckpoint(good);
});

const dirs = new Map<string, string>();
for (const c of cases) {
  test(`refused with one short line: ${c.name}`, { timeout: 20_000 }, async () => {
    const d = c.make();
    dirs.set(c.name, d);
    await assert.rejects(loadCheckpoint(d), oneLine(c.msg));
  });
}

test('readSafetensorsHeader: a file whose partial products are safe but whose total is not is refused; zero-size tensors with sane shapes pass', () => {
  const p = join(root, 'z.safetensors');
  rawSafetensors(p, '{"a":{"dtype":"F32","shape":[3,0,5],"data_offsets":[0,0]},"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}', Buffer.alloc(12));
  assert.deepEqual(readSafetensorsHeader(p).entries.map((e) => [e.name, e.byteLength]), [['a', 0], ['b', 12]]);
  rawSafetensors(p, `{"a":{"dtype":"F64","shape":[${2 ** 50}],"data_offsets":[0,0]}}`);
  assert.throws(() => readSafetensorsHeader(p), oneLine(/has more elements than can be counted exactly/));
});

function cli(args: string[]): Promise<{ code: number | null; signal: string | null; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { timeout: 60_000, maxBuffer: 1 << 20 }, (err, _stdout, stderr) => {
      res({ code: err ? (typeof err.code === 'number' ? err.code : null) : 0, signal: err?.signal ?? null, stderr });
    });
  });
}

test('safekeep inspect: 1e9 layers, a FIFO weight, a 100k-deep dtype → exit 2, one line (no V8 abort, no hang)', { timeout: 120_000 }, async () => {
  const names = ['num_hidden_layers 1e9', 'weight that is a FIFO', 'dtype nested 100k deep'];
  const results = await Promise.all(names.map((k) => cli(['inspect', '--model', dirs.get(k) ?? cases.find((c) => c.name === k)!.make()])));
  for (const [i, r] of results.entries()) {
    assert.equal(r.code, 2, `${names[i]}: ${r.signal ?? ''} ${r.stderr.slice(0, 300)}`);
    assert.equal(r.stderr.split('\n').filter(Boolean).length, 1, r.stderr.slice(0, 300));
    assert.match(r.stderr, /^safekeep: /);
  }
});
