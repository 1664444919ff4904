/**
 * Prompt length against the model's context, decided before any generation and cheaply: a prompt far beyond the
 * context is refused after encoding about one context's worth of it, not all of it.
 */

/**
 * Tokens of `text`, counting stopped once more than `limit` are seen: chunks of about `charsPerChunk` characters,
 * cut at a whitespace boundary where one is near (byte-level BPE does not merge across a pre-token boundary, so
 * the chunks' counts add up to the whole's, off by at most one token per forced cut).
 * @returns `{tokens, exact}`: exact = the whole text was encoded.
 */
export function countTokensUpTo(text: string, encodeLength: (s: string) => number, limit: number, charsPerChunk = Math.max(4096, limit * 8)): { tokens: number; exact: boolean } {
  if (text.length <= charsPerChunk) return { tokens: encodeLength(text), exact: true };
  let tokens = 0;
  let at = 0;
  while (at < text.length) {
    let end = Math.min(text.length, at + charsPerChunk);
    if (end < text.length) {
      // a space that starts a word: the pre-tokenizer begins a new piece there
      const ws = text.lastIndexOf(' ', end);
      if (ws > at + charsPerChunk / 2 && !/\s/.test(text[ws - 1] ?? '')) end = ws;
    }
    tokens += encodeLength(text.slice(at, end));
    at = end;
    if (tokens > limit && at < text.length) return { tokens, exact: false };
  }
  return { tokens, exact: true };
}

/** vLLM's and OpenAI's wording, which clients match on. */
export function contextLengthMessage(contextLength: number, promptTokens: number, completionTokens: number, exact = true): string {
  const p = exact ? `${promptTokens}` : `more than ${promptTokens - 1}`;
  const total = exact ? `${promptTokens + completionTokens}` : `more than ${promptTokens + completionTokens - 1}`;
  return `This model's maximum context length is ${contextLength} tokens. However, you requested ${total} tokens (${p} in the messages, ${completionTokens} in the completion). Please reduce the length of the messages or completion.`;
}
