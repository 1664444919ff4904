/**
 * The safetensors container: `u64 LE header length N` · `N bytes of JSON header` · `data section`.
 * Header: `{ name: { dtype, shape, data_offsets: [begin, end] }, "__metadata__"?: { string: string } }`,
 * offsets relative to the start of the data section (byte 8 + N).
 *
 * Reading validates everything a bad or truncated file can get wrong (the same rules as the Rust `safetensors`
 * crate): sane header length inside the file, JSON object, known dtype, integer shape, byte length =
 * prod(shape) · sizeof(dtype), offsets inside the data section, no overlaps, no holes, file not truncated. And it is
 * bounded before anything large is built: only a regular file is opened, the header size, its tensor count and its
 * nesting depth are checked on the raw text before it is parsed, a shape has at most MAX_RANK dimensions and an
 * element count that is a safe integer (dimension by dimension, zeros or not), and error lines quote values cut short.
 * Writing pads the header with spaces to a multiple of 8, sorts tensors by name and is atomic (temp + rename).
 */
import { closeSync, fstatSync, openSync, readSync, renameSync, rmSync, writeSync } from 'node:fs';
import { openRegularFile } from './regular-file.ts';
import { parseJsonBounded } from '../util/json-bounded.ts';
import { quoteClipped } from '../util/quote.ts';
import { tempPathFor } from '../util/atomic.ts';
import { resolve } from 'node:path';
import { SafekeepError } from '../util/errors.ts';

/** Every dtype the safetensors format defines, with its size in bytes (BOOL = 1). */
const SAFETENSORS_DTYPE_BYTES = {
  BOOL: 1, U8: 1, I8: 1, F8_E5M2: 1, F8_E4M3: 1,
  I16: 2, U16: 2, F16: 2, BF16: 2,
  I32: 4, U32: 4, F32: 4,
  I64: 8, U64: 8, F64: 8,
} as const;
type SafetensorsDType = keyof typeof SAFETENSORS_DTYPE_BYTES;

/** One validated header entry. `offset` is absolute in the file. */
export interface SafetensorsEntry {
  name: string;
  file: string;
  dtype: SafetensorsDType;
  shape: number[];
  offset: number;
  byteLength: number;
}

interface SafetensorsHeader {
  file: string;
  /** 8 + header length: absolute offset of the data section */
  dataStart: number;
  metadata: Record<string, string>;
  /** in header order */
  entries: SafetensorsEntry[];
}

/**
 * Header bytes: real checkpoints need ~150 bytes a tensor, a few MB for the largest shards; the Rust crate's 100 MB
 * lets a header of a million empty tensors through, which costs a gigabyte to parse. 16 MiB is ~100 000 tensors.
 */
export const MAX_HEADER_BYTES = 16 * 1024 * 1024;
/** Tensors in one file, counted on the raw header before it is parsed. */
export const MAX_TENSORS = 100_000;
/** Dimensions of a tensor (transformer weights have 1 to 3). */
export const MAX_RANK = 8;

/** Members of the top-level JSON object, counted by one scan (strings skipped) without parsing. */
function topLevelMembers(text: string): number {
  let depth = 0;
  let inString = false;
  let members = 0;
  let sawValue = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) { inString = true; if (depth === 1) sawValue = true; }
    else if (c === 0x7b || c === 0x5b) depth++;
    else if (c === 0x7d || c === 0x5d) depth--;
    else if (c === 0x2c && depth === 1) members++;
  }
  return sawValue ? members + 1 : 0;
}

/** A tensor name for an error line (names come from the file and can be anything). */
function nm(name: string): string {
  return name.length <= 120 && !/[\x00-\x1f]/.test(name) ? name : quoteClipped(name, 120);
}

/** prod(shape) when every partial product of the non-zero dimensions is a safe integer, else null. */
function elementCount(shape: number[]): number | null {
  let n = 1;
  let zero = false;
  for (const d of shape) {
    if (d === 0) { zero = true; continue; }
    n *= d;
    if (!Number.isSafeInteger(n)) return null;
  }
  return zero ? 0 : n;
}

function fail(file: string, what: string): never {
  throw new SafekeepError(`${file}: ${what}`);
}

function isDType(s: unknown): s is SafetensorsDType {
  return typeof s === 'string' && Object.prototype.hasOwnProperty.call(SAFETENSORS_DTYPE_BYTES, s);
}

function isNonNegInt(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
}

