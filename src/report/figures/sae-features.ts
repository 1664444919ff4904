/**
 * The features of a direction as a figure: the leading SAE features by decoder-row cosine with the direction (bars),
 * and, when attribution was computed, each one's attribution beside it (harmful − benign mean activation × decoder
 * projection). One panel, best first.
 */
import type { TopLevelSpec } from 'vega-lite';
import { CONFIG, COLORS } from '../theme.ts';
import type { Figure } from './spec.ts';

export interface FeatureBar {
  index: number;
  cosine: number;
  attribution?: number;
}

export function saeFeaturesFigure(direction: string, hook: string, features: readonly FeatureBar[]): Figure {
  const withAttribution = features.some((f) => f.attribution !== undefined);
  const values = features.flatMap((f, order) => [
    { feature: `#${f.index}`, order, measure: 'decoder-row cosine', value: f.cosine },
    ...(f.attribution !== undefined ? [{ feature: `#${f.index}`, order, measure: 'attribution', value: f.attribution }] : []),
  ]);
  const spec: TopLevelSpec = {
    config: CONFIG,
    width: 520,
    height: 240,
    title: { text: `SAE features of ${direction}`, subtitle: `at ${hook}, best first` },
    data: { values },
    mark: 'bar',
    encoding: {
      x: { field: 'feature', type: 'nominal', sort: { field: 'order' }, title: 'SAE feature' },
      xOffset: { field: 'measure' },
      y: { field: 'value', type: 'quantitative', title: withAttribution ? 'cosine / attribution' : 'cosine with the direction' },
      color: { field: 'measure', type: 'nominal', title: null, scale: { range: [COLORS.palette[0], COLORS.palette[1]] } },
    },
  };
  return {
    name: 'sae-features',
    title: `SAE features of ${direction}`,
    caption: `The leading features of ${direction} at ${hook}: the cosine of each decoder row with the direction${withAttribution ? ', and its attribution over the cached activations (harmful − benign mean activation × decoder projection)' : ''}.`,
    spec,
  };
}
