/**
 * The per-sample log every evaluation writes (JSONL): a header line naming the task, its protocol and its
 * identity, then one line per sample — the messages each model call saw, its tool calls and raw answer, tokens and
 * latency, the solver (method / configuration / condition), every score with its scorer, and the evaluation's own
 * row. Tables are computed from these lines, so a rescoring (`safekeep rescore`) needs no model.
 *
 *   {"format":"safekeep-log","task":"guard-eval/agentharm","protocol":{...},"context":{...}}
 *   {"format":"safekeep-sample","id":"safekeep × harmful/1-1","sample":"harmful/1-1","solver":"safekeep",...}
 */
import { existsSync, readFileSync } from 'node:fs';
import { writeFileAtomic } from '../util/atomic.ts';
import { SafekeepError } from '../util/errors.ts';
import { parseJsonBounded } from '../util/json-bounded.ts';
import type { ChatReply } from '../chat/types.ts';

/** One model call of a sample, as the system under test made it: what it was asked, then the reply as it came. */
export interface CallLog extends ChatReply {
  purpose: string;
  /** the conversation the call saw (role + content; tool calls of earlier turns included) */
  messages: ReadonlyArray<Record<string, unknown>>;
  /** names of the tools offered (their specs are the data set's) */
  tools: string[];
  /** the assistant prefix the reply continued (refusals) */
  prefix?: string;
}

/** One score of a sample: which scorer gave it, its value, and what it read. */
export interface Score {
  scorer: string;
  /** e.g. 'refusal' | 'valid' | 'invalid', or true/false, or a number */
  value: string | number | boolean | null;
  /** the scorer's reasons or the raw judge answer */
  explanation?: string;
}

/** A work item's key in the log, `<solver> × <sample>`: what the tasks write and what merge expects of the shards. */
export const sampleId = (solver: string, sample: string): string => `${solver} × ${sample}`;

export interface SampleLog<R = unknown> {
  format: 'safekeep-sample';
  /** the work item's key (unique in the task): `<solver> × <sample>` */
  id: string;
  sample: string;
  solver: string;
  calls: CallLog[];
  scores: Score[];
  /** the final output the scorers read */
  output: string;
  tokens: { prompt: number; completion: number };
  latencyMs: number;
  /** the evaluation's row (what its tables are computed from) */
  row: R;
}

export interface LogHeader {
  format: 'safekeep-log';
  /** e.g. guard-eval/agentharm, s3-eval/mixed, steer/harmful, behavioural */
  task: string;
  /** the protocol values of the run (docs/protocol.md) */
  protocol: Record<string, unknown>;
  /** what a rescoring needs to rebuild the samples' context (data folders, options) */
  context: Record<string, unknown>;
}

export interface EvalLog<R = unknown> {
  header: LogHeader;
  samples: SampleLog<R>[];
}

/** Writes the log atomically: header, then samples in item order. */
export function writeEvalLog<R>(path: string, log: EvalLog<R>): void {
  writeFileAtomic(path, [log.header, ...log.samples].map((x) => JSON.stringify(x)).join('\n') + '\n');
}

/** Depth of a sample line: messages → tool calls → arguments, plus the evaluation's rows (trajectories). */
const MAX_DEPTH = 64;

export function readEvalLog<R = unknown>(path: string): EvalLog<R> {
  if (!existsSync(path)) throw new SafekeepError(`${path}: no such log`);
  const lines = readFileSync(path, 'utf8').split('\n').filter(Boolean);
  const head = lines.length ? parseJsonBounded(lines[0]!, `${path}:1`, MAX_DEPTH) as Partial<LogHeader> | null : null;
  if (!head || head.format !== 'safekeep-log' || typeof head.task !== 'string') throw new SafekeepError(`${path}: not a safekeep evaluation log (no safekeep-log header line)`);
  const samples = lines.slice(1).map((l, i) => {
    const s = parseJsonBounded(l, `${path}:${i + 2}`, MAX_DEPTH) as Partial<SampleLog<R>> | null;
    if (!s || s.format !== 'safekeep-sample' || typeof s.id !== 'string' || !Array.isArray(s.scores)) throw new SafekeepError(`${path}:${i + 2}: not a sample line`);
    return s as SampleLog<R>;
  });
  return { header: { format: 'safekeep-log', task: head.task, protocol: head.protocol ?? {}, context: head.context ?? {} }, samples };
}

/** Sum of the calls' tokens and latencies. */
export function callTotals(calls: readonly CallLog[]): { tokens: { prompt: number; completion: number }; latencyMs: number } {
  return {
    tokens: { prompt: calls.reduce((a, c) => a + c.promptTokens, 0), completion: calls.reduce((a, c) => a + c.completionTokens, 0) },
    latencyMs: calls.reduce((a, c) => a + c.latencyMs, 0),
  };
}
