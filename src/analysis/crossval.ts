/**
 * Choosing ℓ* without touching evaluation data: k-fold cross-validation over pairs on the extraction split (pass
 * group ids as `pairIds` and whole groups go to one fold).
 * For each fold the refusal direction is fit on the other k−1 folds and its AUROC is measured on the held-out fold;
 * ℓ* = argmax over candidate layers of the mean held-out AUROC (ties → the earliest layer).
 */
import { SafekeepError } from '../util/errors.ts';
import { type Activations, type Labels, allRows, checkRowsAndLabels } from './activations.ts';
import { auroc } from './auroc.ts';
import { refusalDirection } from './direction.ts';
import { projections } from './projection.ts';
import { makeRng, shuffleInPlace } from '../util/rng.ts';

interface LayerChoiceOptions {
  /** folds (default 5) */
  k?: number;
  /** fold assignment seed (default 0) */
  seed?: number;
  /** candidate layers (default 1..L: every decoder block's output, not the embedding) */
  candidates?: readonly number[];
}

export interface LayerChoice {
  /** ℓ* */
  layer: number;
  /** mean held-out AUROC per layer, NaN for non-candidates. [layers] */
  cvAuroc: number[];
  k: number;
  seed: number;
}

/** Assigns each unique pair id (sorted, then shuffled with `seed`) to one of k folds round-robin. */
export function pairFolds(pairIds: readonly string[], k: number, seed: number): Map<string, number> {
  const unique = [...new Set(pairIds)].sort();
  if (unique.length < k) throw new SafekeepError(`cross-validation: ${unique.length} pairs cannot fill ${k} folds`);
  shuffleInPlace(unique, makeRng(seed));
  return new Map(unique.map((p, i) => [p, i % k]));
}

export function chooseLayerByCV(
  acts: Activations,
  labels: Labels,
  pairIds: ArrayLike<string>,
  rows: readonly number[] = allRows(acts.n),
  opts: LayerChoiceOptions = {},
): LayerChoice {
  const k = opts.k ?? 5;
  const seed = opts.seed ?? 0;
  const candidates = opts.candidates ?? allRows(acts.layers).slice(1);
  checkRowsAndLabels('chooseLayerByCV', acts, labels, rows);
  if (pairIds.length !== acts.n) throw new SafekeepError(`chooseLayerByCV: ${pairIds.length} pair ids for ${acts.n} rows`);
  if (candidates.length === 0) throw new SafekeepError('chooseLayerByCV: no candidate layers');
  const folds = pairFolds(rows.map((r) => pairIds[r]!), k, seed);
  const sums = new Float64Array(acts.layers);
  const counts = new Int32Array(acts.layers);
  for (let f = 0; f < k; f++) {
    const train = rows.filter((r) => folds.get(pairIds[r]!) !== f);
    const test = rows.filter((r) => folds.get(pairIds[r]!) === f);
    const testLabels = test.map((r) => labels[r]!);
    const pos = testLabels.reduce((a, b) => a + b, 0);
    if (pos === 0 || pos === test.length) continue; // a fold with one class has no AUROC
    const dir = refusalDirection(acts, labels, train);
    for (const l of candidates) {
      sums[l]! += auroc(projections(acts, dir, l, test), testLabels);
      counts[l]!++;
    }
  }
  const cvAuroc = Array.from({ length: acts.layers }, (_, l) => (counts[l]! > 0 ? sums[l]! / counts[l]! : NaN));
  let best = -1;
  for (const l of candidates) {
    if (Number.isNaN(cvAuroc[l]!)) continue;
    if (best < 0 || cvAuroc[l]! > cvAuroc[best]!) best = l;
  }
  if (best < 0) {
    throw new SafekeepError('chooseLayerByCV: no fold had both classes; need more pairs');
  }
  return { layer: best, cvAuroc, k, seed };
}
