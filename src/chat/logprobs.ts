/**
 * The engine's per-token log probabilities as OpenAI's chat `logprobs.content` entries: the backend's part of a
 * research reply (the server shapes them for its API).
 */
import type { TokenLogprob } from '../engine/types.ts';
import type { OpenAiLogprob } from './types.ts';

/** The engine's per-token log probabilities in OpenAI's `logprobs.content` shape (token text and its UTF-8 bytes). */
export function openAiLogprobs(list: readonly TokenLogprob[], text: (id: number) => string): OpenAiLogprob[] {
  const entry = (id: number, logprob: number) => {
    const token = text(id);
    return { token, logprob, bytes: [...Buffer.from(token, 'utf8')] };
  };
  return list.map((t) => ({ ...entry(t.token, t.logprob), top_logprobs: t.top.map((x) => entry(x.token, x.logprob)) }));
}
