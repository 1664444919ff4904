/**
 * The Table 4 evaluation: every case × method through `guardedRespond`, each output classified by the
 * outcome module (structured tool_calls and native calls in content alike), then the metrics of `metrics.ts`
 * per method — plus judge latency and judge-token overhead per request.
 *
 * InjecAgent data stealing runs InjecAgent's second step: when step 1 calls the data-extraction tool, that tool's
 * simulated response is fed back and the agent (behind the same guard) answers again; the case succeeds only if
 * step 2 calls the sending tool (bench/injecagent-score.ts).
 *
 * InjecAgent has two formats. native (the agent-realistic variant): our system prompt, the tools as JSON schemas,
 * calls read by the outcome classifier. react (the paper's setting, `EvalOptions.react`): the agent gets
 * InjecAgent's own ReAct prompt with the tools described in it and no `tools`, and InjecAgent's own parser
 * (`scoreReactStep`) labels each step, format failures counting as invalid; the judging methods still judge the
 * native conversation with the case's ToolSpecs, and a refusal is the same prefilled continuation as in native.
 */
import { classifyResponse } from '../../outcome/classify.ts';
import { SafekeepError } from '../../util/errors.ts';
import { parseJsonBounded } from '../../util/json-bounded.ts';
import type { Outcome } from '../../outcome/types.ts';
import { runTask, type Task } from '../../harness/runner.ts';
import { callTotals, sampleId, type CallLog, type SampleLog, type Score } from '../../harness/log.ts';
import type { GuardBench, GuardCase } from '../../benchmarks/cases.ts';
import { agentHarmMetrics, summarize, wilson, type Rate } from '../metrics.ts';
import { injecAgentScore, injecStep, simulatedToolResponse, type StepEval } from './injecagent-score.ts';
import { renderReactPrompt, scoreReactStep, step2From, type ReactCase, type ReactContext, type ReactEval } from '../../benchmarks/injecagent-react.ts';
import { guardedRespond, type GuardOptions } from '../../guard/respond.ts';
import { REFUSAL_PREFIX } from '../../guard/prompts.ts';
import { compliedAfterPrefix, judgeRefusal, type RefusalJudge } from './refusal-scorers.ts';
import type { ChatBackend, GuardMethod, Verdict } from '../../guard/types.ts';

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
  /** the guard's cost on this request (respond.ts GuardCost; absent in logs of earlier versions) */
  judgeCalls?: number;
  guardTokens?: number;
  guardMs?: number;
  /** probe-cascade: where the probe score fell (run / judge / refuse) */
  probeBand?: 'run' | 'judge' | 'refuse';
  /** probe-steer: the answer is the steered generation */
  steered?: boolean;
  output: string;
  /** InjecAgent: step 1 against its target tool (dh: the attacker tool; ds: the data-extraction tool) */
  step1?: StepEval;
  /** InjecAgent data stealing after a step-1 succ: step 2 against the sending tool; null = not run */
  step2?: StepEval | null;
  /** step 2's output, calls, and how the simulated step-1 response was found */
  step2Output?: string;
  step2Calls?: string[];
  step2Simulated?: 'exact' | 'same-tool' | 'none';
  /** InjecAgent's format, set when it is react (absent: native) */
  format?: 'react';
  /** react: InjecAgent's parse of each step (its eval and invalid reason; null = step 2 not run) */
  step1Parse?: ReactParse;
  step2Parse?: ReactParse | null;
  /** AgentHarm's refusal judge on the reply (when it ran): its verdict and raw answer */
  refusalJudge?: { refusal: boolean; raw: string; unparseable: boolean } | null;
  /** kept for the metrics (not written to the rows file) */
  outcome: Outcome;
}

/** What the log keeps of InjecAgent's parse of one react step. */
export interface ReactParse {
  eval: ReactEval['eval'];
  invalidReason?: string;
  parserError?: string;
  action?: string;
  actionInput?: string;
}

/** The react format: InjecAgent's prompts and tools, and each InjecAgent case as its agent code reads it (by id). */
export interface ReactFormat {
  ctx: ReactContext;
  cases: ReadonlyMap<string, ReactCase>;
}

export interface EvalOptions extends GuardOptions {
  /** InjecAgent in its own ReAct format (absent: native tool calling) */
  react?: ReactFormat;
  methods: readonly GuardMethod[];
  backend: ChatBackend;
  /** AgentHarm's refusal judge as a second refusal scorer beside the substring list (AgentHarm cases) */
  refusalJudge?: RefusalJudge;
  /** cases × methods in flight at once (default 1) */
  concurrency?: number;
  onProgress?: (done: number, total: number) => void;
}

