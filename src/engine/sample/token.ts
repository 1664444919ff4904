/**
 * A sampled token without an exp per vocabulary entry: the processed distribution of warpers.ts, drawn exactly, from
 * the `head` largest logits plus a bound on the rest. A row's exp pass over a 150k vocabulary costs about as much as
 * the argmax of a whole decode step, so on a 32-row step it is what sampling costs; the head path costs one pass of
 * comparisons (a bounded heap) and `head` exps.
 *
 * The tail (logits below the head's smallest, τ) is counted in bins of T/8 below the maximum logit: a token of bin k
 * weighs at most e^(−k/8), so the tail's mass lies in [0, U], U = Σ count_k · e^(−k/8) (within e^(1/8) of the truth).
 * - temperature (and no filter): rejection from the proposal "head weights, each tail bin flat at its bound" — a
 *   head token is taken as drawn, a tail token t (a bin by its mass, uniform in it) kept with probability w_t / bound,
 *   else drawn again — exact;
 * - top-p: HF's kept set is found from the head's sorted cumulative mass, for every total in [Σhead + L, Σhead + U]
 *   (L: the tail bins' lower edges);
 *   when the bound decides it (the nucleus inside the head, every cut the same for both ends) the token is drawn from
 *   it by inverse CDF, exactly as from the full distribution;
 * - anything else — top-k and min-p already take exp of their kept tokens only (warpers.ts), a tail too heavy for
 *   rejection (a flat distribution), a top-p cut the bound does not decide — draws from the full weights.
 * The uniforms are the row's (uniform(k): the k-th of this seed and step), so the choice stays a function of (logits,
 * settings, seed, step).
 */
import { drawIndex } from './draw.ts';
import { largest, topIndices } from './select.ts';
import { warpedWeights, type WarpSettings } from './warpers.ts';

/** how many largest logits take an exp (the head) */
export const HEAD_TOKENS = 256;
/** rejection rounds before the full draw */
const MAX_TRIES = 8;
/** the tail's bound may weigh at most this many times the head before the full draw is cheaper */
const MAX_TAIL_RATIO = 4;
/** the tail is bounded bin by bin: bins of T/8 in logit (a bin's bound within e^(1/8) of its tokens' weights), 40·T deep */
const BIN_T = 0.125;
const BINS = 320;

/** which way each draw went (tests read it) */
export interface DrawStats { head: number; tail: number; full: number }

/** The head (token ids, weights, Σ) and the tail's bins (counts, per-token bounds, Σ count · bound). */
interface Split {
  head: number[];
  w: number[];
  sumHead: number;
  counts: Float64Array;
  bound: Float64Array;
  /** Σ count · bound: the tail's mass is at most U, and at least L (every bin but the last holds tokens above its lower edge) */
  U: number;
  L: number;
}

/** one pass: head tokens (logit ≥ τ) with their weights, every other token counted in its bin below the maximum */
function split(z: Float64Array, tau: number, max: number, invT: number): Split {
  const head: number[] = [], w: number[] = [];
  const counts = new Float64Array(BINS);
  const width = BIN_T / invT;
  let sumHead = 0;
  for (let i = 0; i < z.length; i++) {
    const zi = z[i]!;
    if (zi >= tau) {
      const wi = Math.exp((zi - max) * invT);
      head.push(i);
      w.push(wi);
      sumHead += wi;
    } else {
      counts[Math.min(BINS - 1, Math.floor((max - zi) / width))]!++;
    }
  }
  // a token in bin k has weight exp(−(max − z)/T) ≤ e^(−k·BIN_T)
  const bound = Float64Array.from({ length: BINS }, (_, k) => Math.exp(-k * BIN_T));
  let U = 0, L = 0;
  for (let k = 0; k < BINS; k++) U += counts[k]! * bound[k]!;
  for (let k = 0; k + 1 < BINS; k++) L += counts[k]! * bound[k + 1]!;
  return { head, w, sumHead, counts, bound, U, L };
}

