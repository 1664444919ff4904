/**
 * The figure font: DejaVu Sans from the `dejavu-fonts-ttf` npm package, so PNGs render identically on a fresh
 * machine with no system fonts. Set as the default font both in the vega-lite config and in resvg.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { SafekeepError } from '../util/errors.ts';

export const FONT_FAMILY = 'DejaVu Sans';

const require = createRequire(import.meta.url);

/** Absolute paths of the TTF files resvg loads (regular, bold, oblique). */
export function fontFiles(): string[] {
  const names = ['DejaVuSans.ttf', 'DejaVuSans-Bold.ttf', 'DejaVuSans-Oblique.ttf'];
  const files: string[] = [];
  for (const n of names) {
    let p: string;
    try {
      p = require.resolve(`dejavu-fonts-ttf/ttf/${n}`);
    } catch {
      throw new SafekeepError(`figure font ${n} not found: the npm package 'dejavu-fonts-ttf' is missing (run npm ci)`);
    }
    if (!existsSync(p)) throw new SafekeepError(`figure font missing: ${p}`);
    files.push(p);
  }
  return files;
}
