/**
 * Directions as llama.cpp control vectors: the bytes our export writes equal gguf-py's (the writer repeng and
 * llama.cpp's scripts use) for the same vector; repeng's and cvector-generator's files (fixtures written by gguf-py,
 * scripts/gguf-fixtures/control-vectors.py) import; export → import is bit for bit on the rows llama.cpp can steer;
 * @huggingface/gguf (an independent parser) reads our export; llama.cpp's loader and build_cvec, restated here from
 * its source, put our row l at block l−1's output with our sign; and bad files are refused with one line.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gguf } from '@huggingface/gguf';
import { encodeGguf, readGguf, type GgufKv } from '../src/checkpoint/gguf.ts';
import { readControlVector, writeControlVector } from '../src/experiments/control-vector.ts';
import { readDirectionsFile, writeDirectionsFile } from '../src/experiments/directions-file.ts';
import { steeringMatrix } from '../src/engine/run/batch.ts';
import type { Directions } from '../src/analysis/direction.ts';
import { isSafekeepError } from '../src/util/errors.ts';
import { runCli } from './helpers/cli.ts';
import { repoRoot } from './helpers/shared.ts';

const fixture = (name: string) => join(repoRoot, 'test', 'fixtures', 'control-vector', name);
const tmp = () => mkdtempSync(join(tmpdir(), 'safekeep-cvec-'));
/** the values the fixture script gave repeng.gguf's direction.k */
const repengRow = (k: number) => Array.from({ length: 6 }, (_, i) => Math.fround(((10 * k + i) / 7) * (-1) ** i));
const bits = (a: ArrayLike<number>) => Array.from(new Uint32Array(Float32Array.from(a).buffer));

/** a direction [L+1, d] of float32 values, seeded (xorshift), with nonzero rows 0 and 1 that cannot be exported */
function randomDirection(L: number, d: number, seed = 7): Directions {
  let s = seed;
  const next = () => { s ^= s << 13; s ^= s >>> 17; s ^= s << 5; return ((s >>> 0) / 2 ** 32 - 0.5) * 8; };
  return { layers: L + 1, d, data: Float64Array.from({ length: (L + 1) * d }, () => Math.fround(next())) };
}

test('export writes the bytes gguf-py writes for the same control vector (repeng.gguf)', () => {
  const dir = tmp();
  try {
    // rows 2..5 = repeng's direction.1..4; rows 0 and 1 are set but have no llama.cpp layer
    const rows = [[9, 9, 9, 9, 9, 9], [8, 8, 8, 8, 8, 8], ...[1, 2, 3, 4].map(repengRow)];
    const direction: Directions = { layers: 6, d: 6, data: Float64Array.from(rows.flat()) };
    const out = join(dir, 'ours.gguf');
    const r = writeControlVector(out, direction, 'llama');
    assert.deepEqual(r, { written: [2, 3, 4, 5], dropped: [0, 1] });
    assert.deepEqual(readFileSync(out), readFileSync(fixture('repeng.gguf')));
  } finally { rmSync(dir, { recursive: true, force: true }); }
});

test('repeng and cvector-generator files import: direction.k → row k+1, values exact, duplicates summed', () => {
  const repeng = readControlVector(fixture('repeng.gguf'));
  assert.equal(repeng.modelHint, 'llama');
  assert.deepEqual(repeng.rows, [2, 3, 4, 5]);
  assert.deepEqual([repeng.direction.layers, repeng.direction.d], [6, 6]);
  const row = (cv: Directions, l: number) => Array.from(cv.data.subarray(l * cv.d, (l + 1) * cv.d));
  assert.deepEqual(row(repeng.direction, 0), [0, 0, 0, 0, 0, 0]);
  assert.deepEqual(row(repeng.direction, 1), [0, 0, 0, 0, 0, 0]);
  for (const k of [1, 2, 3, 4]) assert.deepEqual(row(repeng.direction, k + 1), repengRow(k), `direction.${k}`);
  assert.equal(repeng.metadata.get('controlvector.layer_count'), 4);

  const gen = readControlVector(fixture('cvector-generator.gguf'));
  assert.equal(gen.modelHint, 'qwen3');
  assert.deepEqual(gen.rows, [2, 3, 4]);
  assert.equal(gen.metadata.get('controlvector.layer_count'), 3);
  for (const k of [1, 2, 3]) assert.deepEqual(row(gen.direction, k + 1), Array.from({ length: 6 }, (_, i) => k - i / 4));

  // two tensors for one layer: llama.cpp adds them (in float32)
  const a = Float32Array.from([0.1, 1e8, -3]);
  const b = Float32Array.from([0.2, 1, 3]);
  const bytes = encodeGguf([['general.architecture', { type: 'string', value: 'controlvector' }]], [
    { name: 'direction.2', shape: [3], data: a }, { name: 'direction.02', shape: [3], data: b }]);
  const dir = tmp();
  try {
    writeFileSync(join(dir, 'dup.gguf'), bytes);
    const dup = readControlVector(join(dir, 'dup.gguf'));
    assert.deepEqual(Array.from(dup.direction.data.subarray(9, 12)), Array.from(a, (x, i) => Math.fround(x + b[i]!)));
  } finally { rmSync(dir, { recursive: true, force: true }); }
});

