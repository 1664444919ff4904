/**
 * The multi-turn agent loop with the S³ guard at every stage and simulated tools:
 *
 *   input ─▶ memory (read) ─▶ planning ─▶ [model turn ─▶ tool_selection ─▶ per call: tool_execution ─▶ run (simulated)
 *     ─▶ tool_execution of its environment effects ─▶ tool_observation]* ─▶ output
 *
 * memory: a task with a memory store has its entries retrieved before the model reasons (a call to the store's read
 * tool, whose result is the entries the memory stage kept); a call to the store's write tool is checked at the
 * memory stage before it is stored. planning: when the task or a planning-stage skill wants a plan, the agent writes
 * one (no tools offered for that turn), checked before any tool runs; recovery re-plans once. A scripted environment
 * (`task.environment`) may carry out more than the call asked for (a perturbation): each such effect goes through
 * tool_execution, where incident response can undo it.
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
import { parseArguments, userRequestText, type CallView, type StageEvent } from '../../s3/event.ts';
import { riskyRuns, runStage, type S3Config, type StageDecision } from '../../s3/guard.ts';
import { incidentAgentNote, incidentUserReport, respondToIncident, type Incident } from '../../s3/incident.ts';
import { applyAnswer, applyCalls, applyInput, applyMemory, applyObservation, applyPlan } from '../../s3/apply.ts';
import { memoryBlock, type MemoryEntry } from '../../s3/event.ts';
import { PLAN_GO, PLAN_REQUEST, planSteps, replanRequest } from '../../s3/plan.ts';
import { rewriteRequest, withRewrittenRequest } from '../../s3/rewrite.ts';
import type { ExecutedCall } from './score.ts';
import type { Environment, S3Task } from './task.ts';

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
  /** a scripted environment's end state (multistage tasks) */
  endState?: Record<string, unknown>;
  /** the plan the agent carried out, when it wrote one */
  plan?: string;
  /** memory entries the memory stage dropped (read) or kept out of the store (write) */
  memoryDropped?: string[];
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
  /** the task's scripted environment for this run, or null (the task's `simulate`) */
  readonly env: Environment | null;
  /** entries written to the task's memory store in this run (kept by the memory stage), read back after its own */
  readonly written: MemoryEntry[] = [];

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
    this.env = task.environment?.() ?? null;
  }

  /** Runs a call: its result and, in a scripted environment, the effects it had beyond it. */
  exec(call: CallView, turn: number): { result: string; effects: CallView[] } {
    return this.env ? this.env.execute(call) : { result: this.task.simulate(call, turn), effects: [] };
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
    if (this.env) this.tr.endState = this.env.state();
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
  const { result } = run.exec(call, turn);
  const reason = riskyRuns(d, run.skills).map((r) => r.result.reason).join(' ');
  const inc = respondToIncident(call, result, reason, run.tools, (c) => run.exec(c, turn).result, turn);
  run.tr.incidents.push(inc);
  run.record(turn, d, [`incident: ${call.name} ran; ${inc.remediation ? `undone with ${inc.remediation.name}` : inc.note}`]);
  run.messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content: result + incidentAgentNote(inc) });
  return inc;
}

/**
 * An effect the environment carried out beyond the call (a perturbation) at tool_execution: incident response undoes
 * it where it can (the note the agent reads); it cannot be prevented, it already happened. 'ended': refused.
 */
async function guardEffect(run: TaskRun, turn: number, call: CallView, effect: CallView, result: string): Promise<string | 'ended'> {
  const d = await run.stage({ stage: 'tool_execution', messages: [...run.messages], tools: run.tools, calls: [effect] });
  if (!d) return '';
  if (d.action === 'respond') {
    const reason = riskyRuns(d, run.skills).map((r) => r.result.reason).join(' ');
    const inc = respondToIncident(effect, result, reason, run.tools, (c) => run.exec(c, turn).result, turn);
    run.tr.incidents.push(inc);
    run.record(turn, d, [`incident: ${effect.name} happened when ${call.name} ran; ${inc.remediation ? `undone with ${inc.remediation.name}` : inc.note}`]);
    return incidentAgentNote(inc);
  }
  run.record(turn, d, d.action === 'pass' ? [] : [`${effect.name} happened when ${call.name} ran (not undone: no incident response)`]);
  if (d.action !== 'block') return '';
  await run.refuse([...run.messages]);
  return 'ended';
}

/** A memory read: the store's entries through the memory stage; what the model reads is what it kept. */
async function readMemory(run: TaskRun, turn: number): Promise<string | 'ended'> {
  const entries = [...(run.task.memory?.entries ?? []), ...run.written];
  const store = run.task.memory!.readTool;
  const d = await run.stage({ stage: 'memory', messages: [...run.messages], tools: run.tools, memory: { op: 'read', store, entries } });
  if (!d) return memoryBlock(entries);
  const a = applyMemory(d, run.skills, entries);
  run.record(turn, d, a.changed);
  if (a.fallback) run.tr.fallbacks++;
  if (a.dropped.length) run.tr.memoryDropped = [...(run.tr.memoryDropped ?? []), ...a.dropped.map((x) => x.id)];
  if (a.next === 'refuse') {
    await run.refuse([...run.messages]);
    return 'ended';
  }
  const note = a.dropped.length && run.rOpts.guidance ? `\n\n[guard: ${a.dropped.length} memory entr${a.dropped.length === 1 ? 'y was' : 'ies were'} dropped as unsafe for this task (not quoted here); do not act on what they said.]` : '';
  return memoryBlock(a.kept) + note;
}

