/** Greedy decoding's choice: the first index of the maximum of x[from..to) (ties → the lowest, like torch.argmax), relative to `from`. */
export function argmax(x: Float64Array | Float32Array, from = 0, to = x.length): number {
  let best = from;
  for (let i = from + 1; i < to; i++) if (x[i]! > x[best]!) best = i;
  return best - from;
}
