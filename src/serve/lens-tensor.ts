/**
 * vllm-lens's tensor encoding (its `_helpers/_serialize.py`), which its client and Inspect provider read and write:
 * `{"data": base64(zstd(raw bytes)), "dtype": numpy storage dtype, "shape": [...], "compression": "zstd",
 * "original_dtype": "torch.<dtype>"}` — raw bytes little-endian, row-major; a bfloat16 tensor is stored as
 * `int16` bits with `original_dtype: "torch.bfloat16"`; without `compression` the bytes are stored as they are.
 * Every zstd frame written carries its content size (Python's `zstandard.ZstdDecompressor().decompress` needs it).
 *
 * Reading a client's tensor is bounded before anything is decompressed: the shape must be the one the caller
 * expects (so its byte count is known), and the frame must declare exactly that content size and use no dictionary
 * — a small body cannot expand into a large allocation.
 */
import { compress, decompress, init } from '@bokuweb/zstd-wasm';
import { badRequest } from '../http/errors.ts';
import { isObject, shown } from '../engine/run/intervention-json.ts';

export interface LensTensor {
  data: string;
  dtype: string;
  shape: number[];
  compression: 'zstd';
  original_dtype: string;
}

let ready: Promise<void> | null = null;
/**
 * the zstd module (WebAssembly), instantiated once per process (the package's `init` called again swaps the module
 * under calls in flight); await before encoding or decoding
 */
export function zstdReady(): Promise<void> {
  ready ??= init();
  return ready;
}

/** float32 values, little-endian, zstd level 1 (as vllm-lens writes) → the encoding. `zstdReady()` first. */
export function encodeLensTensor(values: Float32Array, shape: number[]): LensTensor {
  // a Float32Array is in the platform's byte order: little-endian on x86 and ARM, so its bytes are the wire's
  const raw = LITTLE_ENDIAN ? new Uint8Array(values.buffer, values.byteOffset, values.byteLength) : swapped(values);
  return { data: Buffer.from(compress(raw, 1)).toString('base64'), dtype: 'float32', shape, compression: 'zstd', original_dtype: 'torch.float32' };
}

const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;

/** little-endian bytes of float32 values on a big-endian platform */
function swapped(values: Float32Array): Uint8Array {
  const raw = new Uint8Array(values.length * 4);
  const view = new DataView(raw.buffer);
  for (let i = 0; i < values.length; i++) view.setFloat32(i * 4, values[i]!, true);
  return raw;
}

/** storage dtypes read (numpy's names), bytes per value, and the value at a byte offset */
const READERS: Readonly<Record<string, { size: number; read: (v: DataView, at: number) => number }>> = {
  float32: { size: 4, read: (v, at) => v.getFloat32(at, true) },
  float64: { size: 8, read: (v, at) => v.getFloat64(at, true) },
  float16: { size: 2, read: (v, at) => halfToFloat(v.getUint16(at, true)) },
  // bfloat16 travels as int16 bits: the upper half of a float32
  bfloat16: { size: 2, read: (v, at) => new Float32Array(new Uint32Array([v.getUint16(at, true) << 16]).buffer)[0]! },
};

function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/**
 * The content size a zstd frame declares (RFC 8878 §3.1.1.1), or a reason it cannot be read: no zstd magic, no
 * content size, a dictionary.
 */
export function frameContentSize(b: Uint8Array): number | string {
  if (b.length < 6 || b[0] !== 0x28 || b[1] !== 0xb5 || b[2] !== 0x2f || b[3] !== 0xfd) return 'not a zstd frame (no magic number)';
  const fhd = b[4]!;
  const single = (fhd >> 5) & 1;
  const dictBytes = [0, 1, 2, 4][fhd & 3]!;
  const fcsBytes = [single ? 1 : 0, 2, 4, 8][fhd >> 6]!;
  if (fcsBytes === 0) return 'the zstd frame does not declare its content size';
  let at = 5 + (single ? 0 : 1);
  for (let i = 0; i < dictBytes; i++) if (b[at + i] !== 0) return 'the zstd frame names a dictionary';
  at += dictBytes;
  if (b.length < at + fcsBytes) return 'the zstd frame header is cut short';
  let size = 0;
  for (let i = fcsBytes - 1; i >= 0; i--) size = size * 256 + b[at + i]!;
  return fcsBytes === 2 ? size + 256 : size;
}

