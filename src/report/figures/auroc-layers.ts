/** Per-layer AUROC of the refusal score for every configuration, with 95 % bootstrap bands and ℓ* marked. */
import type { TopLevelSpec } from 'vega-lite';
import type { AnalysisResults } from '../../analysis/results.ts';
import { CONFIG, COLORS } from '../theme.ts';
import { type Figure, LAYER_X, L_STAR_RULE_MARK } from './spec.ts';

export function aurocLayersFigure(res: AnalysisResults, direction: 'chatbot' | 'own'): Figure | null {
  const curves = res.curves.filter((c) => c.direction === direction);
  if (curves.length === 0) return null;
  const values = curves.flatMap((c) => c.perLayer.map((e, layer) => ({ layer, configuration: c.label, ...e })));
  // the curve that chose ℓ*: held-out AUROC of k-fold CV on the chatbot extraction split (never evaluation data)
  const cvLabel = 'Chatbot, extraction split: cross-validated AUROC (selects ℓ*)';
  const cv = direction === 'chatbot' ? res.lStar.cvAuroc.flatMap((a, layer) => (a === null ? [] : [{ layer, configuration: cvLabel, auroc: a }])) : [];
  const domain = [...curves.map((c) => c.label), ...(cv.length ? [cvLabel] : [])];
  const color = {
    field: 'configuration',
    type: 'nominal',
    title: 'Configuration (scored on its evaluation split)',
    scale: { domain, range: domain.map((d, i) => (d === cvLabel ? '#000000' : COLORS.palette[i % COLORS.palette.length]!)) },
  } as const;
  const what =
    direction === 'chatbot'
      ? 'one chatbot-derived refusal direction, fixed, scores every configuration (cross-format)'
      : "each configuration's own refusal direction (within-format)";
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: `AUROC of the refusal score by layer — ${res.model}`,
      subtitle: `${what}; shaded: 95% paired bootstrap interval (${res.bootstrap.reps} resamples of pairs)`,
    },
    width: 560,
    height: 300,
    config: CONFIG,
    layer: [
      {
        data: { values },
        mark: { type: 'area', opacity: 0.12 },
        encoding: {
          x: LAYER_X,
          y: { field: 'lo', type: 'quantitative', title: 'AUROC (harmful = positive class)', scale: { domain: [0, 1] } },
          y2: { field: 'hi' },
          color,
        },
      },
      {
        data: { values },
        mark: { type: 'line', point: { size: 20 }, strokeWidth: 2 },
        encoding: {
          x: { field: 'layer', type: 'quantitative' },
          y: { field: 'auroc', type: 'quantitative' },
          color,
          tooltip: [
            { field: 'configuration', title: 'configuration' },
            { field: 'layer', title: 'layer' },
            { field: 'auroc', title: 'AUROC', format: '.3f' },
            { field: 'lo', title: '95% CI low', format: '.3f' },
            { field: 'hi', title: '95% CI high', format: '.3f' },
            { field: 'n', title: 'n' },
          ],
        },
      },
      ...(cv.length
        ? [
            {
              data: { values: cv },
              mark: { type: 'line', strokeDash: [2, 3], strokeWidth: 2 },
              encoding: {
                x: { field: 'layer', type: 'quantitative' },
                y: { field: 'auroc', type: 'quantitative' },
                color,
                tooltip: [
                  { field: 'configuration', title: 'curve' },
                  { field: 'layer', title: 'layer' },
                  { field: 'auroc', title: 'mean held-out AUROC', format: '.3f' },
                ],
              },
            },
          ]
        : []),
      {
        data: { values: [{ y: 0.5 }] },
        mark: { type: 'rule', color: '#999', strokeDash: [2, 2] },
        encoding: { y: { field: 'y', type: 'quantitative' } },
      },
      {
        data: { values: [{ layer: res.lStar.layer, label: `ℓ* = ${res.lStar.layer}` }] },
        layer: [
          { mark: L_STAR_RULE_MARK, encoding: { x: { field: 'layer', type: 'quantitative' } } },
          {
            mark: { type: 'text', align: 'left', dx: 4, dy: 8, fontSize: 12 },
            encoding: { x: { field: 'layer', type: 'quantitative' }, y: { value: 0 }, text: { field: 'label' } },
          },
        ],
      },
    ],
  } as TopLevelSpec;
  return {
    name: `auroc-layers-${direction}-direction`,
    title: direction === 'chatbot' ? 'AUROC by layer — chatbot direction (cross-format)' : 'AUROC by layer — own direction (within-format)',
    caption: `AUROC of separating harmful from benign requests by the projection on ${direction === 'chatbot' ? 'the chatbot refusal direction' : 'each configuration’s own refusal direction'}, per layer. 0.5 = chance. ℓ* (${res.lStar.method}) is marked.`,
    spec,
  };
}
