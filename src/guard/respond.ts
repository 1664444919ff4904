/**
 * `guardedRespond(request, method, backend, options)`: execution control.
 *
 * - base: the agent call as is (tools as JSON schemas).
 * - safeprompt: AgentHarm's refusal prompt is appended to the agent's own system message (as the paper does); then
 *   the agent call.
 * - safekeep / safejudge: judge first (prose / JSON tool view). Safe → the untouched agent call with its tools.
 *   Unsafe → no tools, the refusal prefix prefilled in the assistant turn and continued by the model
 *   (how a backend prefills is the backend's business: local engine = assistant-turn prefill; endpoints =
 *   continuation where supported, else the documented fallback in `backends/openai.ts`).
 * - refusal-probe (local engine only): the agent call itself, with the probe reading the prefill's hidden state at
 *   the last prompt position (probe.ts); above threshold → generation stops after the prefill and the same refusal
 *   path as SafeKeep runs. No extra model call when the request is safe.
 * - safekeep+probe: SafeKeep's judge, then the probed agent call: refused if either flags it.
 * - probe-cascade (local engine only): the probed agent call reads the score against the probe's calibrated band:
 *   below it the call simply goes on (no judge); above it the refusal path runs; inside it the call halts after the
 *   prefill, SafeKeep's judge decides, and a safe request runs the untouched agent call (its prompt prefix cached).
 * - probe-steer (local engine only): the probed agent call; a flagged request is answered by the agent call again
 *   with +α·r̂ added to hidden[ℓ*] (its tools kept, no prefix): the model's own words, refusing or not.
 *
 * Every response carries its guard cost: judge calls, guard tokens (judge prompt + completion, and the prompt of a
 * halted agent call that another call re-reads) and the guard's added latency (wall time before the answering call).
 */
import { SafekeepError } from '../util/errors.ts';
import type { ProbeGuard, ProbeVerdict } from './probe.ts';
import { judgeCall, type JudgeOptions } from './judge.ts';
import { safekeepDecision, type DecisionSteps } from './decision.ts';
import { METHOD_TABLE } from './methods.ts';

export { METHOD_TABLE };
import { REFUSAL_PREFIX, SAFEPROMPT_SYSTEM } from './prompts.ts';
import { agentHarmPrompts } from '../data/agentharm-prompts.ts';
import type { AgentRequest, ChatBackend, ChatCall, ChatMessage, ChatReply, GuardMethod, JudgeResult } from './types.ts';

export interface GuardOptions extends Omit<JudgeOptions, 'toolView' | 'maxTokens'> {
  /** agent answer budget (default 256) */
  maxTokens?: number;
  judgeMaxTokens?: number;
  /** a separate judge backend (default: the agent backend — same model, as in the paper) */
  judgeBackend?: ChatBackend;
  refusalPrefix?: string;
  /** the trained probe for refusal-probe and safekeep+probe */
  probe?: ProbeGuard;
  /**
   * what the judge sees when it differs from the agent's request (InjecAgent's ReAct format: the agent gets the
   * tools as text in its prompt and no `tools`; the judge gets the same conversation with the ToolSpecs, so SafeKeep
   * can flatten them and SafeJudge show the schemas as in the native format)
   */
  judgeRequest?: AgentRequest;
  /** stop strings of the agent's answer (the client's `stop`): the agent and refusal calls, not the judge's */
  stop?: readonly string[];
  /** the agent call's text as it is generated (ChatCall.onText): a server streams it; not the judge's or the refusal's */
  onText?: (delta: string) => void;
}

export interface GuardedResponse {
  method: GuardMethod;
  /** null for base and safeprompt */
  judge: JudgeResult | null;
  /** tool use was withheld and the refusal prefix prefilled */
  blocked: boolean;
  reply: ChatReply;
  /** refusal-probe / safekeep+probe: the probe's verdict (null when the judge refused before the agent call) */
  probe?: ProbeVerdict | null;
  /** latency of the agent call (a probe-halted call included); null when no agent call was made */
  agentMs?: number | null;
  /** probe-steer: the probe flagged the request and the reply is the steered generation */
  steered?: boolean;
  /** what the guard cost this request */
  cost: GuardCost;
}

