/**
 * HF's sampling warpers, in HF's order (process.ts): temperature, top-k, top-p, min-p — transformers'
 * TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper with their defaults (filter value −∞,
 * min_tokens_to_keep 1). Each edits `z` ([vocab] logits, Float64) in place; a filtered token's logit becomes −∞, so
 * its probability is exactly 0. They run only when the row samples: with greedy decoding they cannot change the
 * argmax (top-k / top-p / min-p always keep the most likely token).
 *
 * Cost: top-k and top-p select instead of sorting the vocabulary (select.ts): a 150k vocabulary is sorted only as far
 * as the kept set reaches.
 */
import { largest, topIndices } from './select.ts';
import { softmax } from './softmax.ts';

export function applyTemperature(z: Float64Array, temperature: number): void {
  for (let i = 0; i < z.length; i++) z[i]! /= temperature;
}

/**
 * Keep the k largest logits: every token below the k-th largest value is filtered (tokens tied with it are kept, as
 * HF's `scores < topk(scores, k)[-1]` keeps them).
 */
export function applyTopK(z: Float64Array, k: number): void {
  if (k >= z.length) return;
  const threshold = largest(z, Math.max(1, k));
  for (let i = 0; i < z.length; i++) if (z[i]! < threshold) z[i] = -Infinity;
}

/**
 * HF's top-p: sort ascending, remove every token whose cumulative probability (itself and all less likely ones) is
 * at most 1 − p, keep the most likely one always. Equivalently, from the most likely down, a token is kept while the
 * probability of the tokens above it is below p. p = 0 keeps only the most likely token; p = 1 keeps every token.
 */
export function applyTopP(z: Float64Array, p: number): void {
  const probs = softmax(z);
  const keep = new Uint8Array(z.length);
  // take the most likely tokens in growing batches until the kept mass reaches p
  let m = Math.min(z.length, 64);
  for (;;) {
    const order = topIndices(probs, m);
    let above = 0, k = 0;
    for (; k < order.length; k++) {
      if (k > 0 && !(1 - above > 1 - p)) break;
      keep[order[k]!] = 1;
      above += probs[order[k]!]!;
    }
    if (k < order.length || m === z.length) break;
    keep.fill(0);
    m = Math.min(z.length, m * 4);
  }
  for (let i = 0; i < z.length; i++) if (!keep[i]) z[i] = -Infinity;
}

/** HF's min-p: remove every token whose probability is below min_p × the most likely token's probability. */
export function applyMinP(z: Float64Array, minP: number): void {
  const probs = softmax(z);
  let top = 0;
  for (let i = 0; i < probs.length; i++) if (probs[i]! > top) top = probs[i]!;
  const threshold = minP * top;
  for (let i = 0; i < z.length; i++) if (probs[i]! < threshold) z[i] = -Infinity;
}
