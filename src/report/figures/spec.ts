/** What every figure builder returns: a named vega-lite spec with the shared theme applied. */
import type { TopLevelSpec } from 'vega-lite';

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
