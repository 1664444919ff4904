/**
 * The sweep by SAE feature beside the sweep by direction (`steer --sae DIR`): refusal rate against α, one line along
 * the direction R̂ and one along the unit decoder row of R̂'s top feature (same α, prompts and scoring), with 95 %
 * Wilson intervals; one panel per steered request kind.
 */
import type { TopLevelSpec } from 'vega-lite';
import type { AnalysisResults } from '../../analysis/results.ts';
import { wilsonInterval } from '../../analysis/stats.ts';
import { CONFIG, COLORS } from '../theme.ts';
import type { Figure } from './spec.ts';

export function steeringByFeatureFigure(res: AnalysisResults): Figure | null {
  const sweeps = res.steering ?? [];
  const featured = sweeps.filter((s) => s.feature);
  if (!featured.length) return null;
  const f = featured[0]!.feature!;
  const BY_DIRECTION = 'along the direction R̂';
  const BY_FEATURE = `along SAE feature #${f.index}`;
  const values = sweeps.filter((s) => s.feature || featured.some((x) => x.requests === s.requests)).flatMap((s) =>
    s.rows.filter((r) => r.condition === undefined).map((r) => {
      const iv = wilsonInterval(r.counts.refusal, r.n);
      return {
        requests: `${s.requests} requests`, along: s.feature ? BY_FEATURE : BY_DIRECTION, alpha: r.alpha, alphaRelative: r.alphaRelative ?? null,
        percent: r.n ? (100 * r.counts.refusal) / r.n : 0, lo: 100 * iv.lo, hi: 100 * iv.hi, refusals: r.counts.refusal, n: r.n,
      };
    }));
  const color = { field: 'along', type: 'nominal', title: null, scale: { domain: [BY_DIRECTION, BY_FEATURE], range: [COLORS.palette[0], COLORS.palette[1]] } } as const;
  const x = { field: 'alpha', type: 'quantitative', title: 'α (residual units; unit vectors)' } as const;
  const y = { field: 'percent', type: 'quantitative', title: 'Refusal (%)', scale: { domain: [0, 100] } } as const;
  const tooltip = [
    { field: 'along', title: 'along' }, { field: 'alpha', title: 'α' }, { field: 'alphaRelative', title: 'α / mean ‖h‖', format: '.3f' },
    { field: 'refusals', title: 'refusals' }, { field: 'n', title: 'n' }, { field: 'percent', title: '%', format: '.1f' },
    { field: 'lo', title: '95% CI low (%)', format: '.1f' }, { field: 'hi', title: '95% CI high (%)', format: '.1f' },
  ];
  const line = (along: string, style: Record<string, unknown>) => ({
    transform: [{ filter: { field: 'along', equal: along } }],
    mark: { type: 'line', point: true, ...style },
    encoding: { x, y, color, tooltip },
  });
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: `Steering by direction and by SAE feature — ${res.model}`,
      subtitle: `hidden[${featured[0]!.layer}] −= α · unit vector; feature #${f.index} (${f.hook}) has cosine ${f.cosine.toFixed(4)} with the ${f.of}`,
    },
    config: CONFIG,
    data: { values },
    facet: { column: { field: 'requests', type: 'nominal', title: null, sort: 'descending' } },
    spec: {
      width: 300,
      height: 220,
      layer: [
        { mark: { type: 'rule', strokeWidth: 1.5 }, encoding: { x, y: { field: 'lo', type: 'quantitative' }, y2: { field: 'hi' }, color } },
        // equal curves lie on top of each other: the feature's wide and pale, the direction's dashed over it
        line(BY_FEATURE, { strokeWidth: 6, opacity: 0.5 }),
        line(BY_DIRECTION, { strokeWidth: 2, strokeDash: [6, 4] }),
      ],
    },
  } as TopLevelSpec;
  return {
    name: 'steering-by-feature',
    title: 'Steering by direction and by SAE feature (Table 3)',
    caption: `Refusal rate against α when hidden[ℓ*] −= α · R̂ (the sweep's direction) and when hidden[ℓ*] −= α · (unit decoder row of feature #${f.index}, its top feature by decoder cosine); the same prompts and scoring, 95% Wilson intervals. Equal curves: the feature carries the direction's effect.`,
    spec,
  };
}