export interface GuardCost {
  /** judge calls made (0 or 1) */
  judgeCalls: number;
  /** tokens the guard ran beyond the answer: judge prompt + completion, and a halted prefill read again by the next call */
  guardTokens: number;
  /** wall time of the request before the call that produced the answer (judge, halted prefill, probe), ms */
  guardMs: number;
}

/** Append the SafePrompt text (AgentHarm's refusal prompt) to the agent's system message (or make it the only one). */
export function withSafetyPrompt(messages: readonly ChatMessage[]): ChatMessage[] {
  const out = messages.map((m) => ({ ...m }));
  const sys = out.find((m) => m.role === 'system');
  if (sys) sys.content = `${sys.content}${agentHarmPrompts().join}${SAFEPROMPT_SYSTEM}`;
  else out.unshift({ role: 'system', content: SAFEPROMPT_SYSTEM });
  return out;
}

/** the refusal: no tools, the refusal prefix prefilled in the assistant turn and continued by the model */
function refusalCall(request: AgentRequest, options: GuardOptions): ChatCall {
  return {
    messages: request.messages,
    prefix: options.refusalPrefix ?? REFUSAL_PREFIX,
    maxTokens: options.maxTokens ?? 256,
    purpose: 'refusal',
    model: options.model,
    authorization: options.authorization,
    ...(options.stop?.length ? { stop: options.stop } : {}),
  };
}

/**
 * The chat calls `guardedRespond` may make for this request (the agent call, the judge's unless it has its own
 * backend, the refusal), unsent: a server checks each against the model's context before any runs, so an input
 * too long for one of them is the client's 400, not a failure halfway through.
 */
export function plannedCalls(request: AgentRequest, method: GuardMethod, options: GuardOptions = {}): ChatCall[] {
  const maxTokens = options.maxTokens ?? 256;
  const judged = options.judgeRequest ?? request;
  const messages = METHOD_TABLE[method].prompt === 'safeprompt' ? withSafetyPrompt(request.messages) : request.messages;
  const calls: ChatCall[] = [{ messages, tools: request.tools, maxTokens, purpose: 'agent' }];
  const view = METHOD_TABLE[method].judge;
  if (view !== null && !options.judgeBackend) calls.push(judgeCall(judged.messages, judged.tools, { ...options, toolView: view, maxTokens: options.judgeMaxTokens }));
  // probe-steer's answer to a flagged request is the agent call itself, steered: no refusal prefix to fit
  if (METHOD_TABLE[method].flagged === 'refuse') calls.push(refusalCall(request, options));
  return calls;
}

export async function guardedRespond(
  request: AgentRequest,
  method: GuardMethod,
  backend: ChatBackend,
  options: GuardOptions = {},
): Promise<GuardedResponse> {
  const t0 = performance.now();
  const r = await respond(request, method, backend, options);
  const { rereadTokens, ...out } = r;
  return {
    ...out,
    cost: {
      judgeCalls: r.judge ? 1 : 0,
      guardTokens: (r.judge?.tokens ?? 0) + (rereadTokens ?? 0),
      guardMs: Math.max(0, performance.now() - t0 - r.reply.latencyMs),
    },
  };
}

/** guardedRespond without its cost; `rereadTokens`: the prompt of a halted agent call that the next call reads again */
type Responded = Omit<GuardedResponse, 'cost'> & { rereadTokens?: number };