test('export → import reads back bit for bit (rows 2..L); @huggingface/gguf parses the export', async () => {
  const dir = tmp();
  try {
    const L = 7; const d = 24;
    const direction = randomDirection(L, d);
    const out = join(dir, 'v.gguf');
    writeControlVector(out, direction, 'planted');
    const back = readControlVector(out);
    assert.deepEqual([back.direction.layers, back.direction.d], [L + 1, d]);
    assert.deepEqual(bits(back.direction.data.subarray(2 * d)), bits(direction.data.subarray(2 * d)));
    assert.ok(back.direction.data.subarray(0, 2 * d).every((x) => x === 0));

    const hf = await gguf(out, { allowLocalFile: true });
    assert.equal(hf.metadata['general.architecture'], 'controlvector');
    assert.equal(hf.metadata['controlvector.model_hint' as 'general.architecture'], 'planted');
    assert.equal(Number(hf.metadata['controlvector.layer_count' as 'general.architecture']), L - 1);
    assert.equal((hf.metadata as { version: number }).version, 3);
    const file = readFileSync(out);
    assert.deepEqual(hf.tensorInfos.map((t) => t.name), Array.from({ length: L - 1 }, (_, i) => `direction.${i + 1}`));
    for (const [i, t] of hf.tensorInfos.entries()) {
      assert.deepEqual([t.n_dims, t.shape.map(Number), Number(t.dtype)], [1, [d], 0], t.name);
      const at = Number(hf.tensorDataOffset + t.offset);
      assert.equal(at % 32, 0, `${t.name} aligned`);
      const v = new Float32Array(file.buffer.slice(file.byteOffset + at, file.byteOffset + at + 4 * d));
      assert.deepEqual(bits(v), bits(direction.data.subarray((i + 2) * d, (i + 3) * d)), t.name);
    }
  } finally { rmSync(dir, { recursive: true, force: true }); }
});

/**
 * llama.cpp's common_control_vector_load_one, restated: a tensor "direction.<k>" (prefix up to the first '.', k by
 * stoi, k ≥ 1, F32, 1-D, one n_embd) is added × strength into data[n_embd·(k−1) …]; llama_adapter_cvec then hands
 * block il (0-based, il ≥ 1) the slice at n_embd·(il−1), and build_cvec adds it to that block's output.
 */
function llamaCppAddedAfterBlock(path: string, strength: number, nLayer: number): Map<number, Float32Array> {
  const f = readGguf(path);
  let nEmbd = -1;
  const data: number[] = [];
  for (const t of f.tensors) {
    const dot = t.name.indexOf('.');
    const k = dot >= 0 && t.name.slice(0, dot) === 'direction' ? parseInt(t.name.slice(dot + 1), 10) : -1;
    assert.ok(k > 0 && t.type === 0 && t.shape.length === 1, `llama.cpp would refuse ${t.name}`);
    if (nEmbd === -1) nEmbd = t.shape[0]!;
    assert.equal(t.shape[0], nEmbd);
    while (data.length < nEmbd * k) data.push(0);
    const dv = new DataView(f.bytes.buffer, f.bytes.byteOffset + t.offset, 4 * nEmbd);
    for (let j = 0; j < nEmbd; j++) data[nEmbd * (k - 1) + j] = Math.fround(data[nEmbd * (k - 1) + j]! + Math.fround(dv.getFloat32(4 * j, true) * strength));
  }
  const added = new Map<number, Float32Array>();
  for (let il = 1; il < nLayer; il++) {
    const off = nEmbd * (il - 1);
    if (off + nEmbd <= data.length) added.set(il, Float32Array.from(data.slice(off, off + nEmbd)));
  }
  return added;
}

test("llama.cpp's reader: direction.(l−1) is added to block l−1's output = our hidden[l]; its +s·v is our steering with α = −s·‖v‖", () => {
  const dir = tmp();
  try {
    const L = 6; const d = 10; const s = 0.75;
    const direction = randomDirection(L, d, 11);
    const out = join(dir, 'v.gguf');
    writeControlVector(out, direction, 'x');
    const added = llamaCppAddedAfterBlock(out, s, L);
    assert.deepEqual([...added.keys()], [1, 2, 3, 4, 5], 'blocks 1..L−1 are steered, block 0 never');
    for (const [block, v] of added) {
      const l = block + 1; // hidden[l] = output of block l−1
      const row = direction.data.subarray(l * d, (l + 1) * d);
      assert.deepEqual(bits(v), bits(Array.from(row, (x) => Math.fround(x * s))), `block ${block} gets s·row ${l}`);
      // our steering at layer l with alpha = −s·‖row‖ adds −alpha·row/‖row‖ = s·row to hidden[l] (engine/run/batch.ts)
      const norm = Math.hypot(...row);
      const m = steeringMatrix(L, d, { layer: l, vector: Array.from(row), alpha: -s * norm });
      const ours = m.subarray(l * d, (l + 1) * d);
      ours.forEach((x, i) => assert.ok(Math.abs(x - v[i]!) <= 1e-6 * Math.abs(v[i]!) + 1e-12, `block ${block}[${i}]: ${x} vs ${v[i]}`));
      assert.ok(m.every((x, i) => (i >= l * d && i < (l + 1) * d) || x === 0), 'only hidden[l] is steered');
    }
  } finally { rmSync(dir, { recursive: true, force: true }); }
});

