/**
 * A probe's decision threshold for a stated false-positive target: flag = score > t, with t the smallest value
 * such that at most ⌊target·n_benign⌋ benign training scores exceed it. With benign scores sorted descending
 * s_1 ≥ s_2 ≥ …, t = s_{m+1}, m = ⌊target·n⌋ (ties at t are not flagged, so the achieved rate can be lower).
 */
import { SafekeepError } from '../util/errors.ts';

interface ThresholdChoice {
  threshold: number;
  /** the stated target (share of benign rows flagged) */
  target: number;
  /** share of benign training rows above the threshold */
  benignFlagged: number;
  /** share of harmful training rows above the threshold */
  harmfulFlagged: number;
  nBenign: number;
  nHarmful: number;
}

export function thresholdForBenignRate(scores: ArrayLike<number>, labels: ArrayLike<number>, target: number): ThresholdChoice {
  if (!(target >= 0 && target < 1)) throw new SafekeepError(`threshold target must be in [0, 1), got ${target}`);
  if (scores.length !== labels.length) throw new SafekeepError(`threshold: ${scores.length} scores for ${labels.length} labels`);
  const benign: number[] = [];
  const harmful: number[] = [];
  for (let i = 0; i < scores.length; i++) {
    if (Number.isNaN(scores[i]!)) throw new SafekeepError(`threshold: score ${i} is NaN`);
    (labels[i] === 1 ? harmful : benign).push(scores[i]!);
  }
  if (benign.length === 0 || harmful.length === 0) {
    throw new SafekeepError(`threshold: needs both classes, got ${harmful.length} harmful and ${benign.length} benign scores`);
  }
  benign.sort((a, b) => b - a);
  const m = Math.floor(target * benign.length + 1e-9);
  const threshold = benign[Math.min(m, benign.length - 1)]!;
  const above = (xs: number[]) => xs.filter((x) => x > threshold).length;
  return {
    threshold,
    target,
    benignFlagged: above(benign) / benign.length,
    harmfulFlagged: above(harmful) / harmful.length,
    nBenign: benign.length,
    nHarmful: harmful.length,
  };
}
