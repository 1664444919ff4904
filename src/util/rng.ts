/**
 * The seeded random source of analyses and prompt randomization: mulberry32 (32-bit state, period 2^32) for uniforms,
 * Box–Muller for standard normals. Same seed → same stream on every machine (pure integer arithmetic).
 */

export interface Rng {
  /** uniform in [0, 1) */
  uniform(): number;
  /** standard normal N(0, 1) */
  normal(): number;
  /** uniform integer in [0, n) */
  int(n: number): number;
}

/** mulberry32 seeded with `seed` (any integer; reduced mod 2^32). */
export function makeRng(seed: number): Rng {
  let s = seed >>> 0;
  let spare: number | null = null;
  const uniform = (): number => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const normal = (): number => {
    if (spare !== null) {
      const v = spare;
      spare = null;
      return v;
    }
    // u1 in (0, 1] so log(u1) is finite
    const u1 = 1 - uniform();
    const u2 = uniform();
    const r = Math.sqrt(-2 * Math.log(u1));
    spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  };
  const int = (n: number): number => Math.floor(uniform() * n);
  return { uniform, normal, int };
}

/** Fisher–Yates shuffle in place with `rng`. */
export function shuffleInPlace<T>(a: T[] | Int32Array | Float64Array | Uint8Array, rng: Rng): void {
  for (let i = a.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    const tmp = a[i]!;
    a[i] = a[j]!;
    a[j] = tmp;
  }
}
