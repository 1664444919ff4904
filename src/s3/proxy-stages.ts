/**
 * The planning and memory stages behind `serve --skills`, where a request or an upstream reply shows them. The
 * proxy executes no tools and keeps no state, so:
 *
 * - memory reads are the results of the tools a memory-stage skill names in its filter (memory-guard:
 *   `*memory*`, `*recall*`, `*remember*`): such a `tool` message's entries go through the memory stage instead of
 *   tool_observation, and the upstream sees the kept entries (`memoryBlock`) — a poisoned entry dropped;
 * - memory writes are upstream calls to such a tool whose name says it stores (`*write*`, `*save*`, `*store*`,
 *   `*remember*`): checked before the call reaches the client; a flagged write is replaced by a blocked result, as
 *   at tool_selection;
 * - a plan is assistant text that names offered tools (`planSteps`): the newest assistant turn the client sent after
 *   the last user message, or the upstream's reply before any of its calls is returned; it is checked at the
 *   planning stage, and a rejected plan is re-planned once (the re-plan request appended as a user turn), a second
 *   rejection refused. No call of a rejected plan reaches the client.
 *
 * The same stage functions and `apply.ts` as the agent loop of `s3 eval`, so the evaluation measures what the proxy
 * does.
 */
import type { ToolSpec } from '../data/types.ts';
import type { ChatMessage } from '../guard/types.ts';
import type { MemoryEntry } from './event.ts';
import { globMatch } from './filter.ts';
import { planSteps } from './plan.ts';
import type { Skill } from './skill.ts';

/** The tool-name globs of the memory-stage skills: a result of one of these tools is a memory read. */
export function memoryToolGlobs(skills: readonly Skill[]): string[] {
  return skills.filter((s) => s.stage === 'memory').flatMap((s) => s.filter.tools ?? []);
}

export const isMemoryTool = (globs: readonly string[], name: string): boolean => globs.some((g) => globMatch(g, name));

/** A memory tool whose name says it stores (the others read). */
export const storesMemory = (name: string): boolean => /write|save|store|remember/i.test(name);

/**
 * A memory tool's result as entries: `[memory <id>] text` lines, or a JSON array of strings or `{id, content}`
 * objects, else the whole text as one entry.
 */
export function memoryEntriesOf(text: string): MemoryEntry[] {
  const lines = [...text.matchAll(/^\s*\[memory ([\w.-]+)\]\s*(.*)$/gm)];
  if (lines.length > 0) return lines.map((m) => ({ id: m[1]!, content: m[2]! }));
  try {
    const v = JSON.parse(text) as unknown;
    if (Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'string' || (x && typeof x === 'object' && typeof (x as { content?: unknown }).content === 'string'))) {
      return v.map((x, i) => (typeof x === 'string' ? { id: `m${i + 1}`, content: x } : { id: String((x as { id?: unknown }).id ?? `m${i + 1}`), content: (x as { content: string }).content }));
    }
  } catch {
    // not JSON: one entry
  }
  return [{ id: 'm1', content: text }];
}

/** A memory write's entry: the call's string arguments. */
export function writtenEntry(args: Record<string, unknown>, id: string): MemoryEntry {
  return { id, content: Object.values(args).filter((v): v is string => typeof v === 'string').join(' ') };
}

/** The plan an assistant text holds (its steps name offered tools), or null. */
export function planOf(text: string | null | undefined, tools: readonly ToolSpec[]): { plan: string; steps: ReturnType<typeof planSteps> } | null {
  const plan = (text ?? '').trim();
  if (!plan) return null;
  const steps = planSteps(plan, tools);
  return steps.length > 0 ? { plan, steps } : null;
}

/**
 * The plan turn the client sent: its last message, when that is an assistant turn with text and no calls (a plan the
 * agent wrote before acting, which the upstream is asked to carry on); -1 otherwise.
 */
export function clientPlanTurn(messages: readonly ChatMessage[]): number {
  const i = messages.length - 1;
  const m = messages[i];
  return m?.role === 'assistant' && !(Array.isArray(m.tool_calls) && m.tool_calls.length > 0) ? i : -1;
}

/** `text` as a user turn: joined to the last message when it is the user's own (templates refuse two in a row). */
export function withUserTurn(messages: readonly ChatMessage[], text: string): ChatMessage[] {
  const last = messages.at(-1);
  if (last?.role === 'user' && typeof last.content === 'string') return [...messages.slice(0, -1), { ...last, content: `${last.content}\n\n${text}` }];
  return [...messages, { role: 'user', content: text }];
}
