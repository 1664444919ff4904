/**
 * The one seeded random source (random checkpoints, the planted model, bootstrap, CV folds, baselines, pseudowords):
 * xoshiro128** seeded by splitmix32, Box–Muller for standard normals. Same seed → same stream on every machine (pure
 * 32-bit integer arithmetic).
 *
 * Why xoshiro128** and not a smaller generator such as mulberry32 (which analyses used before): its period is
 * 2^128 − 1, while a 32-bit state repeats after 2^32 ≈ 4.3·10^9 draws — fewer than the ~8·10^9 normals (one
 * uniform each) an 8B-shaped random checkpoint (`npm run bench:8b`) needs, whose later layers would then repeat
 * earlier ones exactly.
 */

export interface Rng {
  /** uniform in (0, 1): never 0, so log(uniform()) is finite */
  uniform(): number;
  /** standard normal N(0, 1) */
  normal(): number;
  /** uniform integer in [0, n) */
  int(n: number): number;
  /** uniform 32-bit unsigned integer */
  nextU32(): number;
}

const rotl = (x: number, k: number): number => ((x << k) | (x >>> (32 - k))) >>> 0;

/** xoshiro128** with its four state words from splitmix32 over `seed` (any integer; reduced mod 2^32). */
export function makeRng(seed: number): Rng {
  const s = new Uint32Array(4);
  let x = seed >>> 0;
  for (let i = 0; i < 4; i++) {
    x = (x + 0x9e3779b9) >>> 0;
    let z = x;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    s[i] = (z ^ (z >>> 16)) >>> 0;
  }
  let spare: number | null = null;
  const nextU32 = (): number => {
    const r = Math.imul(rotl(Math.imul(s[1]!, 5) >>> 0, 7), 9) >>> 0;
    const t = (s[1]! << 9) >>> 0;
    s[2]! ^= s[0]!; s[3]! ^= s[1]!; s[1]! ^= s[2]!; s[0]! ^= s[3]!;
    s[2]! ^= t;
    s[3] = rotl(s[3]!, 11);
    return r;
  };
  const uniform = (): number => (nextU32() + 0.5) / 4294967296;
  const normal = (): number => {
    if (spare !== null) {
      const v = spare;
      spare = null;
      return v;
    }
    const r = Math.sqrt(-2 * Math.log(uniform()));
    const th = 2 * Math.PI * uniform();
    spare = r * Math.sin(th);
    return r * Math.cos(th);
  };
  const int = (n: number): number => Math.floor(uniform() * n);
  return { uniform, normal, int, nextU32 };
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
