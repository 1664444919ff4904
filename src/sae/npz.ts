/**
 * numpy's `.npz` (what `np.savez` writes and Gemma Scope's `params.npz` is): a zip archive of `.npy` files. Read
 * here without unpacking to disk: the zip's central directory (zip64 sizes and offsets included, since np.savez
 * writes archives past 4 GB with them) gives each member's place; a stored member (np.savez) is read in place, a
 * deflated one (np.savez_compressed) is inflated. The `.npy` header (format 1.0–3.0) gives dtype and shape;
 * little-endian f4 / f2 / f8 and C order only (anything else is refused by name: a pickle, `object` arrays,
 * Fortran order, big-endian).
 */
import { closeSync, fstatSync, readSync } from 'node:fs';
import { inflateRawSync } from 'node:zlib';
import { openRegularFile } from '../checkpoint/regular-file.ts';
import { SafekeepError } from '../util/errors.ts';

export type NpyDtype = 'F32' | 'F16' | 'F64';

/** One array of the archive: its name (without `.npy`), dtype, shape and its little-endian bytes on demand. */
export interface NpyArray {
  name: string;
  dtype: NpyDtype;
  shape: number[];
  /** the raw data (prod(shape) · itemsize bytes) */
  bytes(): Uint8Array;
}

const MAX_MEMBERS = 10_000;

function readAt(fd: number, pos: number, len: number, file: string): Buffer {
  const b = Buffer.alloc(len);
  let done = 0;
  while (done < len) {
    const n = readSync(fd, b, done, Math.min(len - done, 1 << 30), pos + done);
    if (n === 0) throw new SafekeepError(`${file}: the archive ended early (truncated?)`);
    done += n;
  }
  return b;
}

interface Member { name: string; method: number; compressed: number; size: number; localOffset: number }

/** The central directory's members (zip64 extra fields resolved). */
function centralDirectory(fd: number, file: string, size: number): Member[] {
  const tailLen = Math.min(size, 65_557);
  const tail = readAt(fd, size - tailLen, tailLen, file);
  const at = tail.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  if (at < 0) throw new SafekeepError(`${file}: not a zip archive (no end-of-central-directory record); an .npz is one`);
  let count = tail.readUInt16LE(at + 10);
  let cdSize = tail.readUInt32LE(at + 12);
  let cdOffset = tail.readUInt32LE(at + 16);
  if (count === 0xffff || cdOffset === 0xffffffff || cdSize === 0xffffffff) {
    const loc = at - 20;
    if (loc < 0 || tail.readUInt32LE(loc) !== 0x07064b50) throw new SafekeepError(`${file}: zip64 archive without its locator`);
    const eocd64 = readAt(fd, Number(tail.readBigUInt64LE(loc + 8)), 56, file);
    if (eocd64.readUInt32LE(0) !== 0x06064b50) throw new SafekeepError(`${file}: bad zip64 end-of-central-directory record`);
    count = Number(eocd64.readBigUInt64LE(32));
    cdSize = Number(eocd64.readBigUInt64LE(40));
    cdOffset = Number(eocd64.readBigUInt64LE(48));
  }
  if (count > MAX_MEMBERS || cdOffset + cdSize > size) throw new SafekeepError(`${file}: implausible zip directory (${count} members)`);
  const cd = readAt(fd, cdOffset, cdSize, file);
  const out: Member[] = [];
  let p = 0;
  for (let i = 0; i < count; i++) {
    if (p + 46 > cd.length || cd.readUInt32LE(p) !== 0x02014b50) throw new SafekeepError(`${file}: bad zip central directory entry ${i}`);
    const method = cd.readUInt16LE(p + 10);
    let compressed = cd.readUInt32LE(p + 20);
    let usize = cd.readUInt32LE(p + 24);
    const nameLen = cd.readUInt16LE(p + 28);
    const extraLen = cd.readUInt16LE(p + 30);
    const commentLen = cd.readUInt16LE(p + 32);
    let localOffset = cd.readUInt32LE(p + 42);
    const name = cd.toString('utf8', p + 46, p + 46 + nameLen);
    // zip64 extra (id 1): the 64-bit values of those fields that read 0xffffffff, in this order
    for (let e = p + 46 + nameLen; e + 4 <= p + 46 + nameLen + extraLen;) {
      const id = cd.readUInt16LE(e);
      const len = cd.readUInt16LE(e + 2);
      if (id === 1) {
        let q = e + 4;
        if (usize === 0xffffffff) { usize = Number(cd.readBigUInt64LE(q)); q += 8; }
        if (compressed === 0xffffffff) { compressed = Number(cd.readBigUInt64LE(q)); q += 8; }
        if (localOffset === 0xffffffff) localOffset = Number(cd.readBigUInt64LE(q));
      }
      e += 4 + len;
    }
    out.push({ name, method, compressed, size: usize, localOffset });
    p += 46 + nameLen + extraLen + commentLen;
  }
  return out;
}