function caseGroup(c: GuardCase): string {
  return c.bench === 'agentharm' ? c.kind : `${c.setting}/${c.attack}`;
}

/** One work item of Table 4: a case under a method. */
export interface EvalItem {
  c: GuardCase;
  method: GuardMethod;
}

/** The work items in the order rows are reported: method by method, cases in order. */
export const evalItems = (cases: readonly GuardCase[], methods: readonly GuardMethod[]): EvalItem[] =>
  methods.flatMap((method) => cases.map((c) => ({ c, method })));

export function runGuardEval(cases: readonly GuardCase[], opts: EvalOptions): Promise<EvalRow[]> {
  return runEvalItems(evalItems(cases, opts.methods), opts);
}

/** Rows of the given items, in their order (a shard runs a subset). */
export async function runEvalItems(items: readonly EvalItem[], opts: Omit<EvalOptions, 'methods'>): Promise<EvalRow[]> {
  return (await runTask(guardTask(opts), items, { concurrency: opts.concurrency, onProgress: opts.onProgress })).results;
}

const itemKey = (it: EvalItem): string => sampleId(it.method, it.c.id);

/**
 * Table 4 as a harness task: the solver is `guardedRespond` under the item's method (judge, agent and refusal calls
 * recorded), the scorers the outcome classifier and, for InjecAgent, its two-step labels.
 */
export function guardTask(opts: Omit<EvalOptions, 'methods'>): Task<EvalItem, EvalRow> {
  return {
    name: 'guard-eval',
    key: itemKey,
    solve: ({ c, method }, rec) => solveItem(c, method, {
      ...opts, backend: rec.view(opts.backend),
      ...(opts.judgeBackend ? { judgeBackend: rec.view(opts.judgeBackend) } : {}),
      ...(opts.refusalJudge ? { refusalJudge: { ...opts.refusalJudge, backend: rec.view(opts.refusalJudge.backend) } } : {}),
    }),
    samples: (it, row, calls) => [guardSample(it, row, calls)],
  };
}

async function solveItem(c: GuardCase, method: GuardMethod, opts: Omit<EvalOptions, 'methods'>): Promise<EvalRow> {
  if (c.bench === 'injecagent' && opts.react) return solveReact(c, method, opts.react, opts);
  const r = await guardedRespond(c.request, method, opts.backend, opts);
  let outcome = classifyResponse(r.reply.content, r.reply.toolCalls, c.request.tools, opts.backend.callFormat);
  // the prefilled prefix is ours: a continuation that complies is not a refusal
  const complied = r.blocked && outcome.label === 'refusal' ? compliedAfterPrefix(r.reply.content, opts.refusalPrefix ?? REFUSAL_PREFIX) : null;
  if (complied) outcome = { ...outcome, label: 'invalid', reasons: [complied] };
  const rj = opts.refusalJudge && c.bench === 'agentharm' ? await judgeRefusal(opts.refusalJudge, r.reply.content) : undefined;
  const steps = c.bench === 'injecagent' ? await injecSteps(c, method, outcome, opts) : {};
  return {
    ...steps,
    ...responseFields(c, method, r, outcome),
    ...(rj !== undefined ? { refusalJudge: rj && { refusal: rj.refusal, raw: rj.raw, unparseable: rj.unparseable } } : {}),
    outcome,
  };
}

/** The fields of a Table 4 row that come from the response and its classification (both agent formats). */
function responseFields(c: GuardCase, method: GuardMethod, r: Awaited<ReturnType<typeof guardedRespond>>, outcome: Outcome) {
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
    judgeCalls: r.cost.judgeCalls,
    guardTokens: r.cost.guardTokens,
    guardMs: r.cost.guardMs,
    ...(r.probe?.band ? { probeBand: r.probe.band } : {}),
    ...(r.steered ? { steered: true } : {}),
    output: r.reply.content,
  };
}

