/**
 * S³ in front of a real agent (the proxy's per-request flow). An OpenAI-compatible request carries the whole
 * trajectory and the proxy is stateless: only the messages after the last assistant turn are new.
 *
 * 1. input: when the new messages include a user message, the input skills check the request; a risk → refusal.
 * 2. tool_observation: each new `tool` message is checked; recovery rewrites it before it goes upstream.
 * 3. the upstream answers (the client's own body, messages replaced, not streamed).
 * 4. tool_selection: its `tool_calls` are checked before the client executes them. Recovery drops the risky calls;
 *    when none is left, the blocked calls and their "blocked, and why" results are appended to the conversation and
 *    the upstream is asked again (at most `maxRounds` times), so the model can finish the benign part.
 * 5. output: an answer without calls is checked before it is returned; recovery redacts it.
 * A `block` anywhere → the refusal (prefix prefilled, continued by the upstream) instead.
 */
import type { ToolSpec } from '../../data/types.ts';
import type { ChatMessage, WireToolCall } from '../types.ts';
import { messageText } from '../judge-context.ts';
import type { CheckEnv } from './check.ts';
import { parseArguments, type CallView, type StageEvent } from './event.ts';
import { riskyRuns, runStage, type S3Config, type StageDecision } from './guard.ts';
import { recoverAnswer, recoverCalls, recoverObservation } from './recovery.ts';

/** What the upstream said. */
export interface UpstreamTurn {
  content: string | null;
  toolCalls: WireToolCall[];
  finish: string;
  promptTokens: number;
  completionTokens: number;
}

interface ProxyStageDecision {
  decision: StageDecision;
  /** what was changed (removed spans, replaced calls, redactions) */
  changed: string[];
}

interface ProxyFlowResult {
  /** the assistant message for the client */
  content: string | null;
  toolCalls: WireToolCall[];
  finish: string;
  action: 'forward' | 'recover' | 'refuse';
  decisions: ProxyStageDecision[];
  /** the messages sent upstream last (after rewriting) */
  upstreamMessages: ChatMessage[];
  usage: { promptTokens: number; completionTokens: number };
}

interface ProxyFlowOptions {
  config: S3Config;
  env: CheckEnv;
  /** one upstream call with these messages (the client's body otherwise) */
  upstream: (messages: ChatMessage[]) => Promise<UpstreamTurn>;
  /** the refusal for this conversation (prefix prefilled) */
  refuse: (messages: ChatMessage[]) => Promise<UpstreamTurn>;
  /** upstream rounds after replaced calls (default 3) */
  maxRounds?: number;
}

/** Index of the first message after the last assistant turn. */
export function newMessagesStart(messages: readonly ChatMessage[]): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.role === 'assistant') return i + 1;
  return 0;
}

const toView = (c: WireToolCall, i: number): CallView => ({ id: c.id ?? `call_${i}`, name: c.function.name, arguments: parseArguments(c.function.arguments) });

