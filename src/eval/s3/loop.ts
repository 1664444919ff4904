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

export async function runTask(task: S3Task, opts: LoopOptions): Promise<Trajectory> {
  const t0 = performance.now();
  const backend = opts.backend;
  const maxSteps = opts.maxSteps ?? 6;
  const maxTokens = opts.maxTokens ?? 256;
  const prefix = opts.refusalPrefix ?? REFUSAL_PREFIX;
  const tools: ToolSpec[] = task.tools;
  const messages: ChatMessage[] = task.messages.map((m) => ({ ...m }));
  const tr: Trajectory = {
    taskId: task.id, group: task.group, messages, decisions: [], executed: [], final: null, turns: 0, gic: 0, rsc: 0, fallbacks: 0, incidents: [],
    tokens: { agent: 0, guard: 0, refusal: 0 }, latencyMs: 0,
  };
  const guard = opts.guard;
  const rOpts = { guidance: guard?.config.guidance !== false };
  const stage = async (turn: number, e: StageEvent): Promise<StageDecision | null> => {
    if (!guard) return null;
    const d = await runStage(e, guard.config, guard.env);
    tr.tokens.guard += d.tokens;
    if (d.invoked) tr.gic++;
    if (d.action !== 'pass') tr.rsc++;
    return d;
  };
  const refuse = async (history: ChatMessage[]) => {
    const r = await backend.chat({ messages: history, prefix, maxTokens, purpose: 'refusal' });
    tr.tokens.refusal += r.promptTokens + r.completionTokens;
    tr.final = { text: r.content, refusal: true, blocked: true };
    messages.push({ role: 'assistant', content: r.content });
  };
  const done = () => {
    tr.latencyMs = performance.now() - t0;
    return tr;
  };

  const inputDecision = await stage(0, { stage: 'input', messages: [...messages], tools });
  if (inputDecision) {
    const original = [...messages];
    let rewritten = false;
    const flagged = inputDecision.action === 'recover' ? riskyRuns(inputDecision, guard!.config.skills) : [];
    // a probe scores the agent's own prefill of the whole request: it names no component to drop, so it refuses
    if (flagged.length && guard!.config.inputRecovery !== 'refuse' && flagged.every((r) => r.skill.check !== 'probe')) {
      // input recovery: the guard drops the harmful component; the rewrite is checked again before the task goes on
      const runs = flagged;
      const rw = await rewriteRequest(messages, runs, guard!.env);
      tr.tokens.guard += rw.tokens;
      if (rw.request !== null) {
        const note = rOpts.guidance ? `[guard: part of this request was removed as unsafe (${runs.map((r) => r.result.reason).join(' ')}); do only what remains.]` : '';
        const next = withRewrittenRequest(messages, rw.request, note);
        tr.decisions.push(record(0, inputDecision, [`request rewritten: ${rw.request}`]));
        const again = await stage(0, { stage: 'input', messages: next, tools });
        tr.decisions.push(record(0, again!, again!.action === 'pass' ? [] : ['rewritten request refused (refusal prefill)']));
        if (again!.action === 'pass') {
          messages.splice(0, messages.length, ...next);
          rewritten = true;
        } else {
          await refuse(original);
          return done();
        }
      }
    }
    if (!rewritten) {
      const a = applyInput(inputDecision);
      tr.decisions.push(record(0, inputDecision, a.changed));
      if (a.next === 'refuse') {
        await refuse(original);
        return done();
      }
    }
  }
  for (let turn = 0; turn < maxSteps; turn++) {
    tr.turns = turn + 1;
    const before = [...messages];
    const reply = await backend.chat({ messages: before, tools, maxTokens, purpose: 'agent' });
    tr.tokens.agent += reply.promptTokens + reply.completionTokens;
    const { calls, prose } = replyCalls(reply.content, reply.toolCalls, backend, turn);
    if (calls.length === 0) {
      let text = prose.trim();
      const d = await stage(turn, { stage: 'output', messages: before, tools, answer: text });
      if (d) {
        const a = applyAnswer(d, guard!.config.skills, text);
        tr.decisions.push(record(turn, d, a.changed));
        if (a.next === 'refuse') {
          await refuse(before);
          return done();
        }
        if (a.fallback) tr.fallbacks++;
        text = a.content;
      }
      // incident response tells the user what happened
      if (tr.incidents.length) text += incidentUserReport(tr.incidents);
      messages.push({ role: 'assistant', content: text });
      tr.final = { text, refusal: findRefusalPhrases(text).length > 0, blocked: false };
      return done();
    }
    // tool_selection
    const sel = await stage(turn, { stage: 'tool_selection', messages: before, tools, calls });
    let blocked = new Map<string, string>();
    if (sel) {
      const a = applyCalls(sel, guard!.config.skills, calls, rOpts);
      tr.decisions.push(record(turn, sel, a.changed));
      if (a.next === 'refuse') {
        await refuse(before);
        return done();
      }
      blocked = new Map(a.blocked.map((b) => [b.call.id, b.result]));
    }
    messages.push({ role: 'assistant', content: prose.trim(), tool_calls: calls.map(wire) });
    let containedBy: Incident | null = null;
    for (const call of calls) {
      const replaced = blocked.get(call.id);
      if (replaced !== undefined) {
        messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content: replaced });
        continue;
      }
      // containment: the rest of the turn after an incident, and any later call of a tool that caused one
      const stopper = containedBy ?? tr.incidents.find((i) => i.call.name === call.name);
      if (stopper) {
        if (containedBy) containedBy.contained.push(call.name);
        messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content: `Not executed: the guard stopped this chain of calls after the incident with ${stopper.call.name}.` });
        continue;
      }
      const ex = await stage(turn, { stage: 'tool_execution', messages: [...messages], tools, calls: [call] });
      if (ex) {
        if (ex.action === 'respond') {
          // the call runs (the incident), then contain, remediate, tell
          tr.executed.push({ turn, name: call.name, valid: checkCall({ name: call.name, arguments: call.arguments, source: '' }, tools).argsValid });
          const result = task.simulate(call, turn);
          const reason = riskyRuns(ex, guard!.config.skills).map((r) => r.result.reason).join(' ');
          const inc = respondToIncident(call, result, reason, tools, (c) => task.simulate(c, turn), turn);
          tr.incidents.push(inc);
          containedBy = inc;
          tr.decisions.push(record(turn, ex, [`incident: ${call.name} ran; ${inc.remediation ? `undone with ${inc.remediation.name}` : inc.note}`]));
          messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content: result + incidentAgentNote(inc) });
          continue;
        }
        const a = applyCalls(ex, guard!.config.skills, [call], rOpts);
        tr.decisions.push(record(turn, ex, a.changed));
        if (a.next === 'refuse') {
          await refuse(before);
          return done();
        }
        if (a.blocked.length > 0) {
          messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content: a.blocked[0]!.result });
          continue;
        }
      }
      tr.executed.push({ turn, name: call.name, valid: checkCall({ name: call.name, arguments: call.arguments, source: '' }, tools).argsValid });
      let content = task.simulate(call, turn);
      const obs = await stage(turn, { stage: 'tool_observation', messages: [...messages], tools, observation: { callId: call.id, name: call.name, content } });
      if (obs) {
        const a = applyObservation(obs, guard!.config.skills, content, call.name, rOpts);
        tr.decisions.push(record(turn, obs, a.changed));
        if (a.next === 'refuse') {
          await refuse(before);
          return done();
        }
        if (a.fallback) tr.fallbacks++;
        content = a.content;
      }
      messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content });
    }
  }
  return done();
}
