/**
 * The GGUF container (version 3, little-endian), as ggml's gguf.cpp reads it:
 * `"GGUF"` · `u32 version` · `u64 n_tensors` · `u64 n_kv` · n_kv × (key string · u32 type · value) ·
 * n_tensors × (name string · u32 n_dims · n_dims × u64 ne (ne[0] = the fastest-varying dimension) · u32 ggml type ·
 * u64 offset) · zero padding to the alignment · data section. A string is `u64 length` · UTF-8 bytes; an array is
 * `u32 element type` · `u64 count` · elements. Offsets are relative to the data section and must be exactly the
 * running sum of the tensors' sizes, each padded to the alignment (`general.alignment`, default 32): gguf.cpp
 * refuses any other layout.
 *
 * Only what safekeep needs: F32 tensors (a control vector is 1-D F32 rows), every metadata type on reading (repeng
 * and llama.cpp write strings and integers; other writers add arrays), and reading bounded before anything large is
 * built (a regular file, a size cap, counts and lengths checked against the bytes that are there).
 */
import { closeSync, fstatSync, readSync } from 'node:fs';
import { openRegularFile } from './regular-file.ts';
import { writeFileAtomic } from '../util/atomic.ts';
import { quoteClipped } from '../util/quote.ts';
import { SafekeepError } from '../util/errors.ts';

export const GGUF_MAGIC = 'GGUF';
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** ggml_type of a 32-bit float tensor */
export const GGML_TYPE_F32 = 0;
/** GGML_MAX_DIMS */
const MAX_DIMS = 4;
/** a control vector for a 70B model is ~3 MB; a whole model is not what this reader is for */
export const MAX_GGUF_BYTES = 256 * 1024 * 1024;

/** gguf_type: the value types of the metadata */
export const GGUF_TYPE = {
  UINT8: 0, INT8: 1, UINT16: 2, INT16: 3, UINT32: 4, INT32: 5, FLOAT32: 6, BOOL: 7, STRING: 8, ARRAY: 9,
  UINT64: 10, INT64: 11, FLOAT64: 12,
} as const;
const TYPE_NAME = Object.fromEntries(Object.entries(GGUF_TYPE).map(([k, v]) => [v, k])) as Record<number, string>;
/** bytes of the fixed-size types */
const FIXED_BYTES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

export type GgufScalar = number | bigint | boolean | string;
export type GgufValue = GgufScalar | GgufScalar[];
/** a metadata value to write, with its GGUF type */
export type GgufKv =
  | { type: 'string'; value: string }
  | { type: 'uint32' | 'int32' | 'float32'; value: number }
  | { type: 'bool'; value: boolean };

/** A tensor to write: F32, shape in ggml order (ne[0] first); data length = product of the shape. */
export interface GgufTensorToWrite {
  name: string;
  /** ne[0], ne[1], …: for a 1-D tensor [n] */
  shape: number[];
  data: Float32Array;
}

export interface GgufTensorInfo {
  name: string;
  /** ne[0], ne[1], … */
  shape: number[];
  /** ggml_type (0 = F32) */
  type: number;
  /** absolute offset of the tensor's data in the file */
  offset: number;
}

export interface GgufFile {
  version: number;
  alignment: number;
  /** key → value in file order (arrays as JS arrays, 64-bit integers as bigint) */
  metadata: Map<string, GgufValue>;
  /** in file order */
  tensors: GgufTensorInfo[];
  /** the whole file */
  bytes: Uint8Array;
}

const pad = (n: number, a: number) => (n + a - 1) - ((n + a - 1) % a);

// ---- writing -----------------------------------------------------------------------------------------------------