export async function s3ProxyFlow(messages: readonly ChatMessage[], tools: readonly ToolSpec[], o: ProxyFlowOptions): Promise<ProxyFlowResult> {
  const decisions: ProxyStageDecision[] = [];
  const usage = { promptTokens: 0, completionTokens: 0 };
  const work: ChatMessage[] = messages.map((m) => ({ ...m }));
  let action: ProxyFlowResult['action'] = 'forward';
  const skills = o.config.skills;
  const stage = async (e: StageEvent) => runStage(e, o.config, o.env);
  const add = (u: UpstreamTurn) => { usage.promptTokens += u.promptTokens; usage.completionTokens += u.completionTokens; };
  const refuse = async (history: ChatMessage[]): Promise<ProxyFlowResult> => {
    const r = await o.refuse(history);
    add(r);
    return { content: r.content, toolCalls: [], finish: 'stop', action: 'refuse', decisions, upstreamMessages: history, usage };
  };

  const start = newMessagesStart(work);
  const fresh = work.slice(start);
  if (fresh.some((m) => m.role === 'user')) {
    const d = await stage({ stage: 'input', messages: [...work], tools: [...tools] });
    decisions.push({ decision: d, changed: d.action === 'pass' ? [] : ['request refused'] });
    if (d.action !== 'pass') return refuse(work);
  }
  for (let i = start; i < work.length; i++) {
    const m = work[i]!;
    if (m.role !== 'tool') continue;
    const name = String(m.name ?? (work.slice(0, i).flatMap((x) => (x.tool_calls as WireToolCall[] | undefined) ?? []).find((c) => c.id === m.tool_call_id)?.function.name ?? ''));
    const content = messageText(m.content);
    const d = await stage({ stage: 'tool_observation', messages: work.slice(0, i), tools: [...tools], observation: { callId: String(m.tool_call_id ?? ''), name, content } });
    if (d.action === 'block') {
      decisions.push({ decision: d, changed: [`observation of ${name} withheld`] });
      return refuse(work.slice(0, i));
    }
    if (d.action === 'recover') {
      const r = recoverObservation(content, riskyRuns(d, skills), name);
      work[i] = { ...m, content: r.content };
      action = 'recover';
      decisions.push({ decision: d, changed: r.removed.length ? r.removed.map((s) => `removed: ${s}`) : [`observation of ${name} replaced`] });
    } else decisions.push({ decision: d, changed: [] });
  }

  const maxRounds = o.maxRounds ?? 3;
  let lastBlocked: string[] = [];
  for (let round = 0; round <= maxRounds; round++) {
    const before = [...work];
    const u = await o.upstream(before);
    add(u);
    if (u.toolCalls.length > 0) {
      const calls = u.toolCalls.map(toView);
      const d = await stage({ stage: 'tool_selection', messages: before, tools: [...tools], calls });
      if (d.action === 'block') {
        decisions.push({ decision: d, changed: calls.map((c) => `call not executed: ${c.name}`) });
        return refuse(before);
      }
      if (d.action === 'pass') {
        decisions.push({ decision: d, changed: [] });
        return { content: u.content, toolCalls: u.toolCalls, finish: u.finish, action, decisions, upstreamMessages: before, usage };
      }
      action = 'recover';
      const r = recoverCalls(calls, riskyRuns(d, skills));
      decisions.push({ decision: d, changed: r.blocked.map((b) => `call replaced by a tool result: ${b.call.name}`) });
      if (r.allowed.length > 0) {
        const keep = new Set(r.allowed.map((c) => c.id));
        return { content: u.content, toolCalls: u.toolCalls.filter((c, i) => keep.has(toView(c, i).id)), finish: u.finish, action, decisions, upstreamMessages: before, usage };
      }
      work.push({ role: 'assistant', content: u.content ?? '', tool_calls: u.toolCalls.map((c, i) => ({ ...c, id: toView(c, i).id })) });
      for (const b of r.blocked) work.push({ role: 'tool', tool_call_id: b.call.id, name: b.call.name, content: b.result });
      lastBlocked = r.blocked.map((b) => b.result);
      continue;
    }
    const text = u.content ?? '';
    const d = await stage({ stage: 'output', messages: before, tools: [...tools], answer: text });
    if (d.action === 'block') {
      decisions.push({ decision: d, changed: ['answer withheld'] });
      return refuse(before);
    }
    if (d.action === 'recover') {
      const r = recoverAnswer(text, riskyRuns(d, skills));
      decisions.push({ decision: d, changed: r.removed.length ? r.removed.map((s) => `redacted: ${s}`) : ['answer replaced'] });
      return { content: r.content, toolCalls: [], finish: u.finish, action: 'recover', decisions, upstreamMessages: before, usage };
    }
    decisions.push({ decision: d, changed: [] });
    return { content: text, toolCalls: [], finish: u.finish, action, decisions, upstreamMessages: before, usage };
  }
  // the model kept proposing blocked calls: tell the client what was blocked
  return { content: lastBlocked.join('\n'), toolCalls: [], finish: 'stop', action: 'recover', decisions, upstreamMessages: work, usage };
}
