/**
 * The pair budget of a run, checked at the CLI edge before any model work: the data set after `--limit` (or
 * `--quick`) and its 7:3 group split must leave every stage something to work on — at least `folds` extraction groups
 * when ℓ* is chosen by k-fold cross-validation (whole groups per fold), at least one extraction group for the
 * directions and one evaluation group for what is measured or steered. A refusal names the numbers and the smallest
 * `--limit` that works, instead of stages running on nothing or failing deep inside cross-validation.
 */
import { loadPairSet } from '../data/load.ts';
import { splitGroupCounts, splitPairs } from '../data/split.ts';
import type { Pair } from '../data/types.ts';
import { stratifiedSubset, type ContextOptions } from '../experiments/extract.ts';
import { SafekeepError } from '../util/errors.ts';

interface BudgetNeeds {
  /** extraction groups needed: the CV folds (5) when ℓ* is chosen by cross-validation, else 1 */
  extractionGroups: number;
  /** why that many, for the message (e.g. 'ℓ* by 5-fold cross-validation') */
  reason: string;
}

/** extraction/evaluation group counts of the first `n` pairs (round-robin over categories), split as the run splits */
function groupCounts(pairs: readonly Pair[], n: number, seed: number): { extraction: number; evaluation: number } {
  const subset = stratifiedSubset(pairs, n);
  return splitGroupCounts(subset, splitPairs(subset, seed));
}

const fits = (c: { extraction: number; evaluation: number }, need: BudgetNeeds): boolean =>
  c.extraction >= need.extractionGroups && c.evaluation >= 1;

/** Refuses a run whose pairs cannot feed its stages (see the file comment); `limit` is the effective limit. */
export async function checkPairBudget(o: ContextOptions, limit: number | undefined, need: BudgetNeeds): Promise<void> {
  const set = await loadPairSet(o.data ?? 'pairs', o.dataDirs);
  const seed = o.splitSeed ?? 0;
  const n = Math.min(limit ?? Infinity, set.pairs.length);
  const have = groupCounts(set.pairs, n, seed);
  if (fits(have, need)) return;
  const what = `${n} pair${n === 1 ? '' : 's'} from '${set.name}'${limit !== undefined && limit < set.pairs.length ? ` (--limit ${limit})` : ''}`;
  const split = `the 7:3 group split (seed ${seed}) leaves ${have.extraction} extraction and ${have.evaluation} evaluation group${have.evaluation === 1 ? '' : 's'}`;
  const needs = `${need.reason} needs ≥ ${need.extractionGroups} extraction group${need.extractionGroups === 1 ? '' : 's'} and ≥ 1 evaluation group`;
  let smallest: number | null = null;
  for (let m = n + 1; m <= set.pairs.length && smallest === null; m++) if (fits(groupCounts(set.pairs, m, seed), need)) smallest = m;
  const fix = smallest !== null ? `use --limit ${smallest} or more` : `the data set has only ${set.pairs.length} pairs: use a larger data set`;
  throw new SafekeepError(`${what}: ${split}; ${needs} — ${fix}`);
}

/** ℓ* by cross-validation: `reproduce` always runs it (its CV row is reported under either rule), `steer` with --layer auto */
export const CV_BUDGET: BudgetNeeds = { extractionGroups: 5, reason: 'choosing ℓ* by 5-fold cross-validation' };
export const DIRECTION_BUDGET: BudgetNeeds = { extractionGroups: 1, reason: 'a direction from the extraction split' };
