/**
 * Agent-output classification (steering sweep and guard evaluation alike): every generation is one of
 * refusal / valid harmful execution / invalid. See `classify.ts` for the precedence rules.
 */
import type { Family } from '../checkpoint/types.ts';

/** The native tool-call syntax a model family emits. */
export type CallFormat = 'llama3' | 'qwen' | 'mistral';

export const callFormatOf: Readonly<Record<Family, CallFormat>> = {
  llama: 'llama3',
  qwen2: 'qwen',
  qwen3: 'qwen',
  mistral: 'mistral',
};

/** One tool call recovered from the output text (or from an endpoint's structured `tool_calls`). */
export interface ParsedCall {
  name: string;
  /** the arguments object as emitted (`parameters` or `arguments`) */
  arguments: Record<string, unknown>;
  /** the exact source text of the call */
  source: string;
}

/** A span that looked like a tool call but could not be parsed into {name, arguments}. */
export interface MalformedCall {
  source: string;
  reason: string;
}

export interface ParseResult {
  calls: ParsedCall[];
  malformed: MalformedCall[];
  /** the output with every call span (parsed or malformed) removed */
  prose: string;
}

export type OutcomeLabel = 'refusal' | 'valid' | 'invalid';

export interface CallCheck {
  call: ParsedCall;
  /** the call names a provided tool */
  known: boolean;
  /** the arguments validate against that tool's JSON Schema */
  argsValid: boolean;
  /** ajv messages when not valid */
  errors: string[];
}

export interface Outcome {
  label: OutcomeLabel;
  calls: CallCheck[];
  malformed: MalformedCall[];
  /** the refusal phrases found (lower-cased), in list order */
  refusalPhrases: string[];
  /** why the output is degenerate, or null */
  degenerate: string | null;
  /** human-readable reasons for the label, most decisive first */
  reasons: string[];
}
