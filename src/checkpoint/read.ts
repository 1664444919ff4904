/**
 * Reading tensor data. Every stored dtype is upcast to f32 exactly (BF16 and F16 are subsets of f32).
 */
import { closeSync, readSync } from 'node:fs';
import { openRegularFile } from './regular-file.ts';
import { SafekeepError } from '../util/errors.ts';
import { bf16BitsToF32, f16BitsToF32 } from './dtype.ts';
import type { TensorEntry } from './types.ts';

/** Raw bytes of a tensor (little-endian, as stored). */
export function readTensorBytes(entry: TensorEntry): Uint8Array {
  const buf = new Uint8Array(new ArrayBuffer(entry.byteLength));
  const fd = openRegularFile(entry.file);
  try {
    let done = 0;
    while (done < entry.byteLength) {
      const n = readSync(fd, buf, done, Math.min(entry.byteLength - done, 1 << 30), entry.offset + done);
      if (n === 0) throw new SafekeepError(`${entry.file}: tensor ${entry.name}: file ended while reading its data (truncated?)`);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
  return buf;
}

/** The tensor as f32, row-major in its HF shape. [prod(shape)] */
export function readTensorF32(entry: TensorEntry): Float32Array {
  const ab = readTensorBytes(entry).buffer;
  switch (entry.dtype) {
    case 'F32':
      return new Float32Array(ab);
    case 'BF16':
      return bf16BitsToF32(new Uint16Array(ab));
    case 'F16':
      return f16BitsToF32(new Uint16Array(ab));
  }
}