/** The npy header of `head` (the member's first bytes): dtype, shape and where the data starts. */
export function parseNpyHeader(head: Uint8Array, what: string): { dtype: NpyDtype; shape: number[]; dataStart: number } {
  const b = Buffer.from(head.buffer, head.byteOffset, head.byteLength);
  if (b.length < 10 || b[0] !== 0x93 || b.toString('latin1', 1, 6) !== 'NUMPY') throw new SafekeepError(`${what}: not a .npy array`);
  const major = b[6]!;
  const headerLen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  if (start + headerLen > b.length) throw new SafekeepError(`${what}: .npy header longer than its member`);
  const text = b.toString('latin1', start, start + headerLen);
  const descr = /'descr':\s*'([^']*)'/.exec(text)?.[1];
  const fortran = /'fortran_order':\s*(True|False)/.exec(text)?.[1];
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(text)?.[1];
  if (descr === undefined || fortran === undefined || shapeText === undefined) throw new SafekeepError(`${what}: unreadable .npy header ${JSON.stringify(text.slice(0, 120))}`);
  const dtype = ({ '<f4': 'F32', '<f2': 'F16', '<f8': 'F64' } as const)[descr as '<f4'];
  if (!dtype) throw new SafekeepError(`${what}: dtype '${descr}' is not read (little-endian float32 / float16 / float64 only; never a pickled object array)`);
  if (fortran === 'True') throw new SafekeepError(`${what}: fortran_order True is not read (save it C-ordered: np.ascontiguousarray)`);
  const shape = shapeText.split(',').map((s) => s.trim()).filter((s) => s.length > 0).map(Number);
  if (shape.some((n) => !Number.isSafeInteger(n) || n < 0)) throw new SafekeepError(`${what}: bad shape (${shapeText})`);
  return { dtype, shape, dataStart: start + headerLen };
}

const ITEM = { F32: 4, F16: 2, F64: 8 } as const;

/** Every `.npy` member of the archive at `file`. Data is read when `bytes()` is called. */
export function readNpz(file: string): NpyArray[] {
  const fd = openRegularFile(file);
  try {
    const size = fstatSync(fd).size;
    return centralDirectory(fd, file, size).filter((m) => m.name.endsWith('.npy')).map((m) => {
      const what = `${file}: ${m.name}`;
      if (m.method !== 0 && m.method !== 8) throw new SafekeepError(`${what}: zip method ${m.method} is not read (stored or deflate only)`);
      const local = readAt(fd, m.localOffset, 30, file);
      if (local.readUInt32LE(0) !== 0x04034b50) throw new SafekeepError(`${what}: bad local zip header`);
      const dataAt = m.localOffset + 30 + local.readUInt16LE(26) + local.readUInt16LE(28);
      if (dataAt + m.compressed > size) throw new SafekeepError(`${what}: member runs past the end of the archive (truncated?)`);
      // the member's bytes: in place when stored, inflated (once, on first use) when deflated
      let inflated: Buffer | null = null;
      const member = (pos: number, len: number): Uint8Array => {
        if (m.method === 0) {
          const f = openRegularFile(file);
          try { return readAt(f, dataAt + pos, len, file); } finally { closeSync(f); }
        }
        if (!inflated) {
          const f = openRegularFile(file);
          try { inflated = inflateRawSync(readAt(f, dataAt, m.compressed, file)); } finally { closeSync(f); }
        }
        if (pos + len > inflated.length) throw new SafekeepError(`${what}: member shorter than its header says`);
        return inflated.subarray(pos, pos + len);
      };
      const headLen = Math.min(m.size, 4096);
      const header = parseNpyHeader(m.method === 0 ? readAt(fd, dataAt, headLen, file) : member(0, headLen), what);
      const count = header.shape.reduce((a, n) => a * n, 1);
      const byteLength = count * ITEM[header.dtype];
      if (header.dataStart + byteLength !== m.size) throw new SafekeepError(`${what}: shape [${header.shape}] needs ${byteLength} bytes, the member holds ${m.size - header.dataStart}`);
      return {
        name: m.name.slice(0, -4), dtype: header.dtype, shape: header.shape,
        bytes: () => {
          const src = member(header.dataStart, byteLength);
          // an aligned copy: typed-array views need an offset that is a multiple of the item size
          const out = new Uint8Array(byteLength);
          out.set(src);
          return out;
        },
      };
    });
  } finally {
    closeSync(fd);
  }
}
