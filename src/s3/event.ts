/**
 * What the guard sees at a stage: the conversation up to that point plus the stage's own item (the proposed calls,
 * the call being executed, the tool result, the final answer). Built by the agent loop (`loop.ts`) and by the proxy.
 */
import type { ToolSpec } from '../data/types.ts';
import { messageText, proseCall } from '../guard/judge-context.ts';
import { conversationView, viewText } from '../guard/view.ts';
import { proseKey, proseValue } from '../guard/prose-value.ts';
import type { ChatMessage } from '../guard/types.ts';
import type { Stage } from './stages.ts';

/** One memory entry: its id in the store and its text. */
export interface MemoryEntry {
  id: string;
  content: string;
}

/** A tool call with parsed arguments. */
export interface CallView {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

export interface StageEvent {
  stage: Stage;
  /**
   * The conversation before the stage's item (OpenAI wire messages): for `input` the whole request (every message
   * the client sent, its assistant turns and tool results included: whatever the client wrote is judged for harm
   * there; the tool results are checked for injections at tool_observation besides); for
   * `tool_selection` everything before the assistant turn that proposes the calls; for `tool_observation` everything
   * before the tool message; for `output` everything before the final answer.
   */
  messages: ChatMessage[];
  /** the agent's tools */
  tools: ToolSpec[];
  /** tool_selection: the proposed calls; tool_execution: the one call being executed */
  calls?: CallView[];
  /** tool_observation: the tool result */
  observation?: { callId: string; name: string; content: string };
  /** output: the final answer */
  answer?: string;
  /** planning: the plan as the agent wrote it (its steps, each naming the tool it uses, are `calls`: ids `step-<i>`) */
  plan?: string;
  /** memory: the entries retrieved from (read) or about to be written to (write) the store named `store` */
  memory?: { op: 'read' | 'write'; store: string; entries: MemoryEntry[] };
  /**
   * input, behind a server: the request's settings that carry client text besides messages and tools (`stop`,
   * `user`, the model name, a JSON-schema `response_format`): the upstream receives them, so the input judge sees them
   */
  settings?: Readonly<Record<string, unknown>>;
}

/** Memory entries as the agent (and a check) reads them: one `[memory <id>] text` line each. */
export function memoryBlock(entries: readonly MemoryEntry[]): string {
  return entries.length ? entries.map((x) => `[memory ${x.id}] ${x.content.replace(/\s+/g, ' ').trim()}`).join('\n') : '(no entries)';
}

/** The user's request text (all user messages). */
export function userRequestText(messages: readonly ChatMessage[]): string {
  return messages.filter((m) => m.role === 'user').map((m) => messageText(m.content)).join('\n\n');
}

/** The text the filter patterns and checks look at, per stage. */
export function stageText(e: StageEvent): string {
  switch (e.stage) {
    // the whole request as the one judge view shows it (guard/view.ts): every turn the client wrote, reasoning,
    // call arguments and tool results included, and the settings that carry text
    case 'input': return viewText({ ...conversationView(e.messages), settings: Object.entries(e.settings ?? {}).map(([k, v]) => `${proseKey(k)}: ${proseValue(v)}`).join('\n') });
    case 'tool_selection':
    case 'tool_execution': return (e.calls ?? []).map((c) => proseCall(c.name, c.arguments)).join('\n');
    case 'tool_observation': return e.observation?.content ?? '';
    case 'output': return e.answer ?? '';
    case 'planning': return e.plan ?? (e.calls ?? []).map((c) => proseCall(c.name, c.arguments)).join('\n');
    case 'memory': return (e.memory?.entries ?? []).map((x) => x.content).join('\n\n');
  }
}

/** Tool names the event involves. */
export function stageTools(e: StageEvent): string[] {
  if (e.stage === 'tool_observation') return e.observation ? [e.observation.name] : [];
  if (e.stage === 'input') return e.tools.map((t) => t.function.name);
  if (e.stage === 'memory') return e.memory ? [e.memory.store] : [];
  return (e.calls ?? []).map((c) => c.name);
}

/** Roles of the messages the event is about. */
export function stageRoles(e: StageEvent): string[] {
  switch (e.stage) {
    case 'input': return [...new Set(e.messages.map((m) => m.role))];
    case 'tool_observation': return ['tool'];
    case 'memory': return ['memory'];
    default: return ['assistant'];
  }
}

/** Parse wire `arguments` (JSON text or an object); unparseable text becomes `{arguments: text}`. */
export function parseArguments(args: unknown): Record<string, unknown> {
  if (typeof args === 'string') {
    try {
      const v = JSON.parse(args) as unknown;
      return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : { arguments: v };
    } catch {
      return { arguments: args };
    }
  }
  return args && typeof args === 'object' && !Array.isArray(args) ? (args as Record<string, unknown>) : {};
}

/** Calls made so far in a conversation (assistant `tool_calls`), in order. */
export function callsSoFar(messages: readonly ChatMessage[]): CallView[] {
  const out: CallView[] = [];
  for (const m of messages) {
    if (m.role !== 'assistant' || !Array.isArray(m.tool_calls)) continue;
    for (const c of m.tool_calls as { id?: string; function?: { name?: string; arguments?: unknown } }[]) {
      out.push({ id: String(c.id ?? ''), name: String(c.function?.name ?? ''), arguments: parseArguments(c.function?.arguments) });
    }
  }
  return out;
}

/** Tool results seen so far, in order. */
export function observationsSoFar(messages: readonly ChatMessage[]): { name: string; content: string }[] {
  return messages.filter((m) => m.role === 'tool').map((m) => ({ name: String(m.name ?? ''), content: messageText(m.content) }));
}
