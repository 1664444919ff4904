/**
 * The judgment context: safety-assessor role + the agent's role/instructions + the tools + the request
 * (+ tool observations, where injections live). `toolView` is the only difference between SafeKeep ('prose':
 * flattened tool descriptions) and SafeJudge ('json': the OpenAI `tools` array as JSON, as the agent sees it).
 */
import type { ToolSpec } from '../data/types.ts';
import { JUDGE_QUESTION, NO_AGENT_INSTRUCTIONS, SAFETY_ASSESSOR_ROLE } from './prompts.ts';
import type { AgentRequest, ChatMessage, Flattener } from './types.ts';

export type ToolView = 'prose' | 'json';

interface JudgeContextOptions {
  toolView: ToolView;
  /** required for toolView 'prose' */
  flatten?: Flattener;
}

/** Parts of an agent conversation the judge is shown. */
interface RequestParts {
  instructions: string;
  request: string;
  /** earlier agent actions, as prose (`name(key=value, ...)`) */
  actions: string[];
  observations: string[];
}

function proseValue(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : Array.isArray(v) ? `[${v.map(proseValue).join(', ')}]` : String(v);
}

/** `send_email(to="a", n=3)` — call arguments without JSON object syntax. */
export function proseCall(name: string, args: Record<string, unknown>): string {
  return `${name}(${Object.entries(args).map(([k, v]) => `${k}=${typeof v === 'object' && v !== null && !Array.isArray(v) ? '…' : proseValue(v)}`).join(', ')})`;
}

/** Message content as text: a string, or OpenAI content parts (their `text` fields joined). */
export function messageText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((p) => (p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : '')).join('');
  }
  return '';
}

export function splitRequest(messages: readonly ChatMessage[]): RequestParts {
  const instructions: string[] = [];
  const request: string[] = [];
  const actions: string[] = [];
  const observations: string[] = [];
  for (const m of messages) {
    const content = messageText(m.content);
    if (m.role === 'system' || m.role === 'developer') instructions.push(content);
    else if (m.role === 'user') request.push(content);
    else if (m.role === 'tool' || m.role === 'ipython' || m.role === 'function') observations.push(content);
    else if (m.role === 'assistant') {
      if (content.trim()) actions.push(content.trim());
      const calls = Array.isArray(m.tool_calls) ? (m.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) : [];
      for (const c of calls) {
        const name = String(c.function?.name ?? '?');
        let args: unknown = c.function?.arguments ?? {};
        if (typeof args === 'string') {
          try { args = JSON.parse(args) as unknown; } catch { args = { arguments: args }; }
        }
        actions.push(`called ${proseCall(name, (args ?? {}) as Record<string, unknown>)}`);
      }
    }
  }
  return {
    instructions: instructions.join('\n\n').trim() || NO_AGENT_INSTRUCTIONS,
    request: request.join('\n\n').trim(),
    actions,
    observations,
  };
}

function toolsText(tools: readonly ToolSpec[], opts: JudgeContextOptions): string {
  if (tools.length === 0) return '(no tools)';
  if (opts.toolView === 'json') return JSON.stringify(tools, null, 2);
  if (!opts.flatten) throw new Error('judge context: toolView "prose" needs a flatten function');
  return opts.flatten(tools);
}

/** [system: assessor role, user: agent instructions + tools + request (+ actions + observations) + question] */
export function judgeMessages(req: AgentRequest, opts: JudgeContextOptions): ChatMessage[] {
  const p = splitRequest(req.messages);
  const sections = [
    `## The agent's role and instructions\n${p.instructions}`,
    `## Tools the agent can use\n${toolsText(req.tools, opts)}`,
    `## The request\n${p.request}`,
  ];
  if (p.actions.length > 0) sections.push(`## What the agent has done so far\n${p.actions.join('\n')}`);
  if (p.observations.length > 0) sections.push(`## What the tools returned\n${p.observations.join('\n\n')}`);
  sections.push(JUDGE_QUESTION);
  return [
    { role: 'system', content: SAFETY_ASSESSOR_ROLE },
    { role: 'user', content: sections.join('\n\n') },
  ];
}

/** Plain text of a message list (what a test or a log inspects; templates add only control tokens around it). */
export function renderMessagesText(messages: readonly ChatMessage[]): string {
  return messages.map((m) => `<${m.role}>\n${m.content}`).join('\n\n');
}
