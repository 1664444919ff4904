/** softmax of one row of logits in Float64 ([vocab] → [vocab]); −∞ logits get probability exactly 0. */
export function softmax(z: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < z.length; i++) if (z[i]! > max) max = z[i]!;
  const p = new Float64Array(z.length);
  let sum = 0;
  for (let i = 0; i < z.length; i++) { const e = Math.exp(z[i]! - max); p[i] = e; sum += e; }
  for (let i = 0; i < z.length; i++) p[i]! /= sum;
  return p;
}
