/**
 * The SAE features of the refusal and Schema Directions in each condition of Figures 3–4 (`reproduce --sae DIR`):
 * a grid, one row per direction and one column per condition; in each cell the top features by decoder-row cosine
 * (bars, best first) and beside each its attribution in that condition ((harmful − benign mean activation) ×
 * decoder projection). The cosine is the dictionary's (the same in every column); the attribution is the condition's.
 */
import type { TopLevelSpec } from 'vega-lite';
import type { AnalysisResults } from '../../analysis/results.ts';
import { CONFIG, COLORS } from '../theme.ts';
import type { Figure } from './spec.ts';

const COSINE = 'decoder-row cosine';
const ATTRIBUTION = 'attribution in the condition';

export function saeDirectionFeaturesFigure(res: AnalysisResults): Figure | null {
  const s = res.saeFeatures;
  if (!s || !s.panels.length) return null;
  // 'Figure 3 | agent, JSON schema (last prompt token)': the column header breaks at '|'
  const condLabel = new Map(s.conditions.map((c) => [c.name, `${c.figure}|${c.label}`]));
  const dirLabel = new Map(s.directions.map((d) => [d.name, d.label]));
  const values = s.panels.flatMap((p) => p.byCosine.flatMap((f, order) => [COSINE, ATTRIBUTION].map((measure) => ({
    condition: condLabel.get(p.condition) ?? p.condition,
    direction: dirLabel.get(p.direction) ?? p.direction,
    feature: `#${f.index}`,
    order,
    measure,
    value: measure === COSINE ? f.cosine : f.attribution,
    top: f.top.map((t) => `${t.key} (${t.activation.toFixed(3)})`).join('; ') || '(inactive on every prompt)',
  }))));
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: `SAE features of the refusal and Schema Directions — ${res.model}`,
      subtitle: `${s.hook} (hidden[${s.hiddenRow}]; ℓ* = ${res.lStar.layer}), ${s.dSae} features; top ${s.top} by decoder-row cosine, best first`,
    },
    config: CONFIG,
    data: { values },
    facet: {
      row: { field: 'direction', type: 'nominal', title: null, sort: s.directions.map((d) => d.label), header: { labelFontSize: 12 } },
      column: {
        field: 'condition', type: 'nominal', title: null, sort: s.conditions.map((c) => condLabel.get(c.name)!),
        header: { labelExpr: "split(replace(datum.value, ' (', '|('), '|')", labelFontSize: 12, labelLimit: 200 },
      },
    },
    spec: {
      width: 190,
      height: 120,
      mark: 'bar',
      encoding: {
        x: { field: 'feature', type: 'nominal', sort: { field: 'order' }, title: 'SAE feature', axis: { labelAngle: 0 } },
        xOffset: { field: 'measure', sort: [COSINE, ATTRIBUTION] },
        y: { field: 'value', type: 'quantitative', title: null },
        color: { field: 'measure', type: 'nominal', title: null, scale: { domain: [COSINE, ATTRIBUTION], range: [COLORS.palette[0], COLORS.palette[1]] } },
        tooltip: [
          { field: 'feature', title: 'feature' },
          { field: 'measure', title: 'measure' },
          { field: 'value', title: 'value', format: '.4f' },
          { field: 'top', title: 'most active on' },
        ],
      },
    },
    resolve: { scale: { x: 'independent', xOffset: 'independent', y: 'independent' } },
  } as TopLevelSpec;
  return {
    name: 'sae-direction-features',
    title: 'SAE features of the refusal and Schema Directions (Figures 3–4 conditions)',
    caption: `Rows: directions at hidden[${s.hiddenRow}]; columns: the caches Figures 3–4 read (last prompt token, first generated token; tools as JSON schemas or flattened prose). Bars: each leading feature's decoder-row cosine with the direction and its attribution in that condition; hover for the prompts it is most active on. The table in the SAE section lists them.`,
    spec,
  };
}
