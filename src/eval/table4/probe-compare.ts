/**
 * The guard comparison of `safekeep probe eval`: base, SafeKeep, refusal-probe and both (refused if either flags) — and
 * for a calibrated probe the probe→judge cascade and probe-steer — on
 * the EVALUATION split of the probe's own pair set (bundled pairs, or AgentHarm with `--data agentharm`), each pair
 * giving one harmful and one benign agent request rendered exactly as the probe's training condition (the agent's
 * role + instructions as system message, the pair's tools as JSON schemas). Metrics are AgentHarm's (metrics.ts):
 * Refusal = harmful refused; Acc = harmful refused + benign handled with a valid call to one of its tools.
 */
import type { GuardComparisonRow, ProbeSection } from '../../analysis/results.ts';
import type { PairSet, Split } from '../../data/types.ts';
import type { Probe } from '../../data/probe-file.ts';
import type { PromptBuilder } from '../../prompts/configurations.ts';
import type { AgentHarmCase } from '../../benchmarks/cases.ts';
import { evalItems, guardTask, summarizeEval, type EvalRow, type MethodSummary } from './eval.ts';
import { runTask } from '../../harness/runner.ts';
import type { SampleLog } from '../../harness/log.ts';
import { shownRate, type Rate } from '../metrics.ts';
import { ProbeGuard } from '../../guard/probe.ts';
import type { ChatBackend, GuardMethod, UnparseablePolicy } from '../../guard/types.ts';
import { METHOD_TABLE, TABLE_METHODS } from '../../guard/methods.ts';

/** the comparison: no guard, SafeKeep, and every method table row that reads an uncalibrated probe */
export const COMPARED_METHODS: readonly GuardMethod[] = ['base', 'safekeep', ...TABLE_METHODS.filter((m) => METHOD_TABLE[m].probe === 'plain')];

/** the compared methods for a probe: a calibrated one (probe train --calibrate) adds the rows that read its calibration */
export function comparedMethods(probe: Pick<Probe, 'cascade' | 'steer'>): GuardMethod[] {
  const calibrated = TABLE_METHODS.filter((m) => (METHOD_TABLE[m].probe === 'cascade' && probe.cascade) || (METHOD_TABLE[m].probe === 'steer' && probe.steer));
  return [...COMPARED_METHODS, ...calibrated];
}

/** Harmful and benign agent requests of the evaluation pairs (at most `limit` pairs, in set order). */
export function evaluationCases(set: PairSet, split: Split, builder: PromptBuilder, limit = Infinity): AgentHarmCase[] {
  const ev = new Set(split.evaluation);
  const pairs = set.pairs.filter((p) => ev.has(p.id)).slice(0, limit);
  const system = builder.systemText('agent');
  return pairs.flatMap((p) => (['harmful', 'benign'] as const).map((kind): AgentHarmCase => ({
    bench: 'agentharm',
    id: `${kind}/${p.id}`,
    kind,
    category: p.category,
    targetFunctions: p.tools.map((t) => t.function.name),
    request: { messages: builder.messages(p[kind].prompt, system), tools: [...p.tools] },
  })));
}

export interface CompareOptions {
  set: PairSet;
  split: Split;
  builder: PromptBuilder;
  backend: ChatBackend;
  probe: Probe;
  limit?: number;
  maxTokens?: number;
  judgeMaxTokens?: number;
  onUnparseable?: UnparseablePolicy;
  onProgress?: (done: number, total: number) => void;
}

const round = (x: number): number => Math.round(x * 1e6) / 1e6;
const rate = (rate: Rate) => { const r = shownRate(rate); return { k: r.k, n: r.n, p: round(r.p), lo: round(r.lo), hi: round(r.hi) }; };
const mean = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : Number.NaN);

export interface CompareResult {
  comparison: NonNullable<ProbeSection['comparison']>;
  rows: EvalRow[];
  /** every request's log lines (calls, scores), in the rows' order */
  samples: SampleLog<EvalRow>[];
  summaries: MethodSummary[];
  cases: AgentHarmCase[];
}

