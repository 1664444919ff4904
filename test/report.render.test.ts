import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { Resvg } from '@resvg/resvg-js';
import { FONT_FAMILY, fontFiles } from '../src/report/font.ts';
import { renderSvg, svgToPng } from '../src/report/render.ts';
import { parseTtfMetrics, textWidth } from '../src/report/text-metrics.ts';
import { countColor, countInk, decodePng } from './helpers/png.ts';

const textSvg = (family: string) =>
  `<svg xmlns="http://www.w3.org/2000/svg" width="300" height="60"><text x="10" y="40" font-family="${family}" font-size="30">Layer ℓ*</text></svg>`;

test('text renders with the shipped font only (no system fonts), even for an unknown family', () => {
  for (const family of [FONT_FAMILY, 'No Such Font']) {
    const img = decodePng(svgToPng(textSvg(family), 1));
    assert.equal(img.width, 300);
    assert.equal(img.height, 60);
    assert.ok(countInk(img) > 300, `${family}: ${countInk(img)} inked pixels`);
  }
});

test('text widths from the TTF advance table match the glyph ink resvg draws', () => {
  const m = parseTtfMetrics(readFileSync(fontFiles()[0]!));
  assert.ok(textWidth(m, 'i', 10) < textWidth(m, 'W', 10));
  for (const s of ['MMMMMMMMMM', 'Cosine with the chatbot refusal direction']) {
    const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="4000" height="200"><text x="0" y="150" font-family="${FONT_FAMILY}" font-size="100">${s}</text></svg>`;
    const bbox = new Resvg(svg, { font: { fontFiles: fontFiles(), loadSystemFonts: false, defaultFontFamily: FONT_FAMILY } }).innerBBox()!;
    const predicted = textWidth(m, s, 100);
    // ink width = advance sum minus the side bearings of the first and last glyph (a few % of one glyph)
    assert.ok(Math.abs(bbox.width - predicted) < 0.04 * predicted, `${s}: ink ${bbox.width} vs advance ${predicted}`);
  }
});

test('a vega-lite spec renders to SVG with its axis titles and to a PNG twice its size', async () => {
  const svg = await renderSvg({
    data: { values: [{ layer: 0, v: 0.2 }, { layer: 1, v: 0.9 }] },
    mark: { type: 'line', color: '#c0392b', strokeWidth: 4 },
    width: 200,
    height: 100,
    encoding: { x: { field: 'layer', type: 'quantitative', title: 'Layer title' }, y: { field: 'v', type: 'quantitative', title: 'Value title' } },
    config: { font: FONT_FAMILY, background: 'white' },
  });
  assert.match(svg, /^<svg/);
  assert.ok(svg.includes('Layer title') && svg.includes('Value title'));
  const w = Number(/width="(\d+)"/.exec(svg)![1]);
  const img = decodePng(svgToPng(svg));
  assert.equal(img.width, 2 * w);
  assert.ok(countColor(img, '#c0392b') > 200, 'the red line is drawn');
});