/** Reads and validates the header of a .safetensors file (reads only the header bytes). */
export function readSafetensorsHeader(path: string): SafetensorsHeader {
  const file = resolve(path);
  const fd = openRegularFile(file);
  try {
    const fileSize = fstatSync(fd).size;
    if (fileSize < 8) fail(file, `file is ${fileSize} bytes, too short for a safetensors header (truncated?)`);
    const lenBuf = Buffer.alloc(8);
    readSync(fd, lenBuf, 0, 8, 0);
    const n64 = lenBuf.readBigUInt64LE(0);
    if (n64 === 0n) fail(file, 'header length is 0 (not a safetensors file?)');
    if (n64 > BigInt(MAX_HEADER_BYTES)) fail(file, `header length ${n64} bytes is not sane (limit ${MAX_HEADER_BYTES}; not a safetensors file?)`);
    const n = Number(n64);
    if (8 + n > fileSize) fail(file, `header length ${n} runs past the end of the file (${fileSize} bytes; truncated?)`);
    const hbuf = Buffer.alloc(n);
    readSync(fd, hbuf, 0, n, 8);
    const text = hbuf.toString('utf8');
    if (!text.startsWith('{')) fail(file, 'header does not start with a JSON object (corrupted header)');
    const members = topLevelMembers(text);
    if (members > MAX_TENSORS + 1) fail(file, `header lists ${members} entries (at most ${MAX_TENSORS} tensors a file)`);
    let json: unknown;
    try {
      // { name: { dtype, shape: [..], data_offsets: [..] } } is three levels deep
      json = parseJsonBounded(text, 'header', 3);
    } catch (e) {
      fail(file, /nested/.test((e as Error).message) ? `${(e as Error).message}; not a safetensors header` : `header is not valid JSON (${(e as Error).message.replace(/^header: not valid JSON \(|\)$/g, '')})`);
    }
    if (json === null || typeof json !== 'object' || Array.isArray(json)) fail(file, 'header JSON is not an object');
    const dataStart = 8 + n;
    const dataSize = fileSize - dataStart;
    const metadata: Record<string, string> = {};
    const entries: SafetensorsEntry[] = [];
    const ranges: { name: string; begin: number; end: number }[] = [];
    for (const [name, raw] of Object.entries(json as Record<string, unknown>)) {
      if (name === '__metadata__') {
        if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) fail(file, '__metadata__ must be an object of strings');
        for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
          if (typeof v !== 'string') fail(file, `__metadata__.${nm(k)} must be a string`);
          metadata[k] = v;
        }
        continue;
      }
      const t = nm(name);
      if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) fail(file, `tensor ${t}: header entry is not an object`);
      const e = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
      if (!isDType(e.dtype)) fail(file, `tensor ${t}: unknown dtype ${quoteClipped(e.dtype)}`);
      if (!Array.isArray(e.shape) || !e.shape.every(isNonNegInt)) fail(file, `tensor ${t}: shape ${quoteClipped(e.shape)} is not a list of non-negative integers`);
      if (e.shape.length > MAX_RANK) fail(file, `tensor ${t}: shape has ${e.shape.length} dimensions (at most ${MAX_RANK})`);
      const offs = e.data_offsets;
      if (!Array.isArray(offs) || offs.length !== 2 || !offs.every(isNonNegInt)) fail(file, `tensor ${t}: data_offsets ${quoteClipped(offs)} is not [begin, end]`);
      const [begin, end] = offs as [number, number];
      if (end < begin) fail(file, `tensor ${t}: data_offsets [${begin}, ${end}] end before begin`);
      const shape = e.shape as number[];
      const numel = elementCount(shape);
      const expected = numel === null ? NaN : numel * SAFETENSORS_DTYPE_BYTES[e.dtype];
      if (!Number.isSafeInteger(expected)) fail(file, `tensor ${t}: shape ${quoteClipped(shape)} has more elements than can be counted exactly (not a real tensor)`);
      if (end - begin !== expected) {
        fail(file, `tensor ${t}: ${e.dtype} ${quoteClipped(shape)} needs ${expected} bytes but data_offsets [${begin}, ${end}] span ${end - begin} (dtype/shape/byte-length mismatch)`);
      }
      if (end > dataSize) {
        fail(file, `tensor ${t}: data_offsets [${begin}, ${end}] run past the end of the data section (${dataSize} bytes; file truncated?)`);
      }
      ranges.push({ name, begin, end });
      entries.push({ name, file, dtype: e.dtype, shape: [...shape], offset: dataStart + begin, byteLength: expected });
    }
    ranges.sort((a, b) => a.begin - b.begin || a.end - b.end);
    let cursor = 0;
    let prev = '';
    for (const r of ranges) {
      if (r.begin < cursor) fail(file, `tensor ${nm(r.name)}: data_offsets [${r.begin}, ${r.end}] overlap tensor ${nm(prev)} (ends at ${cursor})`);
      if (r.begin > cursor) fail(file, `tensor ${nm(r.name)}: ${r.begin - cursor} unindexed bytes before it at data offset ${cursor} (corrupted header)`);
      cursor = r.end;
      prev = r.name;
    }
    if (cursor !== dataSize) fail(file, `data section is ${dataSize} bytes but the tensors cover ${cursor} (trailing bytes; corrupted file?)`);
    return { file, dataStart, metadata, entries };
  } finally {
    closeSync(fd);
  }
}

