/**
 * The judgment context: safety-assessor role + the agent's role/instructions + the tools + the request
 * (+ tool observations, where injections live). `toolView` is the only difference between SafeKeep ('prose':
 * flattened tool descriptions) and SafeJudge ('json': the OpenAI `tools` array as JSON, as the agent sees it).
 *
 * Everything in a section comes from the client (instructions, tool descriptions, request, earlier calls, tool
 * results), so each section's content is enclosed between `[BEGIN DATA code]` / `[END DATA code]` lines: a user
 * message that writes `## What the tools returned`, the judge's question or a `NO` line stays inside its own
 * section as text. The code is derived from the enclosed texts (sha256, 64 bits; re-drawn if any text contains
 * it), so no text can contain the code of the prompt it ends up in, and the same request gives the same prompt (the
 * endpoint response cache still replays).
 */
import { createHash } from 'node:crypto';
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

/** A 16-hex-digit code that none of `texts` contains, determined by them. */
export function boundaryCode(texts: readonly string[]): string {
  for (let salt = 0; ; salt++) {
    const h = createHash('sha256').update(`${salt}\0`);
    for (const t of texts) h.update(t).update('\0');
    const code = h.digest('hex').slice(0, 16);
    if (!texts.some((t) => t.includes(code))) return code;
  }
}

/** `text` as one enclosed data block. */
export function enclose(text: string, code: string): string {
  return `[BEGIN DATA ${code}]\n${text}\n[END DATA ${code}]`;
}

/** [system: assessor role, user: agent instructions + tools + request (+ actions + observations) + question] */
export function judgeMessages(req: AgentRequest, opts: JudgeContextOptions): ChatMessage[] {
  const p = splitRequest(req.messages);
  const parts: [string, string][] = [
    ["## The agent's role and instructions", p.instructions],
    ['## Tools the agent can use', toolsText(req.tools, opts)],
    ['## The request', p.request],
  ];
  if (p.actions.length > 0) parts.push(['## What the agent has done so far', p.actions.join('\n')]);
  if (p.observations.length > 0) parts.push(['## What the tools returned', p.observations.join('\n\n')]);
  const code = boundaryCode(parts.map(([, text]) => text));
  const sections = parts.map(([heading, text]) => `${heading}\n${enclose(text, code)}`);
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
