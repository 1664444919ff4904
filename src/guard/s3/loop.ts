/**
 * The multi-turn agent loop with the S³ guard at every stage and simulated tools:
 *
 *   input ─▶ [model turn ─▶ tool_selection ─▶ per call: tool_execution ─▶ run (simulated) ─▶ tool_observation]* ─▶ output
 *
 * A model turn without tool calls is the final answer (output stage). Decisions: `recover` applies the stage's
 * recovery (`recovery.ts`; input → the refusal prefill), `block` ends the task with the refusal prefill on the
 * conversation as it stood before the turn. Without a guard (`guard: null`) this is the plain agent loop.
 * Everything is recorded: messages, every stage decision, the executed calls (for scoring), tokens and latency.
 */
import type { ToolSpec } from '../../data/types.ts';
import { parseToolCalls } from '../../outcome/parse-calls.ts';
import { findRefusalPhrases } from '../../outcome/refusal.ts';
import { checkCall } from '../../outcome/validate.ts';
import { REFUSAL_PREFIX } from '../prompts.ts';
import type { ChatBackend, ChatMessage } from '../types.ts';
import type { CheckEnv } from './check.ts';
import { parseArguments, type CallView, type StageEvent } from './event.ts';
import { riskyRuns, runStage, type S3Config, type StageDecision } from './guard.ts';
import { recoverAnswer, recoverCalls, recoverObservation } from './recovery.ts';
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
  tokens: { agent: number; guard: number; refusal: number };
  latencyMs: number;
}

function record(turn: number, d: StageDecision, changed: string[]): RecordedDecision {
  return {
    turn, stage: d.stage, triggered: d.triggered, filtered: d.filtered, picked: d.picked, guardAgent: d.guardAgent, invoked: d.invoked, risky: d.risky,
    action: d.action,
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
    taskId: task.id, group: task.group, messages, decisions: [], executed: [], final: null, turns: 0, gic: 0, rsc: 0,
    tokens: { agent: 0, guard: 0, refusal: 0 }, latencyMs: 0,
  };
  const guard = opts.guard;
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
    tr.decisions.push(record(0, inputDecision, inputDecision.action === 'pass' ? [] : ['request refused (refusal prefill)']));
    if (inputDecision.action !== 'pass') {
      await refuse([...messages]);
      return done();
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
        if (d.action === 'block') {
          tr.decisions.push(record(turn, d, ['answer withheld (refusal)']));
          await refuse(before);
          return done();
        }
        if (d.action === 'recover') {
          const r = recoverAnswer(text, riskyRuns(d, guard!.config.skills));
          text = r.content;
          tr.decisions.push(record(turn, d, r.removed.length ? r.removed.map((s) => `redacted: ${s}`) : ['answer replaced']));
        } else tr.decisions.push(record(turn, d, []));
      }
      messages.push({ role: 'assistant', content: text });
      tr.final = { text, refusal: findRefusalPhrases(text).length > 0, blocked: false };
      return done();
    }
    // tool_selection
    const sel = await stage(turn, { stage: 'tool_selection', messages: before, tools, calls });
    let blocked = new Map<string, string>();
    if (sel) {
      if (sel.action === 'block') {
        tr.decisions.push(record(turn, sel, calls.map((c) => `call not executed: ${c.name}`)));
        await refuse(before);
        return done();
      }
      if (sel.action === 'recover') {
        const r = recoverCalls(calls, riskyRuns(sel, guard!.config.skills));
        blocked = new Map(r.blocked.map((b) => [b.call.id, b.result]));
        tr.decisions.push(record(turn, sel, r.blocked.map((b) => `call replaced by a tool result: ${b.call.name}`)));
      } else tr.decisions.push(record(turn, sel, []));
    }
    messages.push({ role: 'assistant', content: prose.trim(), tool_calls: calls.map(wire) });
    for (const call of calls) {
      const replaced = blocked.get(call.id);
      if (replaced !== undefined) {
        messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content: replaced });
        continue;
      }
      const ex = await stage(turn, { stage: 'tool_execution', messages: [...messages], tools, calls: [call] });
      if (ex) {
        if (ex.action === 'block') {
          tr.decisions.push(record(turn, ex, [`call not executed: ${call.name}`]));
          await refuse(before);
          return done();
        }
        if (ex.action === 'recover') {
          const r = recoverCalls([call], riskyRuns(ex, guard!.config.skills));
          tr.decisions.push(record(turn, ex, [`call replaced by a tool result: ${call.name}`]));
          messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content: r.blocked[0]?.result ?? '' });
          continue;
        }
        tr.decisions.push(record(turn, ex, []));
      }
      tr.executed.push({ turn, name: call.name, valid: checkCall({ name: call.name, arguments: call.arguments, source: '' }, tools).argsValid });
      let content = task.simulate(call, turn);
      const obs = await stage(turn, { stage: 'tool_observation', messages: [...messages], tools, observation: { callId: call.id, name: call.name, content } });
      if (obs) {
        if (obs.action === 'block') {
          tr.decisions.push(record(turn, obs, [`observation of ${call.name} withheld`]));
          await refuse(before);
          return done();
        }
        if (obs.action === 'recover') {
          const r = recoverObservation(content, riskyRuns(obs, guard!.config.skills), call.name);
          content = r.content;
          tr.decisions.push(record(turn, obs, r.removed.length ? r.removed.map((s) => `removed: ${s}`) : [`observation of ${call.name} replaced`]));
        } else tr.decisions.push(record(turn, obs, []));
      }
      messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content });
    }
  }
  return done();
}
