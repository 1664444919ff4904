/**
 * A counter-based generator: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011;
 * the generator behind cuRAND's and JAX's streams). Its output is a pure function of (key, counter), so a row's draw
 * at decode step t is philox(seed, t) — the same whichever rows share its batch, in whatever order the scheduler
 * runs them, with or without prefix caching — where a shared stream (torch's generator, one xoshiro) would hand each
 * row whatever draws the rows before it left. Checked against Random123's known-answer vectors
 * (test/sample.philox.test.ts).
 *
 * Pure 32-bit arithmetic (the high half of a 32×32 product from 16-bit limbs, exact in doubles): the same bits on
 * every machine.
 */

const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;

/** the high 32 bits of the 64-bit product a·b (a, b unsigned 32-bit) */
function mulhi32(a: number, b: number): number {
  const a0 = a & 0xffff, a1 = a >>> 16, b0 = b & 0xffff, b1 = b >>> 16;
  const p01 = a0 * b1, p10 = a1 * b0;
  const mid = ((a0 * b0) >>> 16) + (p01 & 0xffff) + (p10 & 0xffff);
  return (a1 * b1 + Math.floor(p01 / 65536) + Math.floor(p10 / 65536) + Math.floor(mid / 65536)) >>> 0;
}

/**
 * Philox4x32 with `rounds` rounds (10 is the standard): counter [c0, c1, c2, c3] and key [k0, k1], unsigned 32-bit
 * words, to four unsigned 32-bit words.
 */
export function philox4x32(counter: readonly number[], key: readonly number[], rounds = 10): [number, number, number, number] {
  let [c0, c1, c2, c3] = counter.map((x) => x >>> 0) as [number, number, number, number];
  let [k0, k1] = key.map((x) => x >>> 0) as [number, number];
  for (let r = 0; r < rounds; r++) {
    if (r > 0) { k0 = (k0 + W0) >>> 0; k1 = (k1 + W1) >>> 0; }
    const hi0 = mulhi32(M0, c0), lo0 = Math.imul(M0, c0) >>> 0;
    const hi1 = mulhi32(M1, c2), lo1 = Math.imul(M1, c2) >>> 0;
    [c0, c1, c2, c3] = [(hi1 ^ c1 ^ k0) >>> 0, lo1, (hi0 ^ c3 ^ k1) >>> 0, lo0];
  }
  return [c0, c1, c2, c3];
}

/** a seed (any safe integer, negative ones as their two's complement) → the generator's key words [low, high] */
export function seedKey(seed: number): [number, number] {
  const s = BigInt.asUintN(64, BigInt(seed));
  return [Number(s & 0xffffffffn), Number(s >> 32n)];
}

/**
 * The uniform of draw `step` of the row seeded `seed`: in [0, 1) with 53 random bits, from the first two words of
 * philox(key = seed, counter = [step, stream, 0, 0]). `stream` separates independent uses of one seed (0: the token
 * draw).
 */
export function uniformAt(seed: number, step: number, stream = 0): number {
  const [k0, k1] = seedKey(seed);
  const [a, b] = philox4x32([step >>> 0, stream >>> 0, Math.floor(step / 4294967296) >>> 0, 0], [k0, k1]);
  return ((a >>> 5) * 67108864 + (b >>> 6)) / 9007199254740992;
}
