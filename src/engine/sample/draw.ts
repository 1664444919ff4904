/**
 * One draw from a row's weights (process.ts sampleWeights) by inverse CDF: the first token whose cumulative weight
 * exceeds u · Σw, in token-id order. One uniform per token, so a row's draw t is a function of (its weights,
 * uniformAt(seed, t)) alone. A filtered token (weight 0) is never drawn.
 */
export function drawIndex(w: ArrayLike<number>, u: number): number {
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  const target = u * total;
  let acc = 0, last = -1;
  for (let i = 0; i < w.length; i++) {
    if (w[i] === 0) continue;
    acc += w[i]!;
    last = i;
    if (acc > target) return i;
  }
  return last; // u·Σw rounded up to the sum itself: the last token with weight
}
