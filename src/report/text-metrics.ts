/**
 * Text widths for vega's headless layout, from the advance widths of the same DejaVu Sans TTF files resvg draws
 * with. Without a canvas, vega estimates every glyph at 0.8 em, which truncates legends and pads layouts; with
 * these metrics the SVG/PNG layout matches the glyphs actually drawn (kerning aside).
 */
import { readFileSync } from 'node:fs';
import { SafekeepError } from '../util/errors.ts';
import { fontFiles } from './font.ts';

/** Advance widths in em for the BMP code points a TrueType font maps (cmap format 4 + hmtx). */
interface FontMetrics {
  /** advance width of code point c in em */
  advance(c: number): number;
}

export function parseTtfMetrics(buf: Uint8Array, file = 'font'): FontMetrics {
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const numTables = dv.getUint16(4);
  const tables = new Map<string, number>();
  for (let i = 0; i < numTables; i++) {
    const rec = 12 + 16 * i;
    const tag = String.fromCharCode(buf[rec]!, buf[rec + 1]!, buf[rec + 2]!, buf[rec + 3]!);
    tables.set(tag, dv.getUint32(rec + 8));
  }
  const need = (t: string): number => {
    const o = tables.get(t);
    if (o === undefined) throw new SafekeepError(`${file}: TrueType table '${t}' missing`);
    return o;
  };
  const unitsPerEm = dv.getUint16(need('head') + 18);
  const nHMetrics = dv.getUint16(need('hhea') + 34);
  const hmtx = need('hmtx');
  const glyphAdvance = (g: number): number => dv.getUint16(hmtx + 4 * Math.min(g, nHMetrics - 1));
  const cmap = need('cmap');
  let sub = -1;
  for (let i = 0; i < dv.getUint16(cmap + 2); i++) {
    const rec = cmap + 4 + 8 * i;
    const platform = dv.getUint16(rec);
    const encoding = dv.getUint16(rec + 2);
    const off = cmap + dv.getUint32(rec + 4);
    if (dv.getUint16(off) === 4 && ((platform === 3 && encoding === 1) || platform === 0)) {
      sub = off;
      break;
    }
  }
  if (sub < 0) throw new SafekeepError(`${file}: no Unicode BMP (format 4) cmap`);
  const segCount = dv.getUint16(sub + 6) / 2;
  const endCodes = sub + 14;
  const startCodes = endCodes + 2 * segCount + 2;
  const idDeltas = startCodes + 2 * segCount;
  const idRangeOffsets = idDeltas + 2 * segCount;
  const glyph = (c: number): number => {
    for (let s = 0; s < segCount; s++) {
      if (dv.getUint16(endCodes + 2 * s) < c) continue;
      const start = dv.getUint16(startCodes + 2 * s);
      if (start > c) return 0;
      const delta = dv.getUint16(idDeltas + 2 * s);
      const ro = dv.getUint16(idRangeOffsets + 2 * s);
      if (ro === 0) return (c + delta) & 0xffff;
      const g = dv.getUint16(idRangeOffsets + 2 * s + ro + 2 * (c - start));
      return g === 0 ? 0 : (g + delta) & 0xffff;
    }
    return 0;
  };
  const cache = new Map<number, number>();
  return {
    advance(c: number): number {
      let a = cache.get(c);
      if (a === undefined) {
        a = glyphAdvance(c > 0xffff ? 0 : glyph(c)) / unitsPerEm;
        cache.set(c, a);
      }
      return a;
    },
  };
}

/** Width in px of `text` at `size` px. */
export function textWidth(m: FontMetrics, text: string, size: number): number {
  let w = 0;
  for (const ch of text) w += m.advance(ch.codePointAt(0)!);
  return w * size;
}

interface TextItem {
  text?: unknown;
  fontSize?: number | string;
  fontWeight?: string | number;
  limit?: number;
}

let installed = false;

/** Makes vega (the module, imported by the caller when a figure is drawn) measure text with DejaVu Sans metrics (idempotent). */
export function installTextMetrics(vega: unknown): void {
  if (installed) return;
  const [regularFile, boldFile] = fontFiles();
  const regular = parseTtfMetrics(readFileSync(regularFile!), regularFile);
  const bold = parseTtfMetrics(readFileSync(boldFile!), boldFile);
  const tm = (vega as unknown as { textMetrics: { width: (item: TextItem, text?: unknown) => number } }).textMetrics;
  tm.width = (item: TextItem, text?: unknown): number => {
    const s = String(text ?? '').trim();
    const size = item.fontSize != null ? +item.fontSize || 0 : 11;
    const w = item.fontWeight === 'bold' || +(item.fontWeight ?? 400) >= 600 ? bold : regular;
    const width = textWidth(w, s, size);
    // a label with a limit is drawn truncated to fit it
    return item.limit && item.limit > 0 ? Math.min(width, item.limit) : width;
  };
  installed = true;
}