/** Bytes of a GGUF v3 file: metadata in the given order, then the F32 tensors in the given order. */
export function encodeGguf(kvs: ReadonlyArray<[string, GgufKv]>, tensors: readonly GgufTensorToWrite[], alignment = GGUF_DEFAULT_ALIGNMENT): Uint8Array {
  const enc = new TextEncoder();
  const parts: Uint8Array[] = [];
  const u32 = (v: number) => { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, v, true); parts.push(b); };
  const u64 = (v: number) => { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, BigInt(v), true); parts.push(b); };
  const str = (s: string) => { const b = enc.encode(s); u64(b.length); parts.push(b); };
  parts.push(enc.encode(GGUF_MAGIC));
  u32(GGUF_VERSION);
  u64(tensors.length);
  u64(kvs.length);
  for (const [key, kv] of kvs) {
    str(key);
    const b = new Uint8Array(4);
    const dv = new DataView(b.buffer);
    switch (kv.type) {
      case 'string': u32(GGUF_TYPE.STRING); str(kv.value); continue;
      case 'uint32': u32(GGUF_TYPE.UINT32); dv.setUint32(0, kv.value, true); break;
      case 'int32': u32(GGUF_TYPE.INT32); dv.setInt32(0, kv.value, true); break;
      case 'float32': u32(GGUF_TYPE.FLOAT32); dv.setFloat32(0, kv.value, true); break;
      case 'bool': u32(GGUF_TYPE.BOOL); parts.push(Uint8Array.of(kv.value ? 1 : 0)); continue;
    }
    parts.push(b);
  }
  let offset = 0;
  for (const t of tensors) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    if (t.shape.length < 1 || t.shape.length > MAX_DIMS || n !== t.data.length) throw new Error(`gguf: tensor ${t.name}: shape [${t.shape}] does not hold ${t.data.length} values`);
    str(t.name);
    u32(t.shape.length);
    for (const ne of t.shape) u64(ne);
    u32(GGML_TYPE_F32);
    u64(offset);
    offset += pad(4 * n, alignment);
  }
  const headerBytes = parts.reduce((a, p) => a + p.length, 0);
  parts.push(new Uint8Array(pad(headerBytes, alignment) - headerBytes));
  for (const t of tensors) {
    const b = new Uint8Array(pad(4 * t.data.length, alignment));
    const dv = new DataView(b.buffer);
    t.data.forEach((x, i) => dv.setFloat32(4 * i, x, true));
    parts.push(b);
  }
  const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

/** Write a GGUF file atomically (never half a file). */
export function writeGguf(path: string, kvs: ReadonlyArray<[string, GgufKv]>, tensors: readonly GgufTensorToWrite[]): void {
  writeFileAtomic(path, encodeGguf(kvs, tensors));
}

// ---- reading -----------------------------------------------------------------------------------------------------

/** A bounded little-endian cursor: every read checks that its bytes are in the file. */
class Cursor {
  at = 0;
  private readonly dv: DataView;
  constructor(readonly bytes: Uint8Array, private readonly where: string) {
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  fail(msg: string): never { throw new SafekeepError(`${this.where}: not a readable GGUF file (${msg})`); }
  need(n: number, what: string): void {
    if (n > this.bytes.length - this.at) this.fail(`${what} runs past the end of the file at byte ${this.at}`);
  }
  u32(what: string): number { this.need(4, what); const v = this.dv.getUint32(this.at, true); this.at += 4; return v; }
  /** a u64 that must fit a safe integer (counts, lengths, offsets) */
  count(what: string): number {
    this.need(8, what);
    const v = this.dv.getBigUint64(this.at, true);
    this.at += 8;
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) this.fail(`${what} = ${v} is too large`);
    return Number(v);
  }
  str(what: string): string {
    const n = this.count(`${what} length`);
    this.need(n, what);
    const s = new TextDecoder('utf-8', { fatal: true }).decode(this.bytes.subarray(this.at, this.at + n));
    this.at += n;
    return s;
  }
  scalar(type: number, what: string): GgufScalar {
    if (type === GGUF_TYPE.STRING) return this.str(what);
    const n = FIXED_BYTES[type];
    if (n === undefined) this.fail(`${what} has unknown value type ${type}`);
    this.need(n, what);
    const a = this.at;
    this.at += n;
    switch (type) {
      case GGUF_TYPE.UINT8: return this.dv.getUint8(a);
      case GGUF_TYPE.INT8: return this.dv.getInt8(a);
      case GGUF_TYPE.UINT16: return this.dv.getUint16(a, true);
      case GGUF_TYPE.INT16: return this.dv.getInt16(a, true);
      case GGUF_TYPE.UINT32: return this.dv.getUint32(a, true);
      case GGUF_TYPE.INT32: return this.dv.getInt32(a, true);
      case GGUF_TYPE.FLOAT32: return this.dv.getFloat32(a, true);
      case GGUF_TYPE.BOOL: return this.dv.getUint8(a) !== 0;
      case GGUF_TYPE.UINT64: return this.dv.getBigUint64(a, true);
      case GGUF_TYPE.INT64: return this.dv.getBigInt64(a, true);
      default: return this.dv.getFloat64(a, true);
    }
  }
}

function readValue(c: Cursor, key: string): GgufValue {
  const type = c.u32(`type of ${key}`);
  if (type !== GGUF_TYPE.ARRAY) return c.scalar(type, key);
  const elem = c.u32(`element type of ${key}`);
  if (elem === GGUF_TYPE.ARRAY) c.fail(`${key} is an array of arrays`);
  const n = c.count(`length of ${key}`);
  // each element takes at least one byte: a count larger than what is left is a lie, refused before any allocation
  c.need(n * (FIXED_BYTES[elem] ?? 8), `${key} (${n} × ${TYPE_NAME[elem] ?? elem})`);
  const out: GgufScalar[] = [];
  for (let i = 0; i < n; i++) out.push(c.scalar(elem, `${key}[${i}]`));
  return out;
}

