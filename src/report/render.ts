/**
 * vega-lite spec → vega → SVG (headless vega View) → PNG (resvg, with the shipped DejaVu Sans as the only font).
 * vega is imported when the first figure is drawn, not with the package: its vega-canvas module has a top-level
 * await, which would keep `require('safekeep')` (CommonJS callers, e.g. the notebooks' Jupyter kernel) from loading
 * the package at all, and every CLI command from starting without loading vega.
 */
import { Resvg } from '@resvg/resvg-js';
import type { TopLevelSpec } from 'vega-lite';
import { FONT_FAMILY, fontFiles } from './font.ts';
import { installTextMetrics } from './text-metrics.ts';

export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const [vega, { compile }] = await Promise.all([import('vega'), import('vega-lite')]);
  installTextMetrics(vega);
  const vg = compile(spec).spec;
  const view = new vega.View(vega.parse(vg), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** PNG at `scale`× the SVG size (2 = crisp on high-DPI screens and in print). */
export function svgToPng(svg: string, scale = 2): Uint8Array {
  const r = new Resvg(svg, {
    fitTo: { mode: 'zoom', value: scale },
    background: 'white',
    font: { fontFiles: fontFiles(), loadSystemFonts: false, defaultFontFamily: FONT_FAMILY, sansSerifFamily: FONT_FAMILY },
  });
  return r.render().asPng();
}