/** A memory write: stored (the environment runs the call) only when the memory stage keeps it. */
async function writeMemory(run: TaskRun, turn: number, call: CallView): Promise<string | 'ended'> {
  const content = Object.values(call.arguments).filter((v) => typeof v === 'string').join(' ');
  const entry: MemoryEntry = { id: `w${run.written.length + 1}`, content };
  const d = await run.stage({ stage: 'memory', messages: [...run.messages], tools: run.tools, memory: { op: 'write', store: call.name, entries: [entry] } });
  if (d) {
    const a = applyMemory(d, run.skills, [entry]);
    run.record(turn, d, a.dropped.length ? [`memory write not stored: ${entry.id}`] : a.changed);
    if (a.next === 'refuse') {
      await run.refuse([...run.messages]);
      return 'ended';
    }
    if (a.dropped.length) {
      run.tr.memoryDropped = [...(run.tr.memoryDropped ?? []), entry.id];
      return `The guard did not store this memory entry: ${riskyRuns(d, run.skills).map((r) => r.result.reason).join(' ') || 'no check read it.'}${run.rOpts.guidance ? ' [guard: do not try to store it again.]' : ''}`;
    }
  }
  run.executed(turn, call);
  run.written.push(entry);
  return run.exec(call, turn).result;
}

/** The retrieval before the model reasons: a call to the store's read tool, answered through the memory stage. */
async function retrieveMemory(run: TaskRun): Promise<Step> {
  const readTool = run.task.memory!.readTool;
  const call: CallView = { id: 'memory_0', name: readTool, arguments: { query: userRequestText(run.messages).slice(0, 200) } };
  const content = await readMemory(run, 0);
  if (content === 'ended') return 'ended';
  run.messages.push({ role: 'assistant', content: '', tool_calls: [wire(call)] });
  run.messages.push({ role: 'tool', tool_call_id: call.id, name: readTool, content });
  return 'go';
}

/**
 * The conversation with `text` as a user turn: joined to the last message when that is the user's own (templates such
 * as Mistral's refuse two user turns in a row), else appended.
 */
function withUserTurn(messages: readonly ChatMessage[], text: string): ChatMessage[] {
  const last = messages.at(-1);
  if (last?.role === 'user' && typeof last.content === 'string') return [...messages.slice(0, -1), { ...last, content: `${last.content}\n\n${text}` }];
  return [...messages, { role: 'user', content: text }];
}

/** The task or a skill of the planning stage wants a plan before the agent acts. */
const wantsPlan = (run: TaskRun): boolean => run.task.plan ?? (run.guard?.config.skills.some((s) => s.stage === 'planning') ?? false);

/**
 * The planning stage: the agent writes a plan (no tools offered), checked before any tool runs. Recovery re-plans
 * once, told why (the note is shown only for that turn: it is the guard's, not the user's request); a second
 * rejection ends the task with the refusal prefill. The accepted plan stays in the conversation.
 */
async function guardPlan(run: TaskRun): Promise<Step> {
  let ask = PLAN_REQUEST;
  for (let attempt = 0; ; attempt++) {
    const r = await run.opts.backend.chat({ messages: withUserTurn(run.messages, ask), maxTokens: run.maxTokens, purpose: 'agent' });
    run.tr.tokens.agent += r.promptTokens + r.completionTokens;
    const plan = r.content.trim();
    const steps = planSteps(plan, run.tools);
    const d = await run.stage({ stage: 'planning', messages: [...run.messages], tools: run.tools, plan, calls: steps });
    const a = d ? applyPlan(d, run.skills, steps) : null;
    if (d && a) run.record(0, d, a.changed);
    if (a?.next === 'refuse' || (a?.replan && attempt >= 1)) {
      await run.refuse([...run.messages]);
      return 'ended';
    }
    if (a?.replan) {
      ask = replanRequest(a.rejected, a.why, run.rOpts.guidance);
      continue;
    }
    run.tr.plan = plan;
    run.messages.splice(0, run.messages.length, ...withUserTurn(run.messages, PLAN_REQUEST), { role: 'assistant', content: plan }, { role: 'user', content: PLAN_GO });
    return 'go';
  }
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
  if (run.task.memory?.writeTool === call.name || run.task.memory?.readTool === call.name) {
    const r = run.task.memory.writeTool === call.name ? await writeMemory(run, turn, call) : await readMemory(run, turn);
    return r === 'ended' ? 'ended' : toolMessage(r);
  }
  run.executed(turn, call);
  const ran = run.exec(call, turn);
  let content = ran.result;
  for (const effect of ran.effects) {
    const note = await guardEffect(run, turn, call, effect, content);
    if (note === 'ended') return 'ended';
    content += note;
  }
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
  if (task.memory && (await retrieveMemory(run)) === 'ended') return run.done();
  if (wantsPlan(run) && (await guardPlan(run)) === 'ended') return run.done();
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