/**
 * A client's tensor at `at` → float32 values, row-major. `shapeOk` says whether the shape is one the caller takes
 * (the byte count follows from it); values must be finite float32. `zstdReady()` first.
 */
export function decodeLensTensor(v: unknown, at: string, shapeOk: (shape: number[]) => string | null): { values: Float32Array; shape: number[] } {
  if (!isObject(v)) throw badRequest(`${at} must be vllm-lens's tensor encoding {"data", "dtype", "shape", "compression", "original_dtype"}`);
  for (const k of Object.keys(v)) if (!['data', 'dtype', 'shape', 'compression', 'original_dtype'].includes(k)) throw badRequest(`${at}.${k}: unknown field`);
  const { data, dtype, shape, compression } = v;
  const original = v.original_dtype;
  if (!Array.isArray(shape) || !shape.every((n) => Number.isInteger(n) && n >= 0)) throw badRequest(`${at}.shape must be a list of sizes, got ${shown(shape)}`);
  const why = shapeOk(shape as number[]);
  if (why) throw badRequest(`${at}.shape ${shown(shape)}: ${why}`);
  const storage = dtype === 'int16' && original === 'torch.bfloat16' ? 'bfloat16' : typeof dtype === 'string' ? dtype : '';
  const reader = READERS[storage];
  if (!reader || dtype === 'bfloat16') throw badRequest(`${at}.dtype: ${shown(dtype)}${original !== undefined ? ` (original_dtype ${shown(original)})` : ''} is not read here: float32, float64, float16, or int16 with original_dtype "torch.bfloat16"`);
  if (original !== undefined && original !== null && (typeof original !== 'string' || !/^torch\.(float32|float64|float16|bfloat16)$/.test(original))) {
    throw badRequest(`${at}.original_dtype must be a torch floating dtype name, got ${shown(original)}`);
  }
  if (typeof data !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(data)) throw badRequest(`${at}.data must be base64`);
  const count = (shape as number[]).reduce((a, n) => a * n, 1);
  const bytes = count * reader.size;
  let raw: Uint8Array = Buffer.from(data, 'base64');
  if (compression === 'zstd') {
    const size = frameContentSize(raw);
    if (typeof size === 'string') throw badRequest(`${at}.data: ${size}`);
    if (size !== bytes) throw badRequest(`${at}.data: the zstd frame holds ${size} bytes; shape ${shown(shape)} of ${storage} is ${bytes}`);
    try {
      raw = decompress(raw, { defaultHeapSize: bytes });
    } catch {
      throw badRequest(`${at}.data: not a valid zstd frame`);
    }
  } else if (compression !== undefined && compression !== null) {
    throw badRequest(`${at}.compression must be "zstd" or absent, got ${shown(compression)}`);
  }
  if (raw.length !== bytes) throw badRequest(`${at}.data holds ${raw.length} bytes; shape ${shown(shape)} of ${storage} is ${bytes}`);
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  // float32 on a little-endian platform: the bytes as they are (copied: a Buffer's bytes may sit in a shared pool at
  // any offset, and Buffer#slice is a view)
  const values = storage === 'float32' && LITTLE_ENDIAN ? new Float32Array(new Uint8Array(raw).buffer) : new Float32Array(count);
  for (let i = 0; i < count; i++) {
    if (storage !== 'float32' || !LITTLE_ENDIAN) values[i] = reader.read(view, i * reader.size);
    if (!Number.isFinite(values[i]!)) throw badRequest(`${at}: value ${i} is not a finite float32 number (${storage === 'float64' ? reader.read(view, i * 8) : values[i]})`);
  }
  return { values, shape: shape as number[] };
}
