/**
 * One draw from a row's processed logits by inverse CDF: the first token whose cumulative weight exceeds u · total,
 * with exp(z − max) as the weights in token-id order. One uniform per token, so a row's draw t is a function of
 * (its logits, uniformAt(seed, t)) alone. A filtered token (−∞, weight 0) is never drawn.
 */
export function drawIndex(z: ArrayLike<number>, u: number): number {
  let max = -Infinity;
  for (let i = 0; i < z.length; i++) if (z[i]! > max) max = z[i]!;
  const w = new Float64Array(z.length);
  let total = 0;
  for (let i = 0; i < z.length; i++) { const e = Math.exp(z[i]! - max); w[i] = e; total += e; }
  const target = u * total;
  let acc = 0, last = -1;
  for (let i = 0; i < w.length; i++) {
    if (w[i] === 0) continue;
    acc += w[i]!;
    last = i;
    if (acc > target) return i;
  }
  return last; // u·total rounded up to the sum itself: the last token with weight
}
