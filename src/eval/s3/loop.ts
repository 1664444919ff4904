/**
 * The multi-turn agent loop with the S³ guard at every stage and simulated tools:
 *
 *   input ─▶ [model turn ─▶ tool_selection ─▶ per call: tool_execution ─▶ run (simulated) ─▶ tool_observation]* ─▶ output
 *
 * A model turn without tool calls is the final answer (output stage). Decisions: `recover` applies the stage's
 * recovery (`recovery.ts`; input → the guard rewrites the request without its harmful part, `rewrite.ts`, checked
 * again, else the refusal prefill), `respond` is incident response at tool_execution (`incident.ts`), `block` ends
 * the task with the refusal prefill on the conversation as it stood before the turn. Without a guard (`guard: null`) this is the plain agent loop.
 * Everything is recorded: messages, every stage decision, the executed calls (for scoring), tokens and latency.
 */
import type { ToolSpec } from '../../data/types.ts';
import { parseToolCalls } from '../../outcome/parse-calls.ts';
import { findRefusalPhrases } from '../../outcome/refusal.ts';
import { checkCall } from '../../outcome/validate.ts';
import { REFUSAL_PREFIX } from '../../guard/prompts.ts';
import type { ChatBackend, ChatMessage } from '../../guard/types.ts';
import type { CheckEnv } from '../../s3/check.ts';
import { parseArguments, type CallView, type StageEvent } from '../../s3/event.ts';
import { riskyRuns, runStage, type S3Config, type StageDecision } from '../../s3/guard.ts';
import { incidentAgentNote, incidentUserReport, respondToIncident, type Incident } from '../../s3/incident.ts';
import { applyAnswer, applyCalls, applyInput, applyObservation } from '../../s3/apply.ts';
import { rewriteRequest, withRewrittenRequest } from '../../s3/rewrite.ts';
import type { ExecutedCall } from './score.ts';
import type { S3Task } from './task.ts';

interface LoopOptions {
  /** the agent model */
  backend: ChatBackend;
  /** null = no guard (the `none` configuration) */
  guard: { config: S3Config; env: CheckEnv } | null;
  /** model turns at most (default 6) */
  maxSteps?: number;
  /** agent answer budget per turn (default 256) */
  maxTokens?: number;
  refusalPrefix?: string;
}

/** One stage decision as recorded in a trajectory. */
interface RecordedDecision {
  turn: number;
  stage: StageDecision['stage'];
  triggered: string[];
  filtered: string[];
  picked: string[];
  guardAgent: StageDecision['guardAgent'];
  invoked: boolean;
  risky: string[];
  action: StageDecision['action'];
  /** input / tool_observation: parts no check read (then blocked); absent when none */
  uncovered?: StageDecision['uncovered'];
  /** per skill run: skill, risky, reason, evidence */
  runs: { skill: string; risky: boolean; reason: string; evidence: string[]; raw: string }[];
  /** what recovery changed (removed spans, blocked calls, redactions) */
  changed: string[];
  tokens: number;
  latencyMs: number;
}

export interface Trajectory {
  taskId: string;
  group: string;
  messages: ChatMessage[];
  decisions: RecordedDecision[];
  executed: ExecutedCall[];
  /** null when the step budget ran out before a final answer */
  final: { text: string; refusal: boolean; blocked: boolean } | null;
  turns: number;
  /** guard invocations (stages where ≥ 1 skill passed its filter) */
  gic: number;
  /** recovery signals (stage decisions that found a risk: recover or block) */
  rsc: number;
  /** recoveries that replaced a whole observation or answer because the evidence could not be cut */
  fallbacks: number;
  /** incident responses at tool_execution (a harmful call ran: contained, remediated where possible, reported) */
  incidents: Incident[];
  tokens: { agent: number; guard: number; refusal: number };
  latencyMs: number;
}

