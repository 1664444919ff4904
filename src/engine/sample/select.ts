/**
 * Order statistics without sorting the vocabulary: the k-th largest value by quickselect (expected O(V)), and the m
 * largest entries in order (a select, then a sort of those m only). Top-k and top-p need no more than this.
 */

/** the k-th largest of `x` (k = 1: the maximum); −∞ entries count as values */
export function largest(x: ArrayLike<number>, k: number): number {
  const a = Float64Array.from(x);
  const target = a.length - k; // its index in ascending order
  if (target < 0 || k < 1) throw new RangeError(`largest: k = ${k} of ${a.length}`);
  let lo = 0, hi = a.length - 1;
  while (lo < hi) {
    // median of three as the pivot, then Hoare's partition
    const mid = (lo + hi) >>> 1;
    const pivot = median3(a[lo]!, a[mid]!, a[hi]!);
    let i = lo, j = hi;
    while (i <= j) {
      while (a[i]! < pivot) i++;
      while (a[j]! > pivot) j--;
      if (i <= j) { const t = a[i]!; a[i] = a[j]!; a[j] = t; i++; j--; }
    }
    if (target <= j) hi = j;
    else if (target >= i) lo = i;
    else return a[target]!;
  }
  return a[target]!;
}

const median3 = (a: number, b: number, c: number): number => Math.max(Math.min(a, b), Math.min(Math.max(a, b), c));

/** indices of the m largest entries of `x`, most first (ties: the lower index first) */
export function topIndices(x: ArrayLike<number>, m: number): Int32Array {
  const n = x.length;
  m = Math.min(m, n);
  if (m <= 0) return new Int32Array(0);
  const threshold = largest(x, m);
  const picked = new Int32Array(m);
  let k = 0;
  for (let i = 0; i < n && k < m; i++) if (x[i]! > threshold) picked[k++] = i;
  for (let i = 0; i < n && k < m; i++) if (x[i] === threshold) picked[k++] = i;
  return picked.sort((a, b) => (x[b]! - x[a]!) || a - b);
}