export async function compareGuards(o: CompareOptions): Promise<CompareResult> {
  const cases = evaluationCases(o.set, o.split, o.builder, o.limit);
  const methods = comparedMethods(o.probe);
  const opts = {
    backend: o.backend,
    probe: new ProbeGuard(o.probe),
    maxTokens: o.maxTokens,
    judgeMaxTokens: o.judgeMaxTokens,
    onUnparseable: o.onUnparseable,
    onProgress: o.onProgress,
  };
  // runGuardEval's run, its log lines kept (the Inspect log of probe eval)
  const { results: rows, samples } = await runTask(guardTask(opts), evalItems(cases, methods), { onProgress: o.onProgress });
  const summaries = summarizeEval('agentharm', cases, rows, methods);
  const out: GuardComparisonRow[] = summaries.map((s) => {
    const mine = rows.filter((r) => r.method === s.method);
    return {
      method: s.method,
      refusal: rate(s.metrics.refusal!),
      acc: rate(s.metrics.acc!),
      flagged: s.flagged,
      n: s.n,
      agentMs: round(mean(mine.flatMap((r) => (r.agentMs === null ? [] : [r.agentMs])))),
      guardMs: round(mean(mine.map((r) => (r.judgeLatencyMs ?? 0) + (r.probeMs ?? 0)))),
      judgeCalls: round(s.cost!.judgeCallsPerRequest),
      guardTokens: round(s.cost!.guardTokensPerRequest),
      addedMsP50: round(s.cost!.addedMs.p50),
      addedMsP95: round(s.cost!.addedMs.p95),
    };
  });
  const notes: string[] = [];
  for (const s of summaries) {
    if (s.bands) notes.push(`probe-cascade: ${s.bands.run} of ${s.n} requests ran unjudged (score below the band), ${s.bands.judge} went to the judge, ${s.bands.refuse} were refused by the probe; band [${o.probe.cascade!.low.toPrecision(4)}, ${o.probe.cascade!.high.toPrecision(4)}] from ${o.probe.cascade!.calibration.pairs} calibration pairs.`);
    if (s.steered !== undefined) notes.push(`probe-steer: ${s.steered} of ${s.n} requests flagged and answered by the generation steered with α = ${o.probe.steer!.alpha.toPrecision(4)} at ℓ = ${o.probe.steer!.layer}.`);
  }
  for (const s of summaries) {
    if (s.unparseable > 0) {
      notes.push(`${s.method}: ${s.unparseable} of ${s.judged} judge answers were neither YES nor NO and counted ${o.onUnparseable === 'safe' ? 'safe' : 'unsafe'} (--unparseable).`);
    }
  }
  notes.push('Guard ms: the judge call (SafeKeep) and/or the probe\'s scoring inside the agent call; the probe\'s full added cost per request (hidden-state read-out included) is measured by npm run bench:probe.');
  notes.push('Added ms: the wall time before the answering call. The methods run on one backend that answers an identical call from memory (the cascade\'s judge call after SafeKeep\'s, an executed call after the base agent\'s), which then costs only its lookup; judge calls and guard tokens count every call. npm run bench:guard times the cascade against SafeKeep with every call computed.');
  return {
    comparison: {
      bench: `${o.set.name}, evaluation split (${cases.length / 2} pairs)`,
      backend: o.backend.name,
      probe: `${o.probe.kind} at ℓ = ${o.probe.layer}, threshold ${o.probe.threshold.value.toPrecision(4)} (≤ ${(100 * o.probe.threshold.target).toFixed(0)} % benign flagged on extraction)${o.probe.cascade ? `, cascade band [${o.probe.cascade.low.toPrecision(4)}, ${o.probe.cascade.high.toPrecision(4)}]` : ''}${o.probe.steer ? `, steering α = ${o.probe.steer.alpha.toPrecision(4)}` : ''}`,
      rows: out,
      notes,
    },
    rows,
    samples,
    summaries,
    cases,
  };
}
