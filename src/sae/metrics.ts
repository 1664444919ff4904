/**
 * How well a dictionary reconstructs a model's stream, SAELens's evaluation quantities (sae_lens/evals.py):
 * - FVU, the fraction of variance unexplained: Σ|x − x̂|² / Σ|x − x̄|², x̄ the mean over the evaluated tokens;
 * - L0: active features (activation > 0) per token, averaged over tokens;
 * - dead share: the fraction of features active on no evaluated token;
 * - CE increase: mean next-token cross-entropy with the reconstruction spliced in, minus the clean model's; and, when
 *   the zero-ablated stream's CE is given, SAELens's CE loss score (CE_zero − CE_spliced) / (CE_zero − CE_clean), the
 *   share of the loss the reconstruction recovers.
 * Accumulated sequence by sequence (`SaeEvalTotals`), so any number of prompts fits in memory.
 */

export interface SaeEvalTotals {
  tokens: number;
  /** Σ|x − x̂|² */
  sse: number;
  /** Σx and Σ|x|² per input dimension: the variance about the mean over all tokens, without a second pass */
  sum: Float64Array;
  sumSq: number;
  /** Σ active features over tokens */
  active: number;
  /** [d_sae] whether the feature was active on some token */
  alive: Uint8Array;
  /** next-token predictions counted, and Σ CE clean / spliced */
  predictions: number;
  ceClean: number;
  ceSpliced: number;
  /** Σ CE with the stream at the hook set to 0 (NaN when not measured) */
  ceZero: number;
}

export function newTotals(dIn: number, dSae: number): SaeEvalTotals {
  return { tokens: 0, sse: 0, sum: new Float64Array(dIn), sumSq: 0, active: 0, alive: new Uint8Array(dSae), predictions: 0, ceClean: 0, ceSpliced: 0, ceZero: NaN };
}

/** Adds T tokens: x, recon [T, d_in], acts [T, d_sae]. */
export function addReconstruction(s: SaeEvalTotals, x: Float32Array, recon: Float32Array, acts: Float32Array, T: number): void {
  const dIn = s.sum.length;
  const dSae = s.alive.length;
  for (let i = 0; i < T * dIn; i++) {
    const e = x[i]! - recon[i]!;
    s.sse += e * e;
    s.sumSq += x[i]! * x[i]!;
    s.sum[i % dIn] = s.sum[i % dIn]! + x[i]!;
  }
  for (let t = 0; t < T; t++) {
    for (let j = 0; j < dSae; j++) {
      if (acts[t * dSae + j]! > 0) { s.active++; s.alive[j] = 1; }
    }
  }
  s.tokens += T;
}

/** Mean next-token cross-entropy terms of one sequence: Σ over t < T−1 of −log softmax(logits[t])[ids[t+1]]. */
export function nextTokenCe(logits: Float32Array, ids: readonly number[], vocab: number): { sum: number; n: number } {
  let sum = 0;
  for (let t = 0; t + 1 < ids.length; t++) {
    const row = logits.subarray(t * vocab, (t + 1) * vocab);
    let m = -Infinity;
    for (let v = 0; v < vocab; v++) if (row[v]! > m) m = row[v]!;
    let z = 0;
    for (let v = 0; v < vocab; v++) z += Math.exp(row[v]! - m);
    sum += m + Math.log(z) - row[ids[t + 1]!]!;
  }
  return { sum, n: Math.max(0, ids.length - 1) };
}

export function addCe(s: SaeEvalTotals, clean: { sum: number; n: number }, spliced: { sum: number; n: number }, zero?: { sum: number; n: number }): void {
  s.predictions += clean.n;
  s.ceClean += clean.sum;
  s.ceSpliced += spliced.sum;
  if (zero) s.ceZero = (Number.isNaN(s.ceZero) ? 0 : s.ceZero) + zero.sum;
}

export interface SaeEvalSummary {
  tokens: number;
  fvu: number;
  l0: number;
  deadShare: number;
  ceClean: number;
  ceSpliced: number;
  ceIncrease: number;
  /** NaN without zero-ablation figures */
  ceZero: number;
  /** (CE_zero − CE_spliced) / (CE_zero − CE_clean); NaN without them */
  ceLossScore: number;
}

export function summarize(s: SaeEvalTotals): SaeEvalSummary {
  let meanSq = 0;
  for (const v of s.sum) meanSq += v * v;
  const variance = s.sumSq - meanSq / Math.max(1, s.tokens);
  const dead = s.alive.reduce((a, v) => a + (v ? 0 : 1), 0);
  const ceClean = s.ceClean / Math.max(1, s.predictions);
  const ceSpliced = s.ceSpliced / Math.max(1, s.predictions);
  const ceZero = s.ceZero / Math.max(1, s.predictions);
  return {
    ceZero, ceLossScore: (ceZero - ceSpliced) / (ceZero - ceClean),
    tokens: s.tokens, fvu: variance > 0 ? s.sse / variance : NaN, l0: s.active / Math.max(1, s.tokens),
    deadShare: dead / s.alive.length, ceClean, ceSpliced, ceIncrease: ceSpliced - ceClean,
  };
}
