/**
 * The caveat for intervals bootstrapped from few groups. The bootstrap resamples whole groups (scenarios, behavior
 * stems, else pairs) of the evaluation split; with g groups there are only C(2g−1, g) distinct resamples (g = 3: 10)
 * and the percentile interval is coarse and too narrow, so a `--quick` run's brackets must not read as evidence.
 */
import type { AnalysisResults } from '../analysis/results.ts';

/** below this many evaluation groups the intervals get the caveat */
export const MIN_BOOTSTRAP_GROUPS = 10;

/** One sentence for stdout, report.md and report.html, or null when the intervals rest on enough groups. */
export function fewGroupsCaveat(res: Pick<AnalysisResults, 'bootstrap'>): string | null {
  const g = res.bootstrap.groups;
  if (g === undefined || res.bootstrap.reps <= 0 || g >= MIN_BOOTSTRAP_GROUPS) return null;
  return `Caveat: the intervals resample only ${g} evaluation group${g === 1 ? '' : 's'} (fewer than ${MIN_BOOTSTRAP_GROUPS}); so few groups give coarse, too-narrow intervals — read them as descriptive, and use more pairs (a larger --limit, or no --quick) for intervals to rely on.`;
}
