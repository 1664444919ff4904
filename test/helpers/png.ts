/** A minimal, independent PNG decoder for tests (8-bit RGB/RGBA, non-interlaced): chunks → inflate → unfilter. */
import { inflateSync } from 'node:zlib';

export interface Decoded {
  width: number;
  height: number;
  /** [height, width, 4] RGBA */
  rgba: Uint8Array;
}

export function decodePng(buf: Uint8Array): Decoded {
  const sig = [137, 80, 78, 71, 13, 10, 26, 10];
  sig.forEach((b, i) => {
    if (buf[i] !== b) throw new Error('not a PNG signature');
  });
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let off = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Uint8Array[] = [];
  let ended = false;
  while (off < buf.length) {
    const len = dv.getUint32(off);
    const type = String.fromCharCode(...buf.subarray(off + 4, off + 8));
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') {
      width = dv.getUint32(off + 8);
      height = dv.getUint32(off + 12);
      const depth = data[8];
      const colorType = data[9];
      if (depth !== 8 || data[12] !== 0) throw new Error(`unsupported PNG depth ${depth} / interlace ${data[12]}`);
      channels = colorType === 6 ? 4 : colorType === 2 ? 3 : 0;
      if (!channels) throw new Error(`unsupported PNG colour type ${colorType}`);
    } else if (type === 'IDAT') idat.push(data);
    else if (type === 'IEND') {
      ended = true;
      break;
    }
    off += 12 + len;
  }
  if (!ended) throw new Error('PNG has no IEND');
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  if (raw.length !== height * (stride + 1)) throw new Error(`PNG data ${raw.length} bytes, expected ${height * (stride + 1)}`);
  const px = new Uint8Array(height * stride);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)]!;
    for (let x = 0; x < stride; x++) {
      const v = raw[y * (stride + 1) + 1 + x]!;
      const a = x >= channels ? px[y * stride + x - channels]! : 0;
      const b = y > 0 ? px[(y - 1) * stride + x]! : 0;
      const c = x >= channels && y > 0 ? px[(y - 1) * stride + x - channels]! : 0;
      let pred = 0;
      if (f === 1) pred = a;
      else if (f === 2) pred = b;
      else if (f === 3) pred = (a + b) >> 1;
      else if (f === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a);
        const pb = Math.abs(p - b);
        const pc = Math.abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      } else if (f !== 0) throw new Error(`bad PNG filter ${f}`);
      px[y * stride + x] = (v + pred) & 0xff;
    }
  }
  const rgba = new Uint8Array(width * height * 4);
  for (let i = 0; i < width * height; i++) {
    for (let k = 0; k < 3; k++) rgba[4 * i + k] = px[i * channels + k]!;
    rgba[4 * i + 3] = channels === 4 ? px[i * channels + 3]! : 255;
  }
  return { width, height, rgba };
}

/** Pixels within `tol` of the colour `#rrggbb`. */
export function countColor(img: Decoded, hex: string, tol = 8): number {
  const r = parseInt(hex.slice(1, 3), 16);
  const g = parseInt(hex.slice(3, 5), 16);
  const b = parseInt(hex.slice(5, 7), 16);
  let n = 0;
  for (let i = 0; i < img.width * img.height; i++) {
    const p = 4 * i;
    if (Math.abs(img.rgba[p]! - r) <= tol && Math.abs(img.rgba[p + 1]! - g) <= tol && Math.abs(img.rgba[p + 2]! - b) <= tol) n++;
  }
  return n;
}

/** Pixels that are not (near) white. */
export function countInk(img: Decoded): number {
  let n = 0;
  for (let i = 0; i < img.width * img.height; i++) {
    const p = 4 * i;
    if (img.rgba[p]! < 200 || img.rgba[p + 1]! < 200 || img.rgba[p + 2]! < 200) n++;
  }
  return n;
}