function record(turn: number, d: StageDecision, changed: string[]): RecordedDecision {
  return {
    turn, stage: d.stage, triggered: d.triggered, filtered: d.filtered, picked: d.picked, guardAgent: d.guardAgent, invoked: d.invoked, risky: d.risky,
    action: d.action,
    ...(d.uncovered.length ? { uncovered: d.uncovered } : {}),
    runs: d.runs.map((r) => ({ skill: r.skill, risky: r.result.risky, reason: r.result.reason, evidence: r.result.evidence, raw: r.result.raw })),
    changed, tokens: d.tokens, latencyMs: d.latencyMs,
  };
}

/** Calls of a model reply: structured tool_calls, else calls written in the model's native syntax. */
function replyCalls(content: string, toolCalls: readonly { id?: string; function: { name: string; arguments: string } }[], backend: ChatBackend, turn: number): { calls: CallView[]; prose: string } {
  if (toolCalls.length > 0) {
    return { calls: toolCalls.map((c, i) => ({ id: c.id || `call_${turn}_${i}`, name: c.function.name, arguments: parseArguments(c.function.arguments) })), prose: content };
  }
  const parsed = parseToolCalls(content, backend.callFormat);
  return { calls: parsed.calls.map((c, i) => ({ id: `call_${turn}_${i}`, name: c.name, arguments: c.arguments })), prose: parsed.calls.length ? parsed.prose : content };
}

const wire = (c: CallView) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments) } });

/**
 * One task's run in progress: the trajectory being recorded, the conversation it grows, and the three things every
 * step of the loop does with them (run the guard at a stage, end with the refusal prefill, close the record).
 */
class TaskRun {
  readonly tr: Trajectory;
  readonly messages: ChatMessage[];
  readonly guard: LoopOptions['guard'];
  /** recovery messages carry guidance unless the configuration turns it off */
  readonly rOpts: { guidance: boolean };
  readonly maxTokens: number;
  private readonly prefix: string;
  private readonly t0 = performance.now();

  constructor(readonly task: S3Task, readonly opts: LoopOptions) {
    this.messages = task.messages.map((m) => ({ ...m }));
    this.tr = {
      taskId: task.id, group: task.group, messages: this.messages, decisions: [], executed: [], final: null, turns: 0, gic: 0, rsc: 0, fallbacks: 0, incidents: [],
      tokens: { agent: 0, guard: 0, refusal: 0 }, latencyMs: 0,
    };
    this.guard = opts.guard;
    this.rOpts = { guidance: opts.guard?.config.guidance !== false };
    this.maxTokens = opts.maxTokens ?? 256;
    this.prefix = opts.refusalPrefix ?? REFUSAL_PREFIX;
  }

  get tools(): ToolSpec[] {
    return this.task.tools;
  }

  /** the guard's skills (called only where a stage decision exists, i.e. with a guard) */
  get skills(): S3Config['skills'] {
    return this.guard!.config.skills;
  }

  /** The guard at one stage, counted (tokens, invocations, recovery signals); null without a guard. */
  async stage(e: StageEvent): Promise<StageDecision | null> {
    if (!this.guard) return null;
    const d = await runStage(e, this.guard.config, this.guard.env);
    this.tr.tokens.guard += d.tokens;
    if (d.invoked) this.tr.gic++;
    if (d.action !== 'pass') this.tr.rsc++;
    return d;
  }

  record(turn: number, d: StageDecision, changed: string[]): void {
    this.tr.decisions.push(record(turn, d, changed));
  }

  /** A call that runs, recorded for scoring (with whether its arguments fit the tool's schema). */
  executed(turn: number, call: CallView): void {
    this.tr.executed.push({ turn, name: call.name, valid: checkCall({ name: call.name, arguments: call.arguments, source: '' }, this.tools).argsValid });
  }

  /** The task ends with the refusal prefill continued on `history` (the conversation before the refused step). */
  async refuse(history: ChatMessage[]): Promise<void> {
    const r = await this.opts.backend.chat({ messages: history, prefix: this.prefix, maxTokens: this.maxTokens, purpose: 'refusal' });
    this.tr.tokens.refusal += r.promptTokens + r.completionTokens;
    this.tr.final = { text: r.content, refusal: true, blocked: true };
    this.messages.push({ role: 'assistant', content: r.content });
  }

  done(): Trajectory {
    this.tr.latencyMs = performance.now() - this.t0;
    return this.tr;
  }
}

