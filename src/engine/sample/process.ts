/**
 * One row's logits processed as its settings say, in one fixed order (the fixtures of
 * scripts/hf-fixtures/sampling.py build the same list from transformers' own processors):
 *
 *   1. logit_bias                         (OpenAI; HF's SequenceBiasLogitsProcessor with one-token sequences)
 *   2. frequency / presence penalties     (OpenAI, as vLLM computes them: generated tokens only)
 *   3. repetition penalty                 (HF; prompt and generated ids)
 *   4. temperature, top-k, top-p, min-p   (HF's warpers in HF's order; only when the row samples)
 *
 * HF's `generate` has no 1–2 and vLLM applies the repetition penalty before 2 and min-p before top-k/top-p; this is
 * HF's order with OpenAI's fields put first, as the OpenAI API applies a bias to the raw logits.
 */
import { applyLogitBias, applyOpenAiPenalties, applyRepetitionPenalty, type TokenHistory } from './penalties.ts';
import { hasPenalties, isGreedy, type SamplingSettings } from './settings.ts';
import { applyMinP, applyTemperature, applyTopK, applyTopP } from './warpers.ts';

/** steps 1–3 on `z` in place (what greedy rows apply too) */
export function penalise(z: Float64Array, s: SamplingSettings, h: TokenHistory): void {
  if (s.logitBias) applyLogitBias(z, s.logitBias);
  if (s.frequencyPenalty || s.presencePenalty) applyOpenAiPenalties(z, h.generatedCounts, s.frequencyPenalty ?? 0, s.presencePenalty ?? 0);
  if (s.repetitionPenalty !== undefined && s.repetitionPenalty !== 1) applyRepetitionPenalty(z, h.seen, s.repetitionPenalty);
}

/** step 4 on `z` in place (a sampling row only: temperature > 0) */
export function warp(z: Float64Array, s: SamplingSettings): void {
  if (s.temperature !== 1) applyTemperature(z, s.temperature!);
  if (s.topK) applyTopK(z, s.topK);
  if (s.topP !== undefined && s.topP < 1) applyTopP(z, s.topP);
  if (s.minP) applyMinP(z, s.minP);
}

/**
 * The processed logits of one row ([vocab], Float64; filtered tokens −∞): what the row's token is drawn from
 * (softmax), or, for a greedy row, its argmax.
 */
export function processLogits(logits: ArrayLike<number>, s: SamplingSettings, h: TokenHistory): Float64Array {
  const z = Float64Array.from(logits);
  if (hasPenalties(s)) penalise(z, s, h);
  if (!isGreedy(s)) warp(z, s);
  return z;
}
