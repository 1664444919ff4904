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
import { proseCall, proseKey, proseValue } from './prose-value.ts';
import { proseToolView } from './tool-view.ts';
import type { AgentRequest, ChatMessage, Flattener } from './types.ts';

export { proseCall };

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

/** Message content as text: a string, or OpenAI content parts (their `text` fields joined). */
export function messageText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((p) => {
      const q = (p ?? {}) as { text?: unknown; refusal?: unknown };
      return typeof q.text === 'string' ? q.text : typeof q.refusal === 'string' ? q.refusal : '';
    }).join('');
  }
  return '';
}

/** `(from NAME) ` for a message that names its author (templates print the name; so does the judge's view) */
const from = (m: ChatMessage) => (typeof m.name === 'string' && m.name !== '' ? `(from ${JSON.stringify(m.name)}) ` : '');

/** a wire call's arguments as an object (JSON text parsed; text that is not a JSON object kept whole) */
function callArgs(args: unknown): Record<string, unknown> {
  if (typeof args === 'string') {
    try {
      const v = JSON.parse(args) as unknown;
      return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : { arguments: args };
    } catch {
      return { arguments: args };
    }
  }
  return args !== null && typeof args === 'object' && !Array.isArray(args) ? (args as Record<string, unknown>) : {};
}

export function splitRequest(messages: readonly ChatMessage[]): RequestParts {
  const instructions: string[] = [];
  const request: string[] = [];
  const actions: string[] = [];
  const observations: string[] = [];
  for (const m of messages) {
    const content = `${from(m)}${messageText(m.content)}`;
    if (m.role === 'system' || m.role === 'developer') instructions.push(content);
    else if (m.role === 'user') request.push(content);
    else if (m.role === 'tool' || m.role === 'ipython' || m.role === 'function') observations.push(content);
    else if (m.role === 'assistant') {
      if (typeof m.reasoning_content === 'string' && m.reasoning_content.trim()) actions.push(`reasoned: ${JSON.stringify(m.reasoning_content)}`);
      if (content.trim()) actions.push(content.trim());
      if (typeof m.refusal === 'string' && m.refusal.trim()) actions.push(`refused: ${JSON.stringify(m.refusal)}`);
      const calls = Array.isArray(m.tool_calls) ? (m.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) : [];
      const legacy = m.function_call as { name?: unknown; arguments?: unknown } | undefined;
      for (const f of [...calls.map((c) => c.function), ...(legacy ? [legacy] : [])]) {
        actions.push(`called ${proseCall(String(f?.name ?? '?'), callArgs(f?.arguments ?? {}))}`);
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
  return proseToolView(tools, opts.flatten);
}

/** The request's other settings that carry text (stop strings, a JSON-schema response format …), one per line. */
function settingsText(settings: Readonly<Record<string, unknown>>): string {
  return Object.entries(settings).map(([k, v]) => `${proseKey(k)}: ${proseValue(v)}`).join('\n');
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
  if (req.settings && Object.keys(req.settings).length > 0) parts.push(['## Other settings of the request', settingsText(req.settings)]);
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
