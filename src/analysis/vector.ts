/** Vector math with Float64 accumulation. */

type Vec = ArrayLike<number>;

export function dot(a: Vec, b: Vec): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}

export function norm(a: Vec): number {
  return Math.sqrt(dot(a, a));
}

/** cos(a, b); 0 when either vector is zero (no direction, no alignment). */
export function cosine(a: Vec, b: Vec): number {
  if (a.length !== b.length) throw new Error(`cosine: length ${a.length} vs ${b.length}`);
  const na = norm(a);
  const nb = norm(b);
  if (na === 0 || nb === 0) return 0;
  return dot(a, b) / (na * nb);
}

/** a / |a| (a copy); the zero vector stays zero. */
export function unit(a: Vec): Float64Array {
  const out = Float64Array.from(a);
  const n = norm(out);
  if (n > 0) for (let i = 0; i < out.length; i++) out[i]! /= n;
  return out;
}