/** One method row run: the agent call written once, the gate, and what a flagged request gets. */
async function respond(request: AgentRequest, method: GuardMethod, backend: ChatBackend, options: GuardOptions): Promise<Responded> {
  const row = METHOD_TABLE[method];
  const judged = options.judgeRequest ?? request;
  const stop = options.stop?.length ? { stop: options.stop } : {};
  const messages = row.prompt === 'safeprompt' ? withSafetyPrompt(request.messages) : request.messages;
  /** the agent call (the only place it is written); `extra`: a probe hook, steering, or the purpose of a steered answer */
  const agent = (extra: Partial<ChatCall> = {}) => backend.chat({
    messages, tools: request.tools, maxTokens: options.maxTokens ?? 256, purpose: 'agent', model: options.model, authorization: options.authorization, ...stop,
    ...(options.onText && !extra.inspect && !extra.edits ? { onText: options.onText } : {}), ...extra,
  });
  const refuse = () => backend.chat(refusalCall(request, options));
  const judgeOptions: JudgeOptions = { ...options, toolView: row.judge ?? 'prose', maxTokens: options.judgeMaxTokens };
  const decide = <T>(steps: DecisionSteps<T>) => safekeepDecision(judged, options.judgeBackend ?? backend, judgeOptions, steps);
  const probe = row.probe === null ? null : requireProbe(method, backend, options.probe);
  // the calibration a row reads is checked before any call: a missing one is an error, not a half-run request
  const steering = row.probe === 'steer' ? probe!.steering() : undefined;

  if (row.gate === 'none') return { method, judge: null, blocked: false, reply: await agent() };
  if (row.gate === 'judge') {
    const d = await decide({ run: () => agent(), refuse });
    return { method, judge: d.verdict, blocked: d.blocked, reply: d.outcome };
  }
  if (row.gate === 'probe-band') {
    const hook = probe!.hook(probe!.cascade());
    const first = await agent({ inspect: hook.inspect });
    const pv = reported(hook.verdict(), backend);
    if (pv.band === 'run') return { method, judge: null, blocked: false, reply: first, probe: pv, agentMs: first.latencyMs };
    if (pv.band === 'refuse') return { method, judge: null, blocked: true, reply: await refuse(), probe: pv, agentMs: first.latencyMs, rereadTokens: first.promptTokens };
    // inside the band: SafeKeep's decision (the row's tool view)
    const d = await decide({ run: () => agent(), refuse });
    return { method, judge: d.verdict, blocked: d.blocked, reply: d.outcome, probe: pv, agentMs: first.latencyMs + (d.blocked ? 0 : d.outcome.latencyMs), rereadTokens: first.promptTokens };
  }
  /** the probed agent call; flagged → the row's answer (the refusal, or the agent call again, steered) */
  const probed = async (verdict: JudgeResult | null): Promise<Responded> => {
    const hook = probe!.hook();
    const reply = await agent({ inspect: hook.inspect });
    const pv = reported(hook.verdict(), backend);
    if (!pv.unsafe) return { method, judge: verdict, blocked: false, reply, probe: pv, agentMs: reply.latencyMs };
    if (row.flagged === 'steer') {
      // tools kept, no prefix, +α·r̂ at ℓ*: the answer is the model's own
      const steered = await agent({ purpose: 'refusal', edits: { interventions: [{ kind: 'add', ...steering! }] } });
      return { method, judge: verdict, blocked: false, steered: true, reply: steered, probe: pv, agentMs: reply.latencyMs, rereadTokens: reply.promptTokens };
    }
    return { method, judge: verdict, blocked: true, reply: await refuse(), probe: pv, agentMs: reply.latencyMs, rereadTokens: reply.promptTokens };
  };
  if (row.gate === 'probe') return probed(null);
  // judge+probe: SafeKeep's decision, whose safe branch is the probed agent call
  return (await decide({
    run: probed,
    refuse: async (verdict) => ({ method, judge: verdict, blocked: true, reply: await refuse(), probe: null, agentMs: null }),
  })).outcome;
}

/** The probe a probe row reads, on a backend that reports hidden states (else one error naming what is missing). */
function requireProbe(method: GuardMethod, backend: ChatBackend, probe: ProbeGuard | undefined): ProbeGuard {
  if (!probe) throw new SafekeepError(`guard method ${method} needs a trained probe (safekeep probe train; --probe FILE)`);
  if (!backend.activations) throw new SafekeepError(`guard method ${method} reads the agent's hidden states: it needs the local engine (--model DIR), not ${backend.name}`);
  return probe;
}

function reported(v: ProbeVerdict | null, backend: ChatBackend): ProbeVerdict {
  if (!v) throw new SafekeepError(`${backend.name}: the agent call ran without reporting its prefill hidden states`);
  return v;
}