/** What `writeSafetensors` accepts per tensor: raw little-endian bytes of the dtype (F32 → Float32Array, BF16/F16 → Uint16Array bits...). */
export interface TensorToWrite {
  dtype: SafetensorsDType;
  shape: number[];
  data: ArrayBufferView;
}


/** A tensor's header entry for `writeSafetensorsStreamed`: its bytes come from `data()` when its turn comes. */
interface TensorSpec {
  dtype: SafetensorsDType;
  shape: number[];
}

/**
 * Writes a .safetensors file atomically. Tensors are stored sorted by name, contiguous; the header is padded with
 * spaces to a multiple of 8 (readable by the Python `safetensors` package, numpy and torch).
 */
export function writeSafetensors(path: string, tensors: Record<string, TensorToWrite>, metadata?: Record<string, string>): void {
  for (const [name, t] of Object.entries(tensors)) {
    const bytes = isDType(t.dtype) && t.shape.every(isNonNegInt) ? t.shape.reduce((a, b) => a * b, 1) * SAFETENSORS_DTYPE_BYTES[t.dtype] : t.data.byteLength;
    if (t.data.byteLength !== bytes) {
      throw new SafekeepError(`${path}: tensor ${name}: ${t.dtype} ${JSON.stringify(t.shape)} needs ${bytes} bytes, data has ${t.data.byteLength}`);
    }
  }
  writeSafetensorsStreamed(path, tensors, (name) => tensors[name]!.data, metadata);
}

/**
 * `writeSafetensors` with each tensor's bytes asked for (by `data(name)`, in sorted-name order) only when it is
 * written, so a file larger than RAM (an 8B-shaped random checkpoint) is written holding one tensor at a time.
 */
export function writeSafetensorsStreamed(path: string, specs: Record<string, TensorSpec>, data: (name: string) => ArrayBufferView,
  metadata?: Record<string, string>): void {
  const names = Object.keys(specs).sort();
  const header: Record<string, unknown> = {};
  if (metadata && Object.keys(metadata).length > 0) header.__metadata__ = { ...metadata };
  let offset = 0;
  const sizes = new Map<string, number>();
  for (const name of names) {
    if (name === '__metadata__') throw new SafekeepError(`${path}: '__metadata__' is not a valid tensor name`);
    const t = specs[name]!;
    if (!isDType(t.dtype)) throw new SafekeepError(`${path}: tensor ${name}: unknown dtype ${String(t.dtype)}`);
    if (!t.shape.every(isNonNegInt)) throw new SafekeepError(`${path}: tensor ${name}: bad shape ${JSON.stringify(t.shape)}`);
    const bytes = t.shape.reduce((a, b) => a * b, 1) * SAFETENSORS_DTYPE_BYTES[t.dtype];
    sizes.set(name, bytes);
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let text = JSON.stringify(header);
  const raw = Buffer.byteLength(text, 'utf8');
  text += ' '.repeat((8 - (raw % 8)) % 8);
  const hbytes = Buffer.from(text, 'utf8');
  const lenBuf = Buffer.alloc(8);
  lenBuf.writeBigUInt64LE(BigInt(hbytes.length), 0);
  const tmp = tempPathFor(path);
  const fd = openSync(tmp, 'w');
  try {
    writeSync(fd, lenBuf);
    writeSync(fd, hbytes);
    for (const name of names) {
      const d = data(name);
      if (d.byteLength !== sizes.get(name)) {
        const t = specs[name]!;
        throw new SafekeepError(`${path}: tensor ${name}: ${t.dtype} ${JSON.stringify(t.shape)} needs ${sizes.get(name)} bytes, data has ${d.byteLength}`);
      }
      const view = new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
      // write in chunks: writeSync may write fewer bytes than asked for very large buffers
      let done = 0;
      while (done < view.length) done += writeSync(fd, view, done, Math.min(view.length - done, 1 << 30));
    }
    closeSync(fd);
    renameSync(tmp, path);
  } catch (e) {
    try { closeSync(fd); } catch { /* already closed */ }
    rmSync(tmp, { force: true });
    throw e;
  }
}
