/** Small descriptive statistics used across the analyses. */

export function mean(x: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i]!;
  return s / x.length;
}

/** Sample standard deviation (n − 1); 0 for fewer than two values. */
export function sd(x: ArrayLike<number>): number {
  const n = x.length;
  if (n < 2) return 0;
  const m = mean(x);
  let s = 0;
  for (let i = 0; i < n; i++) s += (x[i]! - m) ** 2;
  return Math.sqrt(s / (n - 1));
}

/** Quantile with linear interpolation between order statistics (R type 7, numpy default). */
export function quantile(x: ArrayLike<number>, p: number): number {
  const s = Float64Array.from(x).sort();
  if (s.length === 0) return NaN;
  const h = (s.length - 1) * p;
  const lo = Math.floor(h);
  const hi = Math.min(lo + 1, s.length - 1);
  return s[lo]! + (h - lo) * (s[hi]! - s[lo]!);
}

export interface Interval {
  lo: number;
  hi: number;
}

/** Central percentile interval at `level` (0.95 → 2.5 % and 97.5 % quantiles). */
export function percentileInterval(x: ArrayLike<number>, level = 0.95): Interval {
  const a = (1 - level) / 2;
  return { lo: quantile(x, a), hi: quantile(x, 1 - a) };
}

/**
 * Wilson score interval for a proportion k/n (z = 1.959964: 95 %). k and n are counts (integers, 0 ≤ k ≤ n);
 * anything else is a caller's bug and throws. n = 0 gives [0, 1]: with no trials every proportion is possible.
 * The bounds at k = 0 and k = n are exactly 0 and 1 (analytically they are; floating point would miss by an ulp).
 */
export function wilsonInterval(k: number, n: number, z = 1.959963984540054): Interval {
  if (!Number.isInteger(k) || !Number.isInteger(n) || k < 0 || n < 0 || k > n) throw new Error(`wilson: bad counts k=${k} n=${n}`);
  if (n === 0) return { lo: 0, hi: 1 };
  const p = k / n;
  const z2 = z * z;
  const den = 1 + z2 / n;
  const centre = (p + z2 / (2 * n)) / den;
  const half = (z * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n))) / den;
  return { lo: k === 0 ? 0 : Math.max(0, centre - half), hi: k === n ? 1 : Math.min(1, centre + half) };
}
