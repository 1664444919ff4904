/**
 * Leave-one-dataset-out as grouped bars: per held-out data set, the AUROC of the mean-difference probe trained on
 * each source (in-distribution first), with 95 % bootstrap intervals — how much of the in-distribution number
 * survives on a data set the probe never saw.
 */
import type { AnalysisResults } from '../../analysis/results.ts';
import { COLORS } from '../theme.ts';
import { groupedBarsSpec, type Figure } from './spec.ts';

export function lodoBarsFigure(res: AnalysisResults): Figure | null {
  const lodo = res.probe?.lodo;
  if (!lodo || lodo.rows.length === 0) return null;
  const rows = lodo.rows.filter((r) => r.kind === 'mean-diff');
  const label = (r: (typeof rows)[number]) => (r.inDistribution ? 'in-distribution' : r.train.startsWith('union of') ? 'union of the others' : `trained on ${r.train}`);
  const values = rows.map((r) => ({ test: r.test, source: label(r), auroc: r.auroc.est, lo: r.auroc.lo, hi: r.auroc.hi, n: r.nTest }));
  const sources = [...new Set(values.map((v) => v.source))].sort((a, b) => (a === 'in-distribution' ? -1 : b === 'in-distribution' ? 1 : a < b ? -1 : 1));
  const x = { field: 'test', type: 'nominal', title: 'held-out test set', axis: { labelAngle: 0 } } as const;
  const xOffset = { field: 'source', type: 'nominal', sort: sources } as const;
  const title = 'Refusal probes on data sets they never saw';
  const spec = groupedBarsSpec({
    title: `${title} — ${res.model}`,
    subtitle: 'mean-difference probe; error bars: 95% bootstrap interval over test groups',
    step: 36,
    height: 260,
    values,
    x,
    xOffset,
    y: { field: 'auroc', type: 'quantitative', title: 'AUROC (harmful = positive)', scale: { domain: [0, 1] } },
    color: { field: 'source', type: 'nominal', title: 'probe trained on', scale: { domain: sources, range: COLORS.palette.slice(0, sources.length) } },
    tooltip: [
      { field: 'test', title: 'held-out' }, { field: 'source', title: 'trained on' },
      { field: 'auroc', title: 'AUROC', format: '.3f' }, { field: 'lo', title: '95% CI low', format: '.3f' }, { field: 'hi', title: '95% CI high', format: '.3f' }, { field: 'n', title: 'n test' },
    ],
  });
  return {
    name: 'probe-lodo-bars',
    title,
    caption: `AUROC of the mean-difference probe on each data set's test half, trained on that set's other half (in-distribution) or on the other data sets. Model: ${lodo.model}.`,
    spec,
  };
}
