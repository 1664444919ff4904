/** Figure 4: per layer, mean ± sd of the first generated token's projection on the unit chatbot refusal direction. */
import type { TopLevelSpec } from 'vega-lite';
import type { AnalysisResults } from '../../analysis/results.ts';
import { CONFIG, COLORS } from '../theme.ts';
import { type Figure, LAYER_X, lStarRule } from './spec.ts';

const CAT = { harmful: 'Harmful request', benign: 'Benign request' } as const;
const REP = { schema: 'Tools as JSON schemas', flattened: 'Tools as flattened prose' } as const;

export function firstTokenFigure(res: AnalysisResults): Figure | null {
  if (!res.firstToken?.length) return null;
  const values = res.firstToken.flatMap((s) =>
    s.mean.map((m, layer) => ({
      layer,
      category: CAT[s.category],
      representation: REP[s.representation],
      condition: `${CAT[s.category]} · ${REP[s.representation]}`,
      mean: m,
      lo: m - s.sd[layer]!,
      hi: m + s.sd[layer]!,
      sd: s.sd[layer]!,
      n: s.n,
    })),
  );
  const color = {
    field: 'category',
    type: 'nominal',
    title: 'Request',
    scale: { domain: [CAT.harmful, CAT.benign], range: [COLORS.harmful, COLORS.benign] },
  } as const;
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: `First generated token: projection on the refusal direction — ${res.model}`,
      subtitle: 'Lines: mean over requests; shaded: ± 1 sd. Dashed vertical line: ℓ*.',
    },
    width: 560,
    height: 300,
    config: CONFIG,
    data: { values },
    layer: [
      {
        mark: { type: 'area', opacity: 0.12 },
        encoding: {
          x: LAYER_X,
          y: { field: 'lo', type: 'quantitative', title: 'Projection h · r̂(ℓ) (residual units)' },
          y2: { field: 'hi' },
          color,
          detail: { field: 'condition' },
        },
      },
      {
        mark: { type: 'line', point: true, strokeWidth: 2 },
        encoding: {
          x: { field: 'layer', type: 'quantitative' },
          y: { field: 'mean', type: 'quantitative' },
          color,
          strokeDash: {
            field: 'representation',
            type: 'nominal',
            title: 'Tool specification',
            scale: { domain: [REP.schema, REP.flattened], range: [[1, 0], [6, 3]] },
            legend: {
              symbolType: 'stroke',
              symbolSize: 400,
              // the line layer also draws points; force a dashed/solid stroke swatch in this legend
              encode: { symbols: { update: { fill: { value: 'transparent' }, stroke: { value: '#333' }, strokeOpacity: { value: 1 }, strokeWidth: { value: 2 } } } },
            },
          },
          detail: { field: 'condition' },
          tooltip: [
            { field: 'condition', title: 'condition' },
            { field: 'layer', title: 'layer' },
            { field: 'mean', title: 'mean', format: '.3f' },
            { field: 'sd', title: 'sd', format: '.3f' },
            { field: 'n', title: 'n' },
          ],
        },
      },
      lStarRule(res.lStar.layer),
    ],
  } as TopLevelSpec;
  return {
    name: 'figure4-first-token',
    title: 'Figure 4 — first-token projections',
    caption:
      'Projection of the first generated token’s residual stream on the unit chatbot refusal direction, for harmful and benign requests with tools as JSON schemas or as flattened prose.',
    spec,
  };
}
