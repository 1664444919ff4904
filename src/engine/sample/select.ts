/**
 * Order statistics without sorting the vocabulary: the k-th largest value (a bounded min-heap in one pass for small
 * k — most entries fail one comparison with the heap's minimum — else quickselect, expected O(V)), and the m largest
 * entries in order (a select, then a sort of those m only). Top-k and top-p need no more than this.
 */

/** above this k the heap's log k per entry loses to quickselect's copy and partitions */
const HEAP_MAX_K = 1024;

/** the k-th largest of `x` (k = 1: the maximum); −∞ entries count as values. `scratch`: a buffer of x's length to use */
export function largest(x: ArrayLike<number>, k: number, scratch?: Float64Array): number {
  if (k < 1 || k > x.length) throw new RangeError(`largest: k = ${k} of ${x.length}`);
  return k <= HEAP_MAX_K ? heapLargest(x, k) : quickselect(x, k, scratch);
}

function heapLargest(x: ArrayLike<number>, k: number): number {
  const h = new Float64Array(k); // min-heap of the k largest so far
  for (let i = 0; i < k; i++) h[i] = x[i]!;
  for (let i = (k >> 1) - 1; i >= 0; i--) siftDown(h, i, k);
  for (let i = k; i < x.length; i++) {
    const v = x[i]!;
    if (v > h[0]!) { h[0] = v; siftDown(h, 0, k); }
  }
  return h[0]!;
}

function siftDown(h: Float64Array, i: number, n: number): void {
  const v = h[i]!;
  for (;;) {
    let c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && h[c + 1]! < h[c]!) c++;
    if (!(h[c]! < v)) break;
    h[i] = h[c]!;
    i = c;
  }
  h[i] = v;
}

function quickselect(x: ArrayLike<number>, k: number, scratch?: Float64Array): number {
  const a = scratch?.length === x.length ? scratch : new Float64Array(x.length);
  a.set(x);
  const target = a.length - k; // its index in ascending order
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
export function topIndices(x: ArrayLike<number>, m: number, scratch?: Float64Array): Int32Array {
  const n = x.length;
  m = Math.min(m, n);
  if (m <= 0) return new Int32Array(0);
  const threshold = largest(x, m, scratch);
  const picked = new Int32Array(m);
  let k = 0;
  for (let i = 0; i < n && k < m; i++) if (x[i]! > threshold) picked[k++] = i;
  for (let i = 0; i < n && k < m; i++) if (x[i] === threshold) picked[k++] = i;
  return picked.sort((a, b) => (x[b]! - x[a]!) || a - b);
}
