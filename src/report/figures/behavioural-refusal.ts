/** §3.1 as a figure: refusal rate of generated answers to harmful requests, chatbot vs agent, with Wilson intervals. */
import type { TopLevelSpec } from 'vega-lite';
import type { AnalysisResults } from '../../analysis/results.ts';
import { CONFIG, COLORS } from '../theme.ts';
import type { Figure } from './spec.ts';

export function behaviouralRefusalFigure(res: AnalysisResults): Figure | null {
  const b = res.behavioural;
  if (!b?.rows.length) return null;
  const values = b.rows.map((r, order) => ({ label: r.label, order, percent: 100 * r.rate, lo: 100 * r.lo, hi: 100 * r.hi, refusals: r.refusals, n: r.n }));
  const x = { field: 'label', type: 'nominal', sort: null, title: 'Configuration', axis: { labelAngle: 0 } } as const;
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: { text: `Behavioural refusal, chatbot vs agent — ${res.model}`, subtitle: `${b.requests}; greedy, ≤ ${b.maxNewTokens} new tokens` },
    width: { step: 140 },
    height: 260,
    config: CONFIG,
    data: { values },
    layer: [
      {
        mark: { type: 'bar', color: COLORS.refusal },
        encoding: {
          x,
          y: { field: 'percent', type: 'quantitative', title: 'Refusal rate (%)', scale: { domain: [0, 100] } },
          tooltip: [
            { field: 'label', title: 'configuration' },
            { field: 'refusals', title: 'refusals' },
            { field: 'n', title: 'n' },
            { field: 'percent', title: '%', format: '.1f' },
            { field: 'lo', title: '95% CI low (%)', format: '.1f' },
            { field: 'hi', title: '95% CI high (%)', format: '.1f' },
          ],
        },
      },
      { mark: { type: 'rule', color: '#333' }, encoding: { x, y: { field: 'lo', type: 'quantitative' }, y2: { field: 'hi' } } },
    ],
  } as TopLevelSpec;
  return {
    name: 'behavioural-refusal',
    title: 'Behavioural refusal: the same harmful requests as a chatbot and as an agent (§3.1)',
    caption: 'Share of generated answers that refuse (refusal-substring classifier), with 95% Wilson intervals.',
    spec,
  };
}
