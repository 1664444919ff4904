/** One look for every figure: font, sizes, colours. Shared by the SVG/PNG renders and report.html. */
import type { Config } from 'vega-lite';
import { FONT_FAMILY } from './font.ts';

export const COLORS = {
  harmful: '#c0392b',
  benign: '#2471a3',
  random: '#7f8c8d',
  permutation: '#d4ac0d',
  refusal: '#c0392b',
  valid: '#7d3c98',
  invalid: '#95a5a6',
  palette: ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf'],
} as const;

export const CONFIG: Config = {
  font: FONT_FAMILY,
  background: 'white',
  view: { stroke: null },
  title: { fontSize: 15, anchor: 'start', subtitleFontSize: 12, subtitleColor: '#555' },
  axis: { labelFontSize: 12, titleFontSize: 13, grid: true, gridColor: '#eee' },
  legend: { labelFontSize: 12, titleFontSize: 12, labelLimit: 420, titleLimit: 420, symbolOpacity: 1, orient: 'bottom', direction: 'vertical' },
};
