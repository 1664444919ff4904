/**
 * HF's sampling warpers, in HF's order: temperature, top-k, top-p, min-p — transformers' TemperatureLogitsWarper,
 * TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper with their defaults (filter value −∞, min_tokens_to_keep 1) —
 * computed on weights instead of logits: w_i = exp((z_i − max z) / T), a filtered token's weight 0, so that the one
 * pass of exp a distribution costs is also all the warpers need (each HF warper that reads probabilities takes its own
 * softmax). The filters commute with the normalisation: top-p's cumulative sums and min-p's threshold on w / Σw are
 * HF's on the softmax of the filtered logits. The most likely token is never filtered, so max w = 1 throughout.
 *
 * Cost: top-k selects its threshold on the logits (select.ts, O(V) comparisons) and takes exp of the k kept tokens
 * only; min-p without top-p skips the exp of every token it will filter; top-p sorts only as far as the kept set reaches.
 */
import { largest, topIndices } from './select.ts';

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
  if (topP !== null) applyTopP(w, topP, select);
  if (s.minP) for (let i = 0; i < V; i++) if (w[i]! < s.minP) w[i] = 0;
  return w;
}

/**
 * HF's top-p on weights: sorted ascending, a token whose cumulative probability (itself and every less likely token)
 * is at most 1 − p is removed, the most likely always kept. From the most likely down: a token is kept while
 * 1 − (mass above it) > 1 − p. p = 0 keeps the most likely token only.
 */
function applyTopP(w: Float64Array, p: number, select?: Float64Array): void {
  // the tokens still in (top-k may have left few): compacted, so the selections below scan only them
  let n = 0, total = 0;
  for (let i = 0; i < w.length; i++) if (w[i]! > 0) { n++; total += w[i]!; }
  const ids = new Int32Array(n), vals = new Float64Array(n);
  for (let i = 0, k = 0; i < w.length; i++) if (w[i]! > 0) { ids[k] = i; vals[k++] = w[i]!; }
  const keep = new Uint8Array(n);
  // the most likely tokens in growing batches until the kept mass reaches p
  for (let m = Math.min(n, 64); ; m = Math.min(n, m * 4)) {
    const order = topIndices(vals, m, n === w.length ? select : undefined);
    let above = 0, k = 0;
    for (; k < order.length; k++) {
      if (k > 0 && !(1 - above / total > 1 - p)) break;
      keep[order[k]!] = 1;
      above += vals[order[k]!]!;
    }
    if (k < order.length || m === n) break;
    keep.fill(0);
  }
  for (let k = 0; k < n; k++) if (!keep[k]) w[ids[k]!] = 0;
}
