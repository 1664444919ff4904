/**
 * A minimal zip writer (PKZIP APPNOTE 6.3): each entry deflated (method 8) with its CRC-32, a local header before
 * it, the central directory and its end record after them. No zip64: an archive or entry of 4 GiB or more, or more
 * than 65 535 entries, is refused. Enough for Inspect's `.eval` logs, which are zips of JSON files.
 */
import { deflateRawSync } from 'node:zlib';

export interface ZipEntry {
  /** path inside the archive ('/'-separated) */
  name: string;
  data: Uint8Array;
}

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** CRC-32 (IEEE 802.3, the zip and gzip checksum). */
export function crc32(data: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < data.length; i++) c = CRC_TABLE[(c ^ data[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

const LIMIT = 0xffffffff;

/** The archive's bytes; entries in the given order, timestamps 1980-01-01 (the format's zero: reproducible bytes). */
export function zipArchive(entries: readonly ZipEntry[]): Uint8Array {
  if (entries.length > 0xffff) throw new Error(`zip: ${entries.length} entries; at most 65535 without zip64`);
  const enc = new TextEncoder();
  const parts: Uint8Array[] = [];
  const central: Uint8Array[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = enc.encode(e.name);
    const body = deflateRawSync(e.data);
    if (e.data.length >= LIMIT || body.length >= LIMIT || offset >= LIMIT) throw new Error(`zip: ${e.name} is too large without zip64`);
    const crc = crc32(e.data);
    const local = new DataView(new ArrayBuffer(30));
    local.setUint32(0, 0x04034b50, true);
    local.setUint16(4, 20, true); // version needed: 2.0 (deflate)
    local.setUint16(6, 0x0800, true); // flags: names are UTF-8
    local.setUint16(8, 8, true); // deflate
    local.setUint16(10, 0, true); // time 00:00
    local.setUint16(12, (0 << 9) | (1 << 5) | 1, true); // date 1980-01-01
    local.setUint32(14, crc, true);
    local.setUint32(18, body.length, true);
    local.setUint32(22, e.data.length, true);
    local.setUint16(26, name.length, true);
    local.setUint16(28, 0, true);
    const cd = new DataView(new ArrayBuffer(46));
    cd.setUint32(0, 0x02014b50, true);
    cd.setUint16(4, 20, true); // made by: 2.0
    // version needed, flags, method, time, date, CRC, sizes, name and extra lengths: as in the local header
    for (let k = 4; k < 30; k++) cd.setUint8(k + 2, local.getUint8(k));
    // comment length (32), disk (34), internal (36) and external (38) attributes stay 0
    cd.setUint32(42, offset, true);
    parts.push(new Uint8Array(local.buffer), name, body);
    central.push(new Uint8Array(cd.buffer), name);
    offset += 30 + name.length + body.length;
  }
  const cdSize = central.reduce((a, p) => a + p.length, 0);
  if (offset + cdSize >= LIMIT) throw new Error('zip: the archive is too large without zip64');
  const end = new DataView(new ArrayBuffer(22));
  end.setUint32(0, 0x06054b50, true);
  end.setUint16(8, entries.length, true);
  end.setUint16(10, entries.length, true);
  end.setUint32(12, cdSize, true);
  end.setUint32(16, offset, true);
  const all = [...parts, ...central, new Uint8Array(end.buffer)];
  const out = new Uint8Array(all.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of all) { out.set(p, at); at += p.length; }
  return out;
}
