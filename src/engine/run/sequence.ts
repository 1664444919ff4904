/**
 * One sequence of the scheduler and the decode batch it joins. A sequence is its request (prompt, new tokens, what
 * to return), its edits (row-edits.ts), its capture recorder (capture-recorder.ts), its token choice
 * (next-token.ts) and its prefill's KV state (owned by kv-manager.ts); the scheduler moves it between its queues,
 * the step runner fills its result.
 */
import type { KvCache } from '../runtime/kv.ts';
import type { CaptureRecorder } from './capture-recorder.ts';
import type { NextToken } from './next-token.ts';
import type { DecodeSets, RowEdits } from './row-edits.ts';
import type { GenerateResult } from './types.ts';

/** A sequence's prompt KV while it prefills (kv-manager.ts reads and writes it; batch 1). */
export interface PrefillKv {
  /** the prefill's KV (batch 1) while prefilling */
  kv: KvCache | null;
  /** prompt tokens in kv */
  filled: number;
  /** prefix-cache keys of the prompt's full blocks (null until the prefill starts, or without a cache) */
  chain: string[] | null;
  /** the same keys, computed once (before the prefill starts when a pack looks at the sequence) */
  keys: string[] | null;
  /** full blocks already in the store */
  stored: number;
}

export interface Seq {
  ids: number[];
  maxNew: number;
  wantFirstHidden: boolean;
  wantPromptHidden: boolean;
  keepPromptHidden: boolean;
  halt: ((h: Float32Array) => boolean) | undefined;
  signal: AbortSignal | undefined;
  edits: RowEdits;
  capture: CaptureRecorder;
  next: NextToken;
  prefill: PrefillKv;
  result: GenerateResult;
  resolve: (r: GenerateResult) => void;
  reject: (e: unknown) => void;
}

/** whether a decode step must still run a finished row (for its first generated token's hidden state) */
export const awaitsFirstHidden = (q: Seq): boolean => q.wantFirstHidden && !q.result.firstTokenHidden;

/** A decode batch: the running sequences that share a graph (no hook edits, or edits at the same hook points). */
export interface Group {
  /** '' for the plain graph, else the hook selection's key (graph/hooks.ts hookSelectionKey) */
  key: string;
  /** row b's sequence (row b of the KV manager's decode buffer for this group) */
  seqs: Seq[];
  /** the decode sets of the last step and the rows they were built for (rebuilt when rows change) */
  rowSets: { seqs: Seq[]; sets: DecodeSets } | null;
}