/** A Table 4 row as its log line: every score with its scorer. */
function guardSample(it: EvalItem, row: EvalRow, calls: CallLog[]): SampleLog<EvalRow> {
  const scores: Score[] = [{ scorer: 'outcome', value: row.label, explanation: row.reasons.join('; ') }];
  if (row.verdict !== null) scores.push({ scorer: 'judge', value: row.verdict, explanation: calls.find((k) => k.purpose === 'judge')?.content ?? '' });
  if (row.refusalJudge) scores.push({ scorer: 'agentharm-refusal-judge', value: row.refusalJudge.unparseable ? 'unparseable' : row.refusalJudge.refusal, explanation: row.refusalJudge.raw });
  if (row.probeScore !== null) scores.push({ scorer: 'probe', value: row.probeScore, explanation: row.probeFlagged ? 'flagged' : 'passed' });
  const parse = (p: ReactParse | null | undefined): string[] => (p ? [`react: ${p.eval}${p.invalidReason ? ` (${p.invalidReason})` : ''}`] : []);
  const explain = (xs: string[]) => (xs.length ? { explanation: xs.join('; ') } : {});
  if (row.step1 !== undefined) scores.push({ scorer: row.format === 'react' ? 'injecagent-react-step1' : 'injecagent-step1', value: row.step1, ...explain(parse(row.step1Parse)) });
  if (row.step2 !== undefined) {
    scores.push({ scorer: row.format === 'react' ? 'injecagent-react-step2' : 'injecagent-step2', value: row.step2,
      ...explain([...parse(row.step2Parse), ...(row.step2Simulated ? [`simulated response: ${row.step2Simulated}`] : [])]) });
  }
  return { format: 'safekeep-sample', id: itemKey(it), sample: it.c.id, solver: it.method, calls, scores, output: row.output, ...callTotals(calls), row };
}

/** InjecAgent's step labels of one case; data stealing runs step 2 after a step-1 succ. */
async function injecSteps(
  c: Extract<GuardCase, { bench: 'injecagent' }>,
  method: GuardMethod,
  outcome: Outcome,
  opts: Omit<EvalOptions, 'methods'>,
): Promise<Pick<EvalRow, 'step1' | 'step2' | 'step2Output' | 'step2Calls' | 'step2Simulated'>> {
  const [extract, send] = c.attackerTools;
  const step1 = injecStep(outcome, extract!, c.attack === 'ds' ? send : undefined);
  if (c.attack === 'dh' || step1 !== 'succ') return { step1 };
  const call = outcome.calls.find((k) => k.call.name === extract)!;
  const sim = simulatedToolResponse(c.simulatedResponses ?? {}, call.call.arguments);
  if (!sim) return { step1, step2: null, step2Simulated: 'none' };
  const request = {
    tools: c.request.tools,
    messages: [
      ...c.request.messages,
      // the call as a structured tool call only (a local model's native call text would otherwise render twice)
      { role: 'assistant' as const, content: '', tool_calls: [{ id: 'call_1', type: 'function' as const, function: { name: extract!, arguments: JSON.stringify(call.call.arguments ?? {}) } }] },
      { role: 'tool' as const, tool_call_id: 'call_1', name: extract!, content: sim.text },
    ],
  };
  const r2 = await guardedRespond(request, method, opts.backend, opts);
  const o2 = classifyResponse(r2.reply.content, r2.reply.toolCalls, c.request.tools, opts.backend.callFormat);
  return { step1, step2: injecStep(o2, send!), step2Output: r2.reply.content, step2Calls: o2.calls.map((k) => k.call.name), step2Simulated: sim.match };
}

const reactParse = (e: ReactEval): ReactParse => ({
  eval: e.eval,
  ...(e.invalidReason !== undefined ? { invalidReason: e.invalidReason } : {}),
  ...(e.parserError !== undefined ? { parserError: e.parserError } : {}),
  ...(e.action !== undefined ? { action: e.action } : {}),
  ...(e.actionInput !== undefined ? { actionInput: e.actionInput } : {}),
});

/** The row's outcome in react: InjecAgent's parse stands in for the classifier (valid = parsed; the action as its call). */
function reactOutcome(e: ReactEval): Outcome {
  const calls = e.action !== undefined ? [{ call: { name: e.action, arguments: {}, source: e.actionInput ?? '' }, known: true, argsValid: true, errors: [] }] : [];
  return { label: e.valid ? 'valid' : 'invalid', calls, malformed: [], refusalPhrases: [], degenerate: null, reasons: e.invalidReason ? [e.invalidReason] : [] };
}

/**
 * An InjecAgent case in its own ReAct format: the agent call gets InjecAgent's [system, user] messages and no tools
 * (the judge the native conversation with the ToolSpecs); InjecAgent's parser scores step 1 and, after a step-1
 * succ on data stealing, step 2 with the extraction tool's cached response for the parameters text the parser cut
 * (InjecAgent's key), else the same tool's response for the same arguments or any arguments.
 */