/** Parse GGUF bytes (`where` names the file in errors). */
export function parseGguf(bytes: Uint8Array, where: string): GgufFile {
  const c = new Cursor(bytes, where);
  c.need(4, 'magic');
  const magic = new TextDecoder().decode(bytes.subarray(0, 4));
  if (magic !== GGUF_MAGIC) c.fail(`magic ${quoteClipped(magic)}, expected "GGUF"`);
  c.at = 4;
  const version = c.u32('version');
  // a big-endian file reads its version byte-swapped
  if (version !== 2 && version !== GGUF_VERSION) c.fail(`version ${version}; version 3 (little-endian) is read, as llama.cpp writes it`);
  const nTensors = c.count('tensor count');
  const nKv = c.count('metadata count');
  // every entry takes at least 8 bytes: refuse counts the file cannot hold before looping over them
  c.need(8 * (nTensors + nKv), `${nKv} metadata entries and ${nTensors} tensors`);
  const metadata = new Map<string, GgufValue>();
  for (let i = 0; i < nKv; i++) {
    const key = c.str(`key ${i}`);
    if (metadata.has(key)) c.fail(`duplicate key ${quoteClipped(key)}`);
    metadata.set(key, readValue(c, key));
  }
  const al = metadata.get('general.alignment');
  const alignment = al === undefined ? GGUF_DEFAULT_ALIGNMENT : Number(al);
  if (!Number.isInteger(alignment) || alignment <= 0 || alignment % 8 !== 0) c.fail(`general.alignment = ${String(al)}, expected a multiple of 8`);
  const infos: Array<Omit<GgufTensorInfo, 'offset'> & { rel: number }> = [];
  const names = new Set<string>();
  for (let i = 0; i < nTensors; i++) {
    const name = c.str(`tensor ${i} name`);
    if (names.has(name)) c.fail(`duplicate tensor ${quoteClipped(name)}`);
    names.add(name);
    const nDims = c.u32(`${name} n_dims`);
    if (nDims < 1 || nDims > MAX_DIMS) c.fail(`tensor ${quoteClipped(name)} has ${nDims} dimensions (1..${MAX_DIMS})`);
    const shape: number[] = [];
    for (let k = 0; k < nDims; k++) shape.push(c.count(`${name} ne[${k}]`));
    const type = c.u32(`${name} type`);
    infos.push({ name, shape, type, rel: c.count(`${name} offset`) });
  }
  const dataStart = pad(c.at, alignment);
  // gguf.cpp's rule: each tensor starts where the previous one ended, padded to the alignment
  let expected = 0;
  const tensors = infos.map(({ rel, ...t }) => {
    if (rel !== expected) c.fail(`tensor ${quoteClipped(t.name)} at data offset ${rel}, expected ${expected}`);
    const n = t.shape.reduce((a, b) => a * b, 1);
    // only F32 has a known size here; a later tensor of another type cannot be located, so refuse by name
    if (t.type !== GGML_TYPE_F32) c.fail(`tensor ${quoteClipped(t.name)} has ggml type ${t.type}; only F32 (0) is read`);
    if (!Number.isSafeInteger(4 * n) || dataStart + rel + 4 * n > bytes.length) c.fail(`tensor ${quoteClipped(t.name)} [${t.shape}] runs past the end of the file`);
    expected = rel + pad(4 * n, alignment);
    return { ...t, offset: dataStart + rel };
  });
  // gguf.cpp reads the data section whole, the last tensor's padding included
  if (dataStart + expected > bytes.length) c.fail(`the data section ends at byte ${dataStart + expected}, the file at ${bytes.length}: it runs past the end of the file`);
  return { version, alignment, metadata, tensors, bytes };
}

/** Read and parse a GGUF file (a regular file of at most MAX_GGUF_BYTES). */
export function readGguf(path: string): GgufFile {
  const fd = openRegularFile(path);
  try {
    const size = fstatSync(fd).size;
    if (size > MAX_GGUF_BYTES) throw new SafekeepError(`${path}: ${size} bytes; a GGUF file read here is at most ${MAX_GGUF_BYTES} (control vectors, not models)`);
    const bytes = new Uint8Array(size);
    let got = 0;
    while (got < size) {
      const n = readSync(fd, bytes, got, size - got, got);
      if (n === 0) break;
      got += n;
    }
    return parseGguf(bytes.subarray(0, got), path);
  } finally {
    closeSync(fd);
  }
}

/** The values of an F32 tensor (a copy, in file order). */
export function ggufTensorF32(file: GgufFile, t: GgufTensorInfo): Float32Array {
  const n = t.shape.reduce((a, b) => a * b, 1);
  const dv = new DataView(file.bytes.buffer, file.bytes.byteOffset + t.offset, 4 * n);
  return Float32Array.from({ length: n }, (_, i) => dv.getFloat32(4 * i, true));
}