/** A step's outcome for the loop: go on, or the task has ended (refused) and the trajectory is complete. */
type Step = 'go' | 'ended';

/**
 * Input recovery: the guard drops the flagged component of the request, and the rewrite is checked again before the
 * task goes on. 'kept' = no rewrite came back (the input stage's own recovery applies); 'ended' = the rewrite was
 * refused too.
 */
async function rewriteInput(run: TaskRun, d: StageDecision, flagged: ReturnType<typeof riskyRuns>, original: ChatMessage[]): Promise<'rewritten' | 'kept' | 'ended'> {
  const rw = await rewriteRequest(run.messages, flagged, run.guard!.env);
  run.tr.tokens.guard += rw.tokens;
  if (rw.request === null) return 'kept';
  const note = run.rOpts.guidance ? `[guard: part of this request was removed as unsafe (${flagged.map((r) => r.result.reason).join(' ')}); do only what remains.]` : '';
  const next = withRewrittenRequest(run.messages, rw.request, note);
  run.record(0, d, [`request rewritten: ${rw.request}`]);
  const again = (await run.stage({ stage: 'input', messages: next, tools: run.tools }))!;
  run.record(0, again, again.action === 'pass' ? [] : ['rewritten request refused (refusal prefill)']);
  if (again.action !== 'pass') {
    await run.refuse(original);
    return 'ended';
  }
  run.messages.splice(0, run.messages.length, ...next);
  return 'rewritten';
}

/** The input stage: pass, the request rewritten without its harmful part, or the refusal prefill. */
async function guardInput(run: TaskRun): Promise<Step> {
  const d = await run.stage({ stage: 'input', messages: [...run.messages], tools: run.tools });
  if (!d) return 'go';
  const original = [...run.messages];
  const flagged = d.action === 'recover' ? riskyRuns(d, run.skills) : [];
  // a probe scores the agent's own prefill of the whole request: it names no component to drop, so it refuses
  if (flagged.length && run.guard!.config.inputRecovery !== 'refuse' && flagged.every((r) => r.skill.check !== 'probe')) {
    const r = await rewriteInput(run, d, flagged, original);
    if (r !== 'kept') return r === 'ended' ? 'ended' : 'go';
  }
  const a = applyInput(d);
  run.record(0, d, a.changed);
  if (a.next !== 'refuse') return 'go';
  await run.refuse(original);
  return 'ended';
}

/** A turn without calls: the final answer, through the output stage; incident reports are appended for the user. */
async function finishWithAnswer(run: TaskRun, turn: number, before: ChatMessage[], prose: string): Promise<void> {
  let text = prose.trim();
  const d = await run.stage({ stage: 'output', messages: before, tools: run.tools, answer: text });
  if (d) {
    const a = applyAnswer(d, run.skills, text);
    run.record(turn, d, a.changed);
    if (a.next === 'refuse') return run.refuse(before);
    if (a.fallback) run.tr.fallbacks++;
    text = a.content;
  }
  // incident response tells the user what happened
  if (run.tr.incidents.length) text += incidentUserReport(run.tr.incidents);
  run.messages.push({ role: 'assistant', content: text });
  run.tr.final = { text, refusal: findRefusalPhrases(text).length > 0, blocked: false };
}

/** The tool_selection stage: the calls it blocked (id → the tool message that replaces the result), or 'ended'. */
async function guardSelection(run: TaskRun, turn: number, before: ChatMessage[], calls: CallView[]): Promise<Map<string, string> | 'ended'> {
  const d = await run.stage({ stage: 'tool_selection', messages: before, tools: run.tools, calls });
  if (!d) return new Map();
  const a = applyCalls(d, run.skills, calls, run.rOpts);
  run.record(turn, d, a.changed);
  if (a.next === 'refuse') {
    await run.refuse(before);
    return 'ended';
  }
  return new Map(a.blocked.map((b) => [b.call.id, b.result]));
}