test('bad control vectors are refused with one line naming the problem', () => {
  const dir = tmp();
  const file = (name: string, bytes: Uint8Array) => { const p = join(dir, name); writeFileSync(p, bytes); return p; };
  const arch: Array<[string, GgufKv]> = [['general.architecture', { type: 'string', value: 'controlvector' }]];
  const one = (name: string, n = 4) => ({ name, shape: [n], data: new Float32Array(n).fill(1) });
  const refuses = (path: string, re: RegExp) => assert.throws(() => readControlVector(path), (e: unknown) => isSafekeepError(e) && re.test((e as Error).message) && !(e as Error).message.includes('\n'));
  try {
    refuses(file('zero.gguf', encodeGguf(arch, [one('direction.0')])), /direction\.0: layer 0 is refused/);
    refuses(file('name.gguf', encodeGguf(arch, [one('blk.3.attn_q.weight')])), /not direction\.<layer>/);
    refuses(file('width.gguf', encodeGguf(arch, [one('direction.1', 4), one('direction.2', 5)])), /has 5 values, the others 4/);
    refuses(file('model.gguf', encodeGguf([['general.architecture', { type: 'string', value: 'llama' }]], [one('direction.1')])), /not a control vector/);
    refuses(file('2d.gguf', encodeGguf(arch, [{ name: 'direction.1', shape: [2, 2], data: new Float32Array(4) }])), /must be 1-D F32/);
    const good = encodeGguf(arch, [one('direction.1')]);
    refuses(file('cut.gguf', good.subarray(0, good.length - 3)), /runs past the end of the file/);
    refuses(file('text.gguf', new TextEncoder().encode('{"not": "gguf"}')), /magic/);
    // a count the file cannot hold is refused before anything is allocated for it
    const huge = good.slice();
    new DataView(huge.buffer).setBigUint64(16, 2n ** 40n, true);
    refuses(file('huge.gguf', huge), /runs past the end/);
    // gguf.cpp's layout rule: the data offsets are the padded running sum
    const moved = good.slice();
    new DataView(moved.buffer).setBigUint64(findTensorOffsetField(good), 32n, true);
    refuses(file('moved.gguf', moved), /at data offset 32, expected 0/);
  } finally { rmSync(dir, { recursive: true, force: true }); }
});

/** byte position of the first tensor's u64 offset: after its name, n_dims, ne[0] and type */
function findTensorOffsetField(bytes: Uint8Array): number {
  const name = new TextEncoder().encode('direction.1');
  for (let i = 0; i + name.length <= bytes.length; i++) {
    if (name.every((c, j) => bytes[i + j] === c)) return i + name.length + 4 + 8 + 4;
  }
  throw new Error('no tensor name');
}

test('safekeep directions export / import: the CLI round trip, and bad input exits 2 with one line', async () => {
  const dir = tmp();
  try {
    const direction = randomDirection(4, 8, 3);
    const dirs = join(dir, 'directions.safetensors');
    writeDirectionsFile(dirs, { 'refusal.chatbot': direction }, { model: 'planted', lStar: 3, layerRule: 'cv', schemaPairs: 'all', provenance: {} });
    const gg = join(dir, 'r.gguf');
    const ex = await runCli(['directions', 'export', `${dirs}#refusal.chatbot`, '--gguf', gg], { timeoutMs: 60_000 });
    assert.equal(ex.code, 0, ex.stderr);
    assert.match(ex.stdout, /direction\.1\.\.direction\.3 = hidden\[2\.\.4\], d = 8, model_hint "planted"/);
    assert.match(ex.stderr, /rows 0, 1 .* not written/);
    const back = join(dir, 'back.safetensors');
    const im = await runCli(['directions', 'import', gg, '--out', back, '--name', 'r'], { timeoutMs: 60_000 });
    assert.equal(im.code, 0, im.stderr);
    const read = readDirectionsFile(back);
    assert.equal(read.metadata.model, 'planted');
    const r = read.directions.get('r')!;
    assert.deepEqual(bits(r.data.subarray(2 * 8)), bits(direction.data.subarray(2 * 8)));
    const norms = [2, 3, 4].map((l) => Math.hypot(...direction.data.subarray(l * 8, (l + 1) * 8)));
    assert.equal(read.lStar, 2 + norms.indexOf(Math.max(...norms)));

    const bad = await runCli(['directions', 'import', dirs, '--out', join(dir, 'x.safetensors')], { timeoutMs: 60_000 });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^safekeep: .*not a readable GGUF file \(magic/);
    assert.equal(bad.stderr.trim().split('\n').length, 1);
  } finally { rmSync(dir, { recursive: true, force: true }); }
});
