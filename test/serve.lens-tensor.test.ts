/**
 * vllm-lens's tensor encoding (src/serve/lens-tensor.ts): the content size read from a zstd frame header for the
 * header forms a tensor meets (1-, 2- (+256) and 4-byte sizes; single-segment or with a window descriptor) equals the frame's
 * decompressed length, for frames written by the package and by the reference `zstd` CLI where installed; float16
 * and bfloat16 storage reads as IEEE-754 says (bit patterns with known values); bad frames are 400s before any
 * decompression.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { compress } from '@bokuweb/zstd-wasm';
import { decodeLensTensor, encodeLensTensor, frameContentSize, zstdReady } from '../src/serve/lens-tensor.ts';
import { HttpError } from '../src/http/errors.ts';

const sizes = [0, 100, 255, 256, 300, 65791, 65792, 70000, 3_000_000];
const data = (n: number) => Uint8Array.from({ length: n }, (_, i) => (i * 2654435761) >>> 24);

test('frame content size: every header form, from the package and from the zstd CLI', async (t) => {
  await zstdReady();
  for (const n of sizes) assert.equal(frameContentSize(compress(data(n), 1)), n, `package, ${n} bytes`);
  const cli = spawnSync('zstd', ['--version']);
  if (cli.status !== 0) {
    t.diagnostic('the zstd CLI is not installed: only the package\'s frames checked');
    return;
  }
  for (const n of sizes) {
    // streamed from stdin with --content-size: a window descriptor and no single-segment flag for large inputs
    const z = spawnSync('zstd', ['-q', '-c', '--content-size', `--stream-size=${n}`], { input: data(n), maxBuffer: 1 << 26 });
    assert.equal(z.status, 0);
    assert.equal(frameContentSize(z.stdout), n, `zstd CLI, ${n} bytes`);
  }
  // without a content size the frame is refused (vllm-lens's frames always carry it)
  const noSize = spawnSync('zstd', ['-q', '-c', '--no-content-size'], { input: data(1000) });
  assert.match(String(frameContentSize(noSize.stdout)), /does not declare its content size/);
});

test('float16 and bfloat16 storage read as IEEE-754 says; bad values and frames are 400s', async () => {
  await zstdReady();
  const tensor = (bytes: Uint8Array, dtype: string, original: string, shape: number[]) => ({
    data: Buffer.from(compress(bytes, 1)).toString('base64'), dtype, shape, compression: 'zstd', original_dtype: original,
  });
  const u16 = (xs: number[]) => new Uint8Array(Uint16Array.from(xs).buffer);
  // half: 1.0 = 0x3c00, −2.0 = 0xc000, 65504 = 0x7bff, smallest subnormal 2^−24 = 0x0001, 0.333251953125 = 0x3555
  const half = decodeLensTensor(tensor(u16([0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555]), 'float16', 'torch.float16', [1, 5]), 'x', () => null);
  assert.deepEqual([...half.values], [1, -2, 65504, 2 ** -24, 0.333251953125].map((v) => Math.fround(v)));
  // bfloat16 (int16 bits): 1.0 = 0x3f80, −3.0 = 0xc040, 2^100 = 0x71800000 >> 16
  const bf = decodeLensTensor(tensor(u16([0x3f80, 0xc040, 0x7180]), 'int16', 'torch.bfloat16', [3]), 'x', () => null);
  assert.deepEqual([...bf.values], [1, -3, 2 ** 100]);
  const bad: [unknown, RegExp][] = [
    [tensor(u16([0x7c00]), 'float16', 'torch.float16', [1]), /x: value 0 is not a finite float32 number/],
    [tensor(u16([0x3c00]), 'int16', 'torch.int16', [1]), /x\.dtype: "int16" \(original_dtype "torch\.int16"\) is not read here/],
    [tensor(u16([0x3c00, 1]), 'float16', 'torch.float16', [1]), /x\.data: the zstd frame holds 4 bytes; shape \[1\] of float16 is 2/],
    [{ ...tensor(u16([0x3c00]), 'float16', 'torch.float16', [1]), compression: 'lz4' }, /x\.compression must be "zstd" or absent/],
    [{ ...tensor(u16([0x3c00]), 'float16', 'torch.float16', [1]), data: '%%%' }, /x\.data must be base64/],
    [{ ...tensor(u16([0x3c00]), 'float16', 'torch.float16', [1]), more: 1 }, /x\.more: unknown field/],
  ];
  for (const [v, want] of bad) assert.throws(() => decodeLensTensor(v, 'x', () => null), (e: unknown) => e instanceof HttpError && e.status === 400 && want.test(e.message));
  // what the server writes reads back (float32, the frame's size declared)
  const values = Float32Array.from({ length: 24 }, (_, i) => Math.sin(i));
  const enc = encodeLensTensor(values, [2, 3, 4]);
  assert.deepEqual(enc.shape, [2, 3, 4]);
  assert.deepEqual(decodeLensTensor(enc, 'y', (s) => (s.length === 3 ? null : 'no')).values, values);
});
