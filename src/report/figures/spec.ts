/** What every figure builder returns: a named vega-lite spec with the shared theme applied. */
import type { TopLevelSpec } from 'vega-lite';
import { CONFIG } from '../theme.ts';

export interface Figure {
  /** file stem, e.g. 'figure3-schema-cosine' */
  name: string;
  /** heading in report.html */
  title: string;
  /** one or two sentences under the figure in report.html */
  caption: string;
  spec: TopLevelSpec;
}

/** Layer axis shared by the layer-wise figures. */
export const LAYER_AXIS_TITLE = 'Layer ℓ (residual stream after decoder block ℓ; 0 = embeddings)';

/** x encoding of the layer-wise figures: integer ticks, no padding beyond the last layer. */
export const LAYER_X = {
  field: 'layer',
  type: 'quantitative',
  title: LAYER_AXIS_TITLE,
  axis: { tickMinStep: 1, format: 'd' },
  scale: { nice: false },
} as const;

/** The dashed vertical rule marking ℓ* on the layer-wise figures (a layer of a layered spec). */
export const L_STAR_RULE_MARK = { type: 'rule', strokeDash: [4, 4], color: '#333' } as const;

export function lStarRule(layer: number): { data: { values: { layer: number }[] }; mark: typeof L_STAR_RULE_MARK; encoding: { x: { field: 'layer'; type: 'quantitative' } } } {
  return { data: { values: [{ layer }] }, mark: L_STAR_RULE_MARK, encoding: { x: { field: 'layer', type: 'quantitative' } } };
}

/** A grouped bar chart with 95 % interval error bars (rows carry `lo` and `hi`): the figures' one bar-chart shape. */
export interface GroupedBars {
  title: string;
  subtitle: string;
  /** width of one bar group */
  step: number;
  height: number;
  values: readonly Record<string, unknown>[];
  /** the group axis and the offset within a group (vega-lite encodings) */
  x: Record<string, unknown>;
  xOffset: Record<string, unknown>;
  y: Record<string, unknown>;
  color: Record<string, unknown>;
  tooltip: readonly Record<string, unknown>[];
}

export function groupedBarsSpec(o: GroupedBars): TopLevelSpec {
  const { x, xOffset } = o;
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: { text: o.title, subtitle: o.subtitle },
    width: { step: o.step },
    height: o.height,
    config: CONFIG,
    data: { values: o.values },
    layer: [
      { mark: { type: 'bar' }, encoding: { x, xOffset, y: o.y, color: o.color, tooltip: o.tooltip } },
      { mark: { type: 'rule', color: '#222', strokeWidth: 1.5 }, encoding: { x, xOffset, y: { field: 'lo', type: 'quantitative' }, y2: { field: 'hi' } } },
    ],
  } as TopLevelSpec;
}