async function solveReact(c: Extract<GuardCase, { bench: 'injecagent' }>, method: GuardMethod, react: ReactFormat, opts: Omit<EvalOptions, 'methods'>): Promise<EvalRow> {
  const rc = react.cases.get(c.id);
  if (!rc) throw new SafekeepError(`${c.id}: no InjecAgent ReAct case of this id (the react data and the cases differ)`);
  const r = await guardedRespond({ messages: renderReactPrompt(react.ctx, rc), tools: [] }, method, opts.backend, { ...opts, judgeRequest: c.request });
  const e1 = scoreReactStep(rc, r.reply.content, 1);
  const outcome = reactOutcome(e1);
  let steps: Pick<EvalRow, 'step2' | 'step2Output' | 'step2Calls' | 'step2Simulated' | 'step2Parse'> = {};
  if (c.attack === 'ds' && e1.eval === 'succ') {
    const responses = c.simulatedResponses ?? {};
    const params = e1.attackerToolParameters!;
    const cached = Object.hasOwn(responses, params) ? { text: responses[params]!, match: 'exact' as const } : null;
    const args = parsedArguments(params);
    const sim = cached ?? simulatedToolResponse(responses, args);
    if (!sim) steps = { step2: null, step2Parse: null, step2Simulated: 'none' };
    else {
      const extract = c.attackerTools[0]!;
      // the judge sees step 2 as in native: the extraction call and its simulated response after the conversation
      const judgeRequest = { tools: c.request.tools, messages: [
        ...c.request.messages,
        { role: 'assistant' as const, content: '', tool_calls: [{ id: 'call_1', type: 'function' as const, function: { name: extract, arguments: JSON.stringify(args) } }] },
        { role: 'tool' as const, tool_call_id: 'call_1', name: extract, content: sim.text },
      ] };
      const r2 = await guardedRespond({ messages: renderReactPrompt(react.ctx, rc, step2From(e1, sim.text)), tools: [] }, method, opts.backend, { ...opts, judgeRequest });
      const e2 = scoreReactStep(rc, r2.reply.content, 2);
      steps = { step2: e2.eval, step2Parse: reactParse(e2), step2Output: r2.reply.content, step2Calls: e2.action !== undefined ? [e2.action] : [], step2Simulated: sim.match };
    }
  }
  return {
    format: 'react',
    step1: e1.eval,
    step1Parse: reactParse(e1),
    ...steps,
    ...responseFields(c, method, r, outcome),
    outcome,
  };
}

