/** Table 3 as a figure: share of refusals, valid harmful tool calls and invalid outputs per steering strength α. */
import type { TopLevelSpec } from 'vega-lite';
import type { AnalysisResults, SteeringResults } from '../../analysis/results.ts';
import { wilsonInterval } from '../../analysis/stats.ts';
import { CONFIG, COLORS } from '../theme.ts';
import { steeringConditionLabel } from '../steering-label.ts';
import type { Figure } from './spec.ts';

const OUTCOMES = [
  ['refusal', 'Refusal'],
  ['valid', 'Valid harmful tool call'],
  ['invalid', 'Invalid output'],
] as const;

export function steeringBarsFigure(res: AnalysisResults, s: SteeringResults, index: number): Figure {
  const values = s.rows.flatMap((r) =>
    OUTCOMES.map(([k, label], order) => {
      const iv = wilsonInterval(r.counts[k], r.n);
      return {
        alpha: steeringConditionLabel(r),
        outcome: label,
        order,
        count: r.counts[k],
        n: r.n,
        percent: r.n ? (100 * r.counts[k]) / r.n : 0,
        lo: 100 * iv.lo,
        hi: 100 * iv.hi,
      };
    }),
  );
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: `Steering outcomes vs α — ${res.model}`,
      subtitle: `${s.requests} requests; hidden[${s.layer}] −= α · unit ${s.direction}, ${s.positions === 'generated' ? 'at generated tokens only' : 'at every prompt position and generated token'}`,
    },
    width: { step: 100 },
    height: 280,
    config: CONFIG,
    data: { values },
    mark: { type: 'bar' },
    encoding: {
      x: {
        field: 'alpha', type: 'ordinal', sort: null, axis: { labelAngle: 0 },
        title: ['Steering strength α (residual units)', `in brackets: α / mean ‖hidden[ℓ]‖${s.rows.some((r) => r.condition !== undefined) ? '; intervene: an --intervene file' : ''}`],
      },
      y: { field: 'percent', type: 'quantitative', stack: 'zero', title: 'Share of generations (%)', scale: { domain: [0, 100] } },
      color: {
        field: 'outcome',
        type: 'nominal',
        title: 'Outcome',
        scale: { domain: OUTCOMES.map((o) => o[1]), range: [COLORS.refusal, COLORS.valid, COLORS.invalid] },
      },
      order: { field: 'order', type: 'quantitative' },
      tooltip: [
        { field: 'alpha', title: 'α' },
        { field: 'outcome', title: 'outcome' },
        { field: 'count', title: 'count' },
        { field: 'n', title: 'n' },
        { field: 'percent', title: '%', format: '.1f' },
        { field: 'lo', title: '95% CI low (%)', format: '.1f' },
        { field: 'hi', title: '95% CI high (%)', format: '.1f' },
      ],
    },
  } as TopLevelSpec;
  return {
    name: index === 0 ? 'steering-outcomes' : `steering-outcomes-${index}`,
    // the direction's name carries its own parenthesis (the requests it was computed from): the steered ones lead
    title: `Table 3 — ${s.requests} requests steered against the ${s.direction}`,
    caption: 'Stacked shares of refusals, valid harmful tool calls and invalid outputs for each steering strength; hover for counts and 95% Wilson intervals.',
    spec,
  };
}
