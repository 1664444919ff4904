/**
 * A call's sampling at the chat layer: how an endpoint is asked for it (the OpenAI body fields, with vLLM's extras),
 * and a backend whose agent calls all sample with one setting (`guard eval` / `s3 eval --temperature …`: the agent
 * under test samples, its judge stays greedy — a verdict must not vary from one run to the next).
 */
import type { SamplingSettings } from '../engine/types.ts';
import type { ChatBackend } from './types.ts';

/**
 * The body fields of a call's sampling: `temperature: 0` (greedy, what every call sent before sampling existed)
 * without settings; else OpenAI's fields and vLLM's extras (top_k, min_p, repetition_penalty), each only when set.
 */
export function samplingBody(s: SamplingSettings | undefined): Record<string, unknown> {
  if (!s) return { temperature: 0 };
  const b: Record<string, unknown> = { temperature: s.temperature ?? 0 };
  if (s.topP !== undefined) b.top_p = s.topP;
  if (s.topK) b.top_k = s.topK;
  if (s.minP) b.min_p = s.minP;
  if (s.repetitionPenalty !== undefined) b.repetition_penalty = s.repetitionPenalty;
  if (s.frequencyPenalty) b.frequency_penalty = s.frequencyPenalty;
  if (s.presencePenalty) b.presence_penalty = s.presencePenalty;
  if (s.logitBias && Object.keys(s.logitBias).length) b.logit_bias = s.logitBias;
  if (s.seed !== undefined) b.seed = s.seed;
  return b;
}

/** `b` with `sampling` on every agent call (judge and refusal calls unchanged); `b` itself without settings */
export function withAgentSampling(b: ChatBackend, sampling: SamplingSettings | undefined): ChatBackend {
  if (!sampling) return b;
  return {
    name: b.name, callFormat: b.callFormat, ...(b.activations !== undefined ? { activations: b.activations } : {}),
    chat: (c) => b.chat(c.purpose === 'agent' && !c.sampling ? { ...c, sampling } : c),
  };
}
