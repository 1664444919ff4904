/**
 * Agent-output classification (refusal / valid harmful execution / invalid), shared by the steering sweep
 * (the paper's Table 3) and the guard evaluation, so both count outcomes by the same rules. Precedence rules: `classify.ts`.
 * Typical use: `classifyOutput(decodedText, pair.tools, callFormatOf[checkpoint.config.family])`.
 */
export type { CallFormat, CallCheck, MalformedCall, Outcome, OutcomeLabel, ParseResult, ParsedCall } from './types.ts';
export { callFormatOf } from './types.ts';
export { classifyOutput, classifyParsed, classifyResponse, type WireToolCall } from './classify.ts';
export { parseToolCalls, stripEndTokens, stripThinking } from './parse-calls.ts';
export { REFUSAL_SUBSTRINGS, REFUSAL_SUBSTRINGS_JBB, REFUSAL_SUBSTRINGS_EXTRA, findRefusalPhrases } from './refusal.ts';
export { degenerateReason } from './degenerate.ts';
