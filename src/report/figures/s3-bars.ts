/**
 * The S³ evaluation as grouped bars: per configuration, ASR (lower is better) and benign completion (higher is
 * better) in %, with 95 % Wilson intervals as error bars.
 */
import type { S3ConfigRow } from '../../analysis/results.ts';
import { COLORS } from '../theme.ts';
import { groupedBarsSpec, type Figure } from './spec.ts';

const ASR = 'Attack success (hazardous component carried out)';
const BENIGN = 'Benign completion';

export function s3BarsFigure(bench: string, model: string, summaries: readonly Pick<S3ConfigRow, 'config' | 'asr' | 'benign'>[]): Figure {
  const pct = (x: number) => (Number.isFinite(x) ? 100 * x : null);
  const values = summaries.flatMap((s) => [
    { configuration: s.config, metric: ASR, value: pct(s.asr.p), lo: pct(s.asr.lo), hi: pct(s.asr.hi), k: s.asr.k, n: s.asr.n },
    { configuration: s.config, metric: BENIGN, value: pct(s.benign.p), lo: pct(s.benign.lo), hi: pct(s.benign.hi), k: s.benign.k, n: s.benign.n },
  ]);
  const x = { field: 'configuration', type: 'nominal', sort: summaries.map((s) => s.config), title: 'Configuration', axis: { labelAngle: -20, labelLimit: 200 } } as const;
  const xOffset = { field: 'metric', type: 'nominal', sort: [ASR, BENIGN] } as const;
  const spec = groupedBarsSpec({
    title: `S³ multi-stage defense — ${bench} — ${model}`,
    subtitle: 'Per task, in %; error bars: 95% Wilson intervals',
    step: 56,
    height: 260,
    values,
    x,
    xOffset,
    y: { field: 'value', type: 'quantitative', title: '% of tasks', scale: { domain: [0, 100] } },
    color: { field: 'metric', type: 'nominal', title: null, scale: { domain: [ASR, BENIGN], range: [COLORS.harmful, COLORS.benign] } },
    tooltip: [
      { field: 'configuration' }, { field: 'metric' }, { field: 'value', title: '%', format: '.1f' },
      { field: 'lo', title: '95% CI low', format: '.1f' }, { field: 'hi', title: '95% CI high', format: '.1f' }, { field: 'k' }, { field: 'n' },
    ],
  });
  return {
    name: `s3-${bench}`,
    title: `S³ — ${bench}`,
    caption: 'Attack success and benign completion per guard configuration (none, single skills, no recovery, full S³).',
    spec,
  };
}
