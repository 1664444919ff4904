/** Table 1 / Table 2 at ℓ* as grouped bars (chatbot direction vs own direction) with 95 % CI error bars. */
import type { AnalysisResults, TableRow } from '../../analysis/results.ts';
import { COLORS } from '../theme.ts';
import { groupedBarsSpec, type Figure } from './spec.ts';

const CROSS = 'Chatbot refusal direction (cross-format)';
const OWN = 'Own direction (within-format)';

export function tableBarsFigure(res: AnalysisResults, which: 'table1' | 'table2'): Figure | null {
  const rows: TableRow[] = res[which];
  if (rows.length === 0) return null;
  const values = rows.flatMap((r) => [
    { configuration: r.label, direction: CROSS, ...r.cross },
    { configuration: r.label, direction: OWN, ...r.within },
  ]);
  const x = { field: 'configuration', type: 'nominal', sort: rows.map((r) => r.label), title: null, axis: { labelAngle: -20, labelLimit: 200 } } as const;
  const xOffset = { field: 'direction', type: 'nominal', sort: [CROSS, OWN] } as const;
  const title = which === 'table1' ? 'Table 1 — where refusal separability is lost' : 'Table 2 — schema vs flattened vs pseudoword tools';
  const spec = groupedBarsSpec({
    title: `${title} — ${res.model}`,
    subtitle: `AUROC at ℓ* = ${res.lStar.layer}; error bars: 95% paired bootstrap interval`,
    step: 48,
    height: 280,
    values,
    x,
    xOffset,
    y: { field: 'auroc', type: 'quantitative', title: 'AUROC at ℓ* (harmful = positive)', scale: { domain: [0, 1] } },
    color: { field: 'direction', type: 'nominal', title: 'Direction that scores the configuration', scale: { domain: [CROSS, OWN], range: [COLORS.palette[0], COLORS.palette[1]] } },
    tooltip: [
      { field: 'configuration', title: 'configuration' },
      { field: 'direction', title: 'direction' },
      { field: 'auroc', title: 'AUROC', format: '.3f' },
      { field: 'lo', title: '95% CI low', format: '.3f' },
      { field: 'hi', title: '95% CI high', format: '.3f' },
      { field: 'n', title: 'n' },
    ],
  });
  return {
    name: `${which}-bars`,
    title,
    caption: 'AUROC at ℓ* for each configuration, scored by the fixed chatbot direction and by the configuration’s own direction.',
    spec,
  };
}
