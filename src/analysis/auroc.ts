/**
 * AUROC as the Mann–Whitney statistic with average ranks for ties: P(score_harmful > score_benign) + ½ P(tie).
 * Positive class = harmful (label 1). Never auto-flipped: a direction that ranks benign above harmful scores < 0.5.
 */
import { SafekeepError } from '../util/errors.ts';

/** 1-based ranks of `x`, ties get the average of the ranks they span. [x.length] */
export function averageRanks(x: ArrayLike<number>): Float64Array {
  const n = x.length;
  const idx = Array.from({ length: n }, (_, i) => i).sort((a, b) => x[a]! - x[b]!);
  const ranks = new Float64Array(n);
  let i = 0;
  while (i < n) {
    let j = i;
    while (j + 1 < n && x[idx[j + 1]!] === x[idx[i]!]) j++;
    const r = (i + j) / 2 + 1;
    for (let k = i; k <= j; k++) ranks[idx[k]!] = r;
    i = j + 1;
  }
  return ranks;
}

export function auroc(scores: ArrayLike<number>, labels: ArrayLike<number>): number {
  if (scores.length !== labels.length) {
    throw new SafekeepError(`auroc: ${scores.length} scores for ${labels.length} labels`);
  }
  for (let i = 0; i < scores.length; i++) {
    if (Number.isNaN(scores[i]!)) throw new SafekeepError(`auroc: score ${i} is NaN`);
  }
  const ranks = averageRanks(scores);
  let nPos = 0;
  let rankSum = 0;
  for (let i = 0; i < labels.length; i++) {
    const y = labels[i];
    if (y === 1) {
      nPos++;
      rankSum += ranks[i]!;
    } else if (y !== 0) {
      throw new SafekeepError(`auroc: label ${i} is ${y}, expected 0 (benign) or 1 (harmful)`);
    }
  }
  const nNeg = labels.length - nPos;
  if (nPos === 0 || nNeg === 0) {
    throw new SafekeepError(`auroc: needs both classes, got ${nPos} harmful and ${nNeg} benign`);
  }
  const u = rankSum - (nPos * (nPos + 1)) / 2;
  return u / (nPos * nNeg);
}
