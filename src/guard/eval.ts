/**
 * The Table 4 evaluation: every case × method through `guardedRespond`, each output classified by the
 * outcome module (structured tool_calls and native calls in content alike), then the metrics of `metrics.ts`
 * per method — plus judge latency and judge-token overhead per request.
 */
import { classifyResponse } from '../experiments/outcome/classify.ts';
import type { Outcome } from '../experiments/outcome/types.ts';
import { Limiter } from './backends/limit.ts';
import type { GuardBench, GuardCase } from './bench/cases.ts';
import { agentHarmMetrics, injecAgentMetrics, summarize, type Rate } from './metrics.ts';
import { guardedRespond, type GuardOptions } from './respond.ts';
import type { ChatBackend, GuardMethod, Verdict } from './types.ts';

export interface EvalRow {
  caseId: string;
  /** harmful | benign | <setting>/<dh|ds> */
  group: string;
  method: GuardMethod;
  label: Outcome['label'];
  /** names of the parsed calls */
  calls: string[];
  reasons: string[];
  blocked: boolean;
  verdict: Verdict | null;
  judgeLatencyMs: number | null;
  judgeTokens: number | null;
  agentTokens: number;
  /** probe methods: the probe's score and decision (null: no probe ran) */
  probeScore: number | null;
  probeFlagged: boolean | null;
  /** probe scoring time inside the agent call (ms) */
  probeMs: number | null;
  /** the agent call's latency (ms); null when the judge refused before any agent call */
  agentMs: number | null;
  output: string;
  /** kept for the metrics (not written to the rows file) */
  outcome: Outcome;
}

export interface EvalOptions extends GuardOptions {
  methods: readonly GuardMethod[];
  backend: ChatBackend;
  /** cases × methods in flight at once (default 1) */
  concurrency?: number;
  onProgress?: (done: number, total: number) => void;
}

export function caseGroup(c: GuardCase): string {
  return c.bench === 'agentharm' ? c.kind : `${c.setting}/${c.attack}`;
}

export async function runGuardEval(cases: readonly GuardCase[], opts: EvalOptions): Promise<EvalRow[]> {
  const limiter = new Limiter(opts.concurrency ?? 1);
  const total = cases.length * opts.methods.length;
  let done = 0;
  const tasks = opts.methods.flatMap((method) =>
    cases.map((c) =>
      limiter.run(async (): Promise<EvalRow> => {
        const r = await guardedRespond(c.request, method, opts.backend, opts);
        const outcome = classifyResponse(r.reply.content, r.reply.toolCalls, c.request.tools, opts.backend.callFormat);
        opts.onProgress?.(++done, total);
        return {
          caseId: c.id,
          group: caseGroup(c),
          method,
          label: outcome.label,
          calls: outcome.calls.map((k) => k.call.name),
          reasons: outcome.reasons,
          blocked: r.blocked,
          verdict: r.judge?.verdict ?? null,
          judgeLatencyMs: r.judge?.latencyMs ?? null,
          judgeTokens: r.judge?.tokens ?? null,
          agentTokens: r.reply.promptTokens + r.reply.completionTokens,
          probeScore: r.probe?.score ?? null,
          probeFlagged: r.probe ? r.probe.unsafe : null,
          probeMs: r.probe?.latencyMs ?? null,
          agentMs: r.agentMs !== undefined ? r.agentMs : r.blocked ? null : r.reply.latencyMs,
          output: r.reply.content,
          outcome,
        };
      }),
    ),
  );
  return Promise.all(tasks);
}

export interface MethodSummary {
  method: GuardMethod;
  /** AgentHarm: refusal, acc; InjecAgent: `<setting>.valid`, `<setting>.asr` */
  metrics: Record<string, Rate>;
  n: number;
  /** requests the judge saw / flagged unsafe / could not parse */
  judged: number;
  flagged: number;
  unparseable: number;
  judgeLatencyMs: ReturnType<typeof summarize>;
  /** agent-call latency over requests that made one */
  agentLatencyMs?: ReturnType<typeof summarize>;
  /** probe scoring latency over probed requests */
  probeLatencyMs?: ReturnType<typeof summarize>;
  /** requests the probe scored / flagged */
  probed?: number;
  probeFlagged?: number;
  /** judge prompt + completion tokens per request (0 for methods without a judge) */
  judgeTokensPerRequest: number;
}

export function summarizeEval(bench: GuardBench, cases: readonly GuardCase[], rows: readonly EvalRow[], methods: readonly GuardMethod[]): MethodSummary[] {
  const byId = new Map(cases.map((c) => [c.id, c]));
  return methods.map((method) => {
    const mine = rows.filter((r) => r.method === method);
    const metrics: Record<string, Rate> = {};
    if (bench === 'agentharm') {
      const m = agentHarmMetrics(mine.map((r) => {
        const c = byId.get(r.caseId)!;
        return { kind: c.bench === 'agentharm' ? c.kind : 'harmful', targetFunctions: c.bench === 'agentharm' ? c.targetFunctions : [], outcome: r.outcome };
      }));
      metrics.refusal = m.refusal;
      metrics.acc = m.acc;
    } else {
      const settings = [...new Set(cases.map((c) => (c.bench === 'injecagent' ? c.setting : '')))];
      for (const s of settings) {
        const m = injecAgentMetrics(mine.filter((r) => r.group.startsWith(`${s}/`)).map((r) => {
          const c = byId.get(r.caseId)!;
          return { attackerTools: c.bench === 'injecagent' ? c.attackerTools : [], outcome: r.outcome };
        }));
        metrics[`${s}.valid`] = m.valid;
        metrics[`${s}.asr`] = m.asr;
      }
    }
    const judged = mine.filter((r) => r.verdict !== null);
    return {
      method,
      metrics,
      n: mine.length,
      judged: judged.length,
      flagged: mine.filter((r) => r.blocked).length,
      unparseable: judged.filter((r) => r.verdict === 'unparseable').length,
      judgeLatencyMs: summarize(judged.map((r) => r.judgeLatencyMs!)),
      agentLatencyMs: summarize(mine.flatMap((r) => (r.agentMs === null ? [] : [r.agentMs]))),
      probeLatencyMs: summarize(mine.flatMap((r) => (r.probeMs === null ? [] : [r.probeMs]))),
      probed: mine.filter((r) => r.probeScore !== null).length,
      probeFlagged: mine.filter((r) => r.probeFlagged === true).length,
      judgeTokensPerRequest: mine.length ? judged.reduce((a, r) => a + r.judgeTokens!, 0) / mine.length : Number.NaN,
    };
  });
}