/** Incident response at tool_execution: the call runs (the incident), then contain, remediate where possible, tell. */
function respondAtExecution(run: TaskRun, turn: number, call: CallView, d: StageDecision): Incident {
  run.executed(turn, call);
  const result = run.task.simulate(call, turn);
  const reason = riskyRuns(d, run.skills).map((r) => r.result.reason).join(' ');
  const inc = respondToIncident(call, result, reason, run.tools, (c) => run.task.simulate(c, turn), turn);
  run.tr.incidents.push(inc);
  run.record(turn, d, [`incident: ${call.name} ran; ${inc.remediation ? `undone with ${inc.remediation.name}` : inc.note}`]);
  run.messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content: result + incidentAgentNote(inc) });
  return inc;
}

/** Within one turn: the incident that stops the rest of its calls, once there is one. */
interface TurnContainment { by: Incident | null }

/**
 * One proposed call: blocked at selection, contained after an incident, checked at tool_execution, run (simulated)
 * and its result checked at tool_observation. Every path leaves the call's tool message in the conversation, unless
 * the task ends.
 */
async function runCall(run: TaskRun, turn: number, before: ChatMessage[], call: CallView, blocked: Map<string, string>, containment: TurnContainment): Promise<Step> {
  const toolMessage = (content: string): Step => {
    run.messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content });
    return 'go';
  };
  const ended = async (): Promise<Step> => {
    await run.refuse(before);
    return 'ended';
  };
  const replaced = blocked.get(call.id);
  if (replaced !== undefined) return toolMessage(replaced);
  // containment: the rest of the turn after an incident, and any later call of a tool that caused one
  const stopper = containment.by ?? run.tr.incidents.find((i) => i.call.name === call.name);
  if (stopper) {
    if (containment.by) containment.by.contained.push(call.name);
    return toolMessage(`Not executed: the guard stopped this chain of calls after the incident with ${stopper.call.name}.`);
  }
  const ex = await run.stage({ stage: 'tool_execution', messages: [...run.messages], tools: run.tools, calls: [call] });
  if (ex) {
    if (ex.action === 'respond') {
      containment.by = respondAtExecution(run, turn, call, ex);
      return 'go';
    }
    const a = applyCalls(ex, run.skills, [call], run.rOpts);
    run.record(turn, ex, a.changed);
    if (a.next === 'refuse') return ended();
    if (a.blocked.length > 0) return toolMessage(a.blocked[0]!.result);
  }
  run.executed(turn, call);
  let content = run.task.simulate(call, turn);
  const obs = await run.stage({ stage: 'tool_observation', messages: [...run.messages], tools: run.tools, observation: { callId: call.id, name: call.name, content } });
  if (obs) {
    const a = applyObservation(obs, run.skills, content, call.name, run.rOpts);
    run.record(turn, obs, a.changed);
    if (a.next === 'refuse') return ended();
    if (a.fallback) run.tr.fallbacks++;
    content = a.content;
  }
  return toolMessage(content);
}

/**
 * The agent loop of one S³ task: the input stage, then model turns until a final answer, a refusal or the step
 * budget; every stage decision, executed call, token and the latency recorded in the trajectory.
 */
export async function runS3Task(task: S3Task, opts: LoopOptions): Promise<Trajectory> {
  const run = new TaskRun(task, opts);
  const backend = opts.backend;
  if ((await guardInput(run)) === 'ended') return run.done();
  for (let turn = 0; turn < (opts.maxSteps ?? 6); turn++) {
    run.tr.turns = turn + 1;
    const before = [...run.messages];
    const reply = await backend.chat({ messages: before, tools: run.tools, maxTokens: run.maxTokens, purpose: 'agent' });
    run.tr.tokens.agent += reply.promptTokens + reply.completionTokens;
    const { calls, prose } = replyCalls(reply.content, reply.toolCalls, backend, turn);
    if (calls.length === 0) {
      await finishWithAnswer(run, turn, before, prose);
      return run.done();
    }
    const blocked = await guardSelection(run, turn, before, calls);
    if (blocked === 'ended') return run.done();
    run.messages.push({ role: 'assistant', content: prose.trim(), tool_calls: calls.map(wire) });
    const containment: TurnContainment = { by: null };
    for (const call of calls) {
      if ((await runCall(run, turn, before, call, blocked, containment)) === 'ended') return run.done();
    }
  }
  return run.done();
}
