/**
 * One row's logits processed as its settings say, in one fixed order (the fixtures of
 * scripts/hf-fixtures/sampling.py build the same list from transformers' own processors):
 *
 *   1. logit_bias                         (OpenAI; HF's SequenceBiasLogitsProcessor with one-token sequences)
 *   2. frequency / presence penalties     (OpenAI, as vLLM computes them: generated tokens only)
 *   3. repetition penalty                 (HF; prompt and generated ids)
 *   4. temperature, top-k, top-p, min-p   (HF's warpers in HF's order; only when the row samples: warpers.ts)
 *
 * HF's `generate` has no 1–2 and vLLM applies the repetition penalty before 2 and min-p before top-k/top-p; this is
 * HF's order with OpenAI's fields put first, as the OpenAI API applies a bias to the raw logits.
 */
import { applyLogitBias, applyOpenAiPenalties, applyRepetitionPenalty, type TokenHistory } from './penalties.ts';
import { hasPenalties, type SamplingSettings } from './settings.ts';
import { warpedWeights } from './warpers.ts';

/** steps 1–3 on `z` ([vocab]) in place: what greedy rows apply too */
export function penalise(z: Float64Array, s: SamplingSettings, h: TokenHistory): void {
  if (s.logitBias) applyLogitBias(z, s.logitBias);
  if (s.frequencyPenalty || s.presencePenalty) applyOpenAiPenalties(z, h.generatedCounts, s.frequencyPenalty ?? 0, s.presencePenalty ?? 0);
  if (s.repetitionPenalty !== undefined && s.repetitionPenalty !== 1) applyRepetitionPenalty(z, h.seen, s.repetitionPenalty);
}

/** Buffers a row reuses from step to step ([vocab] each), so a decode step allocates nothing per row. */
export interface SampleScratch { z: Float64Array; w: Float64Array; select: Float64Array }

export function sampleScratch(vocab: number): SampleScratch {
  return { z: new Float64Array(vocab), w: new Float64Array(vocab), select: new Float64Array(vocab) };
}

/** the penalised logits of one row ([vocab], Float64; in `scratch.z` when given): a greedy row's argmax is its token */
export function penalisedLogits(logits: ArrayLike<number>, s: SamplingSettings, h: TokenHistory, scratch?: SampleScratch): Float64Array {
  const z = scratch?.z.length === logits.length ? scratch.z : new Float64Array(logits.length);
  z.set(logits); // (not `new Float64Array(float32Row)`: V8 converts that element by element, ~50× slower)
  if (hasPenalties(s)) penalise(z, s, h);
  return z;
}

/**
 * A sampling row's weights ([vocab], ≥ 0, filtered tokens 0): its token is drawn with probability w_i / Σw.
 * `s.temperature` must be above 0.
 */
export function sampleWeights(logits: ArrayLike<number>, s: SamplingSettings, h: TokenHistory, scratch?: SampleScratch): Float64Array {
  return warpedWeights(penalisedLogits(logits, s, h, scratch), { temperature: s.temperature!, topK: s.topK, topP: s.topP, minP: s.minP }, scratch);
}

/** the processed distribution itself (w / Σw): what the fixtures compare */
export function sampleDistribution(logits: ArrayLike<number>, s: SamplingSettings, h: TokenHistory): Float64Array {
  const w = sampleWeights(logits, s, h);
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  for (let i = 0; i < w.length; i++) w[i]! /= total;
  return w;
}