export function sampleToken(
  z: Float64Array, s: WarpSettings, uniform: (k: number) => number,
  o: { head?: number; scratch?: { w: Float64Array; select: Float64Array }; stats?: DrawStats } = {},
): number {
  const V = z.length;
  const topP = s.topP !== undefined && s.topP < 1 ? s.topP : null;
  const m = Math.min(V, o.head ?? HEAD_TOKENS);
  const full = (k: number): number => {
    if (o.stats) o.stats.full++;
    return drawIndex(warpedWeights(z, s, o.scratch), uniform(k));
  };
  // top-k and min-p alone take exp of their kept tokens only already; a vocabulary no larger than the head has no tail
  if ((s.topK && s.topK < V) || (s.minP && topP === null) || m >= V) return full(0);
  let max = -Infinity;
  for (let i = 0; i < V; i++) if (z[i]! > max) max = z[i]!;
  const invT = 1 / s.temperature;
  const tau = largest(z, m);
  const sp = split(z, tau, max, invT);
  const { head, w, sumHead, U } = sp;
  if (U > MAX_TAIL_RATIO * sumHead) return full(0);
  if (topP !== null) {
    const hw = Float64Array.from(w);
    let nucleus = headNucleus(hw, sumHead + sp.L, sumHead + U, topP);
    if (nucleus === 'ambiguous') {
      // the cut falls inside the tail's uncertainty: the heavy bins' mass exactly, the rest still bounded
      const t = refinedTail(z, sp, tau, max, invT, 1e-4 * sumHead);
      nucleus = headNucleus(hw, sumHead + t.lo, sumHead + t.hi, topP);
    }
    if (nucleus === null || nucleus === 'ambiguous') return full(0);
    const keep = new Float64Array(head.length);
    for (const k of nucleus) keep[k] = !s.minP || w[k]! >= s.minP ? w[k]! : 0;
    if (o.stats) o.stats.head++;
    return head[drawIndex(keep, uniform(0))]!;
  }
  let bins: Int32Array[] | null = null;
  for (let t = 0; t < MAX_TRIES; t++) {
    const x = uniform(2 * t) * (sumHead + U);
    if (x < sumHead) {
      if (o.stats) o.stats.head++;
      return head[drawIndex(w, x / sumHead)]!;
    }
    // a tail proposal: a bin by its count · bound, a token uniform in it, kept with probability weight / bound
    let k = 0, acc = sumHead;
    for (; k < BINS - 1; k++) {
      const mass = sp.counts[k]! * sp.bound[k]!;
      if (acc + mass > x) break;
      acc += mass;
    }
    if (sp.counts[k] === 0) continue; // rounding past the last bin with tokens: draw again
    bins ??= tailBins(z, sp.counts, tau, max, invT);
    const inBin = bins[k]!;
    const j = inBin[Math.min(inBin.length - 1, Math.floor(((x - acc) / (sp.counts[k]! * sp.bound[k]!)) * inBin.length))]!;
    if (uniform(2 * t + 1) * sp.bound[k]! < Math.exp((z[j]! - max) * invT)) {
      if (o.stats) o.stats.tail++;
      return j;
    }
  }
  return full(2 * MAX_TRIES);
}

/** the tail's token ids bin by bin (id order within a bin) */
function tailBins(z: Float64Array, counts: Float64Array, tau: number, max: number, invT: number): Int32Array[] {
  const bins = Array.from(counts, (c) => new Int32Array(c));
  const fill = new Int32Array(BINS);
  const width = BIN_T / invT;
  for (let i = 0; i < z.length; i++) {
    const zi = z[i]!;
    if (zi >= tau) continue;
    const k = Math.min(BINS - 1, Math.floor((max - zi) / width));
    bins[k]![fill[k]!++] = i;
  }
  return bins;
}

/**
 * HF's top-p set within the head (indices into `w`); 'ambiguous' when the tail's unknown mass could move the cut, null
 * when the set may reach into the tail. A token is kept while 1 − (mass above it) / total > 1 − p, for every total in
 * [lo, hi] (the head's mass plus the tail's bounds).
 */
function headNucleus(w: Float64Array, lo: number, hi: number, p: number): Int32Array | 'ambiguous' | null {
  const order = topIndices(w, w.length);
  let above = 0;
  for (let k = 0; k < order.length; k++) {
    if (k > 0) {
      const keepLo = 1 - above / lo > 1 - p, keepHi = 1 - above / hi > 1 - p;
      if (keepLo !== keepHi) return 'ambiguous';
      if (!keepLo) return order.subarray(0, k);
    }
    above += w[order[k]!]!;
  }
  return null; // every head token kept: the set may reach into the tail
}

/**
 * The tail's mass within [lo, hi] to `slack`: the bins nearest the maximum summed exactly (an exp per token in them)
 * until the bounds of the bins left add up to at most `slack`.
 */
function refinedTail(z: Float64Array, sp: Split, tau: number, max: number, invT: number, slack: number): { lo: number; hi: number } {
  let rest = sp.U, k = 0;
  while (k < BINS && rest > slack) rest -= sp.counts[k++]! * sp.bound[k - 1]!;
  // bins 0..k−1 exactly: tail tokens with (max − z) / width < k
  const width = BIN_T / invT, edge = max - k * width;
  let exact = 0;
  for (let i = 0; i < z.length; i++) {
    const zi = z[i]!;
    if (zi < tau && zi > edge) exact += Math.exp((zi - max) * invT);
  }
  let lo = 0;
  for (let j = k; j + 1 < BINS; j++) lo += sp.counts[j]! * sp.bound[j + 1]!;
  return { lo: exact + lo, hi: exact + Math.max(0, rest) };
}
