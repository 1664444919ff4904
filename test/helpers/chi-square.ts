/**
 * Pearson's chi-square goodness-of-fit test with its p-value (the regularised upper incomplete gamma function
 * Q(df/2, χ²/2), by its series below a + 1 and Lentz's continued fraction above — Numerical Recipes §6.2), for tests
 * that check a sampler's draws against the distribution it should draw from. Categories expected fewer than 5 times
 * are pooled into one (the usual validity rule).
 */

/** ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; ~1e-15 relative) */
function logGamma(x: number): number {
  const c = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  x -= 1;
  let a = c[0]!;
  const t = x + 7.5;
  for (let i = 1; i < 9; i++) a += c[i]! / (x + i);
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
}

/** Q(a, x) = Γ(a, x) / Γ(a), the chi-square survival function at 2x with 2a degrees of freedom */
export function gammaQ(a: number, x: number): number {
  if (x <= 0) return 1;
  const lead = -x + a * Math.log(x) - logGamma(a);
  if (x < a + 1) {
    let sum = 1 / a, term = sum;
    for (let n = 1; n < 10000 && Math.abs(term) > Math.abs(sum) * 1e-16; n++) { term *= x / (a + n); sum += term; }
    return 1 - sum * Math.exp(lead);
  }
  const tiny = 1e-300;
  let b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (let i = 1; i < 10000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b; if (Math.abs(d) < tiny) d = tiny;
    c = b + an / c; if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const delta = d * c;
    h *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.exp(lead) * h;
}

export interface ChiSquare { statistic: number; df: number; p: number; categories: number }

/** observed counts against probabilities (summing to 1; categories with probability 0 must have no draws) */
export function chiSquare(observed: ArrayLike<number>, probs: ArrayLike<number>): ChiSquare {
  let n = 0;
  for (let i = 0; i < observed.length; i++) n += observed[i]!;
  let stat = 0, cats = 0, poolO = 0, poolE = 0;
  for (let i = 0; i < probs.length; i++) {
    const e = n * probs[i]!;
    if (e === 0) { if (observed[i]! > 0) return { statistic: Infinity, df: 0, p: 0, categories: 0 }; continue; }
    if (e < 5) { poolO += observed[i]!; poolE += e; continue; }
    stat += (observed[i]! - e) ** 2 / e;
    cats++;
  }
  if (poolE > 0) { stat += (poolO - poolE) ** 2 / poolE; cats++; }
  const df = cats - 1;
  return { statistic: stat, df, p: gammaQ(df / 2, stat / 2), categories: cats };
}
