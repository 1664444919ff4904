/**
 * HF's sampling warpers, in HF's order: temperature, top-k, top-p, min-p — transformers' TemperatureLogitsWarper,
 * TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper with their defaults (filter value −∞, min_tokens_to_keep 1) —
 * computed on weights instead of logits: w_i = exp((z_i − max z) / T), a filtered token's weight 0, so that the one
 * pass of exp a distribution costs is also all the warpers need (each HF warper that reads probabilities takes its own
 * softmax). The filters commute with the normalisation: top-p's cumulative sums and min-p's threshold on w / Σw are
 * HF's on the softmax of the filtered logits. The most likely token is never filtered, so max w = 1 throughout.
 *
 * Cost: top-k selects its threshold on the logits (select.ts, O(V) comparisons) and takes exp of the k kept tokens
 * only; min-p without top-p skips the exp of every token it will filter; top-p bins the weights by their bits and sorts
 * only the bins its cut can reach (about the kept set).
 */
import { largest } from './select.ts';

export interface WarpSettings {
  /** > 0 */
  temperature: number;
  topK?: number;
  topP?: number;
  minP?: number;
}

/**
 * The weights of one row ([vocab] processed logits z → [vocab] w ≥ 0, max 1): temperature, then top-k (tokens below
 * the k-th largest logit filtered; tokens tied with it kept, as HF's `scores < topk(scores, k)[-1]` keeps them), then
 * top-p, then min-p.
 */
export function warpedWeights(z: Float64Array, s: WarpSettings, scratch?: { w: Float64Array; select: Float64Array }): Float64Array {
  const V = z.length;
  let max = -Infinity;
  for (let i = 0; i < V; i++) if (z[i]! > max) max = z[i]!;
  const invT = 1 / s.temperature;
  const topP = s.topP !== undefined && s.topP < 1 ? s.topP : null;
  // logits below `floor` get weight 0 without an exp: top-k's threshold, and min-p's when no top-p needs their mass
  const select = scratch?.select.length === V ? scratch.select : undefined;
  let floor = s.topK && s.topK < V ? largest(z, s.topK, select) : -Infinity;
  if (s.minP && topP === null) floor = Math.max(floor, max + s.temperature * Math.log(s.minP) - 1e-9 * (1 + Math.abs(max)));
  const w = scratch?.w.length === V ? scratch.w : new Float64Array(V);
  for (let i = 0; i < V; i++) w[i] = z[i]! >= floor ? Math.exp((z[i]! - max) * invT) : 0;
  if (topP !== null) applyTopP(w, topP);
  if (s.minP) for (let i = 0; i < V; i++) if (w[i]! < s.minP) w[i] = 0;
  return w;
}

/**
 * HF's top-p on weights: sorted ascending, a token whose cumulative probability (itself and every less likely token)
 * is at most 1 − p is removed, the most likely always kept. From the most likely down: a token is kept while
 * 1 − (mass above it) > 1 − p. p = 0 keeps the most likely token only.
 *
 * Without sorting the vocabulary: one pass bins the weights by their float64 exponent and top 3 mantissa bits (bins an
 * eighth of an octave wide, monotone in the weight, read from the bits without a log) and sums each bin's mass; the
 * bins from the largest down that reach p's mass, and the next non-empty bin (the walk must see the first token it
 * drops), hold every token the cut can reach. Only those are sorted (the typed array's native sort) and summed from
 * the largest down — the order, and so the float sums, of a full sort — which gives the kept count K and the K-th
 * weight θ. Tokens above θ are kept and, of those tied at θ, the lowest ids (a stable descending sort's order).
 * Sorting ids by weight with a comparator in growing batches had cost ~4 ms a row on a flat distribution, whose
 * nucleus holds thousands of tokens; this costs two passes and a sort of about the nucleus.
 */
function applyTopP(w: Float64Array, p: number): void {
  const words = new Uint32Array(w.buffer, w.byteOffset, 2 * w.length);
  const { counts, mass } = HISTOGRAM;
  let n = 0, total = 0, minBin = TOP_P_BINS, maxBin = -1;
  for (let i = 0; i < w.length; i++) {
    const x = w[i]!;
    if (x > 0) {
      const b = words[2 * i + HIGH_WORD]! >>> 17;
      counts[b]!++;
      mass[b]! += x;
      n++;
      total += x;
      if (b < minBin) minBin = b;
      if (b > maxBin) maxBin = b;
    }
  }
  // from the largest bin down until p's mass (with room for the float sums' order), then one more non-empty bin
  const need = p * total * (1 + 1e-9);
  let low = maxBin + 1, acc = 0;
  while (low > minBin && acc < need) if (counts[--low]) acc += mass[low]!;
  while (low > minBin && !counts[--low]);
  // the shared histogram left empty for the next row (only the bins this row touched)
  counts.fill(0, minBin, maxBin + 1);
  mass.fill(0, minBin, maxBin + 1);
  const cut = topPCut(w, words, low, p, total, n);
  // keep every weight above θ and, of those equal to θ, the lowest ids until K are kept
  let greater = 0;
  for (let i = 0; i < w.length; i++) if (w[i]! > cut.theta) greater++;
  let ties = cut.kept - greater;
  for (let i = 0; i < w.length; i++) {
    const x = w[i]!;
    if (x > cut.theta) continue;
    if (x === cut.theta && ties > 0) { ties--; continue; }
    w[i] = 0;
  }
}

/** 2^14 bins: the sign bit (0), 11 exponent bits and 3 mantissa bits of a positive float64 */
const TOP_P_BINS = 1 << 14;
/**
 * One histogram for every row (sampling runs on the main thread, a row at a time), emptied after each use: 192 KB
 * allocated per row had slowed the other sampling rows of a step by ~20 % (the collector's work, same-run bench).
 */
const HISTOGRAM = { counts: new Int32Array(TOP_P_BINS), mass: new Float64Array(TOP_P_BINS) };
/** which 32-bit word of a float64 holds its sign and exponent (this machine's byte order) */
const HIGH_WORD = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 1 : 0;

/** K and θ from the weights in bins ≥ `low`, sorted largest first; all n weights if the cut is not found among them */
function topPCut(w: Float64Array, words: Uint32Array, low: number, p: number, total: number, n: number): { kept: number; theta: number } {
  for (;;) {
    let m = 0;
    for (let i = 0; i < w.length; i++) if (w[i]! > 0 && words[2 * i + HIGH_WORD]! >>> 17 >= low) m++;
    const top = new Float64Array(m);
    for (let i = 0, k = 0; i < w.length; i++) if (w[i]! > 0 && words[2 * i + HIGH_WORD]! >>> 17 >= low) top[k++] = w[i]!;
    top.sort().reverse();
    let above = 0, k = 0;
    for (; k < m; k++) {
      if (k > 0 && !(1 - above / total > 1 - p)) break;
      above += top[k]!;
    }
    if (k < m || m === n) return { kept: k, theta: top[k - 1]! };
    low = 0; // the float sums put the cut below the bins (the 1e-9 of room makes this unreachable in practice): all of them
  }
}
