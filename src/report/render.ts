/** vega-lite spec → vega → SVG (headless vega View) → PNG (resvg, with the shipped DejaVu Sans as the only font). */
import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import { type TopLevelSpec, compile } from 'vega-lite';
import { FONT_FAMILY, fontFiles } from './font.ts';
import { installTextMetrics } from './text-metrics.ts';

export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  installTextMetrics();
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