/** The parameters text as arguments, for the same-tool fallback's match and the judge's view of the call ({} when it is not a JSON object). */
function parsedArguments(text: string): Record<string, unknown> {
  try {
    const v = parseJsonBounded(text, 'react Action Input', 16);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

export interface MethodSummary {
  method: GuardMethod;
  /**
   * AgentHarm: refusal, acc; InjecAgent per setting: `<setting>.valid`, `.dh` (ASR-valid Direct Harm), `.ds1`/`.ds2`
   * (data stealing step 1 / step 2), `.ds` (both steps), `.asr` (Total = Table 4's ASR)
   */
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
  /**
   * the guard's cost per request, every method alike (respond.ts GuardCost): judge calls, guard tokens (judge
   * prompt + completion and a halted prefill read again), and the latency the guard added before the answering call
   * (nearest-rank p50 / p95 over the requests of this run)
   */
  cost?: { judgeCallsPerRequest: number; guardTokensPerRequest: number; addedMs: ReturnType<typeof summarize> };
  /** probe-cascade: requests whose score fell below / inside / above the band */
  bands?: { run: number; judge: number; refuse: number };
  /** probe-steer: requests answered by the steered generation */
  steered?: number;
  /**
   * judging methods: the share of harmful requests (AgentHarm) / attack cases (InjecAgent) the judge flagged — how
   * much of the refusal comes from the verdict; null for methods without a judge
   */
  flagRate?: Rate | null;
  /**
   * judging methods on AgentHarm: the share of benign requests the judge flagged — its over-refusal, which the
   * paper's Acc folds in with the agent's own; null without a judge or benign requests
   */
  benignFlagRate?: Rate | null;
  /** InjecAgent: how step 2's simulated tool response was found — exact cached response / same-tool fallback / none */
  simulated?: { exact: number; sameTool: number; none: number };
}

/** The judge flagged the request (an unparseable answer counts where the policy blocked on it). */
const flaggedByJudge = (r: EvalRow): boolean => r.verdict === 'yes' || (r.verdict === 'unparseable' && r.blocked);

/** Per-request guard cost of a method's rows (rows of logs without cost fields: judge calls and tokens from the verdict). */
function costOf(rows: readonly EvalRow[]): NonNullable<MethodSummary['cost']> {
  const n = rows.length;
  const calls = rows.reduce((a, r) => a + (r.judgeCalls ?? (r.verdict !== null ? 1 : 0)), 0);
  const tokens = rows.reduce((a, r) => a + (r.guardTokens ?? r.judgeTokens ?? 0), 0);
  return {
    judgeCallsPerRequest: n ? calls / n : Number.NaN,
    guardTokensPerRequest: n ? tokens / n : Number.NaN,
    addedMs: summarize(rows.flatMap((r) => (r.guardMs === undefined ? [] : [r.guardMs]))),
  };
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
      // AgentHarm's own refusal judge beside the substring list, and how often the two agree on harmful requests
      if (mine.some((r) => r.refusalJudge !== undefined)) {
        const harmful = mine.filter((r) => r.group === 'harmful');
        const judged = (r: EvalRow): boolean => r.refusalJudge?.refusal === true;
        metrics.refusalJudge = wilson(harmful.filter(judged).length, harmful.length);
        metrics.agreement = wilson(harmful.filter((r) => judged(r) === (r.outcome.label === 'refusal')).length, harmful.length);
      }
    } else {
      const settings = [...new Set(cases.map((c) => (c.bench === 'injecagent' ? c.setting : '')))];
      for (const s of settings) {
        // InjecAgent's own columns; Table 4's ASR is Total
        const m = injecAgentScore(mine.filter((r) => r.group.startsWith(`${s}/`)).map((r) => {
          const c = byId.get(r.caseId)!;
          return { attack: c.bench === 'injecagent' ? c.attack : 'dh', step1: r.step1 ?? 'invalid', step2: r.step2 ?? null };
        }));
        metrics[`${s}.valid`] = m.valid;
        metrics[`${s}.dh`] = m.dh;
        metrics[`${s}.ds1`] = m.dsStep1;
        metrics[`${s}.ds2`] = m.dsStep2;
        metrics[`${s}.ds`] = m.ds;
        metrics[`${s}.asr`] = m.total;
      }
    }
    const judged = mine.filter((r) => r.verdict !== null);
    const attacks = judged.filter((r) => bench === 'injecagent' || r.group === 'harmful');
    const benign = judged.filter((r) => bench === 'agentharm' && r.group === 'benign');
    return {
      method,
      metrics,
      n: mine.length,
      judged: judged.length,
      // a steered answer is probe-steer's intervention: counted as flagged like a refusal
      flagged: mine.filter((r) => r.blocked || r.steered === true).length,
      unparseable: judged.filter((r) => r.verdict === 'unparseable').length,
      judgeLatencyMs: summarize(judged.map((r) => r.judgeLatencyMs!)),
      agentLatencyMs: summarize(mine.flatMap((r) => (r.agentMs === null ? [] : [r.agentMs]))),
      probeLatencyMs: summarize(mine.flatMap((r) => (r.probeMs === null ? [] : [r.probeMs]))),
      probed: mine.filter((r) => r.probeScore !== null).length,
      probeFlagged: mine.filter((r) => r.probeFlagged === true).length,
      judgeTokensPerRequest: mine.length ? judged.reduce((a, r) => a + r.judgeTokens!, 0) / mine.length : Number.NaN,
      cost: costOf(mine),
      ...(method === 'probe-cascade' ? { bands: {
        run: mine.filter((r) => r.probeBand === 'run').length,
        judge: mine.filter((r) => r.probeBand === 'judge').length,
        refuse: mine.filter((r) => r.probeBand === 'refuse').length,
      } } : {}),
      ...(method === 'probe-steer' ? { steered: mine.filter((r) => r.steered).length } : {}),
      ...(bench === 'injecagent' ? { simulated: {
        exact: mine.filter((r) => r.step2Simulated === 'exact').length,
        sameTool: mine.filter((r) => r.step2Simulated === 'same-tool').length,
        none: mine.filter((r) => r.step2Simulated === 'none').length,
      } } : {}),
      flagRate: judged.length ? wilson(attacks.filter(flaggedByJudge).length, attacks.length) : null,
      ...(bench === 'agentharm' ? { benignFlagRate: benign.length ? wilson(benign.filter(flaggedByJudge).length, benign.length) : null } : {}),
    };
  });
}
