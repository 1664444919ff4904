import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSafetensorsHeader, writeSafetensors } from '../src/checkpoint/safetensors.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import type { TensorEntry } from '../src/checkpoint/types.ts';
import { needShared } from './helpers/shared.ts';

function tmp(): string {
  return mkdtempSync(join(tmpdir(), 'safekeep-st-'));
}

test('writeSafetensors: layout is the safetensors format (LE u64 length, space-padded JSON to 8, sorted contiguous data)', () => {
  const dir = tmp();
  try {
    const p = join(dir, 'a.safetensors');
    const b = Float32Array.from([1.5, -2, 3.25, 0, 7, 8]);
    const a = Uint16Array.from([0x3f80, 0xc000, 0x4040]); // BF16 1, -2, 3
    writeSafetensors(p, { b: { dtype: 'F32', shape: [2, 3], data: b }, a: { dtype: 'BF16', shape: [3], data: a } }, { format: 'pt' });
    const bytes = readFileSync(p);
    const n = Number(bytes.readBigUInt64LE(0));
    assert.equal(n % 8, 0);
    const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8'));
    assert.deepEqual(header.__metadata__, { format: 'pt' });
    assert.deepEqual(header.a, { dtype: 'BF16', shape: [3], data_offsets: [0, 6] });
    assert.deepEqual(header.b, { dtype: 'F32', shape: [2, 3], data_offsets: [6, 30] });
    assert.equal(bytes.length, 8 + n + 30);
    assert.equal(bytes.readFloatLE(8 + n + 6 + 4 * 2), 3.25);
    // no temp files left behind
    assert.deepEqual(readdirSync(dir), ['a.safetensors']);
    const h = readSafetensorsHeader(p);
    assert.deepEqual(h.metadata, { format: 'pt' });
    const byName = new Map(h.entries.map((e) => [e.name, e]));
    assert.deepEqual(Array.from(readTensorF32(byName.get('b') as TensorEntry)), Array.from(b));
    assert.deepEqual(Array.from(readTensorF32(byName.get('a') as TensorEntry)), [1, -2, 3]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('writeSafetensors: a numpy-only reader (independent parser) reads the values back', (t) => {
  const probe = spawnSync('python3', ['-c', 'import numpy'], { encoding: 'utf8' });
  if (probe.status !== 0) { t.skip('python3 with numpy not available'); return; }
  const dir = tmp();
  try {
    const p = join(dir, 'x.safetensors');
    const x = Float32Array.from({ length: 35 }, (_, i) => Math.sin(i) * 10);
    const y = Uint16Array.from([0x3c00, 0xc400, 0x0001]); // F16 1, -4, 2^-24
    writeSafetensors(p, { x: { dtype: 'F32', shape: [5, 7], data: x }, y: { dtype: 'F16', shape: [3], data: y } });
    const py = `
import json, struct, sys, numpy as np
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8+n])
out = {}
for k, v in h.items():
    if k == '__metadata__': continue
    s, e = v['data_offsets']
    dt = {'F32': '<f4', 'F16': '<f2'}[v['dtype']]
    out[k] = np.frombuffer(b[8+n+s:8+n+e], dtype=dt).reshape(v['shape']).astype(float).tolist()
print(json.dumps(out))`;
    const r = spawnSync('python3', ['-c', py, p], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const got = JSON.parse(r.stdout) as { x: number[][]; y: number[] };
    assert.deepEqual(got.x.flat(), Array.from(x));
    assert.deepEqual(got.y, [1, -4, 2 ** -24]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('readSafetensorsHeader: the HF fixture files parse and every tensor is accounted for', (t) => {
  const dir = needShared(t, 'fixtures', 'hf-reference', 'models', 'llama3-tiny-f32');
  if (!dir) return;
  const h = readSafetensorsHeader(join(dir, 'model.safetensors'));
  // 4 layers × 9 tensors + embed + norm + lm_head (untied)
  assert.equal(h.entries.length, 4 * 9 + 3);
  const emb = h.entries.find((e) => e.name === 'model.embed_tokens.weight')!;
  assert.deepEqual(emb.shape, [512, 64]);
  assert.equal(emb.dtype, 'F32');
});
