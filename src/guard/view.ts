/**
 * The one judge's view of a canonical request: every string the upstream (or the local template) receives, as
 * sections of text. Every guard builds what it shows a judge from this one function — SafeKeep ('prose' tools),
 * SafeJudge ('json' tools), the probe cascade's judge, S³'s input stage (its mandatory judge, its template skills'
 * `{{request}}` / `{{history}}` / `{{tools}}`, its filters' text) — so a part of the request cannot be shown to one
 * guard and dropped by another.
 *
 * Lossless over the request: message `name`s, `reasoning_content`, refusals, whitespace-only turns' other fields,
 * every call with all its arguments at any depth (JSON inside the `arguments` string read without loss: numbers with
 * the client's digits, duplicate keys refused upstream in `chat/body.ts`; text that is not a JSON object shown as
 * the raw string it is forwarded as), legacy `function_call`s, tool results and the names they carry, the tools
 * (prose + every part the flattener did not show, or the JSON itself) and the text-bearing settings.
 */
import type { ToolSpec } from '../data/types.ts';
import { parseJsonLossless } from '../util/json-lossless.ts';
import { NO_AGENT_INSTRUCTIONS } from './prompts.ts';
import { proseCall, proseKey, proseValue } from './prose-value.ts';
import { proseToolView } from './tool-view.ts';
import type { AgentRequest, ChatMessage, Flattener } from './types.ts';

export type ToolView = 'prose' | 'json';

export interface ViewOptions {
  toolView: ToolView;
  /** required for toolView 'prose' */
  flatten?: Flattener;
}

/** What a judge is shown of one request, by section. */
export interface JudgeView {
  /** system / developer messages: the agent's role and instructions */
  instructions: string;
  /** user messages */
  request: string;
  /** the assistant turns' text, reasoning, refusals and calls, in order */
  actions: string[];
  /** tool and function results, in order */
  observations: string[];
  /** assistant turns and tool results in conversation order (what a history placeholder shows) */
  history: string[];
  tools: string;
  /** the settings that carry client text, one per line ('' when none) */
  settings: string;
}

/** Message content as text: a string, or OpenAI content parts (their `text` / `refusal` fields joined). */
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

/**
 * One call as prose: `name(key=value, ...)` with the arguments read without loss; arguments that are not a JSON
 * object are shown as the raw text the template prints.
 */
export function viewCall(name: string, args: unknown): string {
  if (typeof args === 'string') {
    try {
      const v = parseJsonLossless(args, 'arguments');
      if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
        return proseCall(name, v as Record<string, unknown>);
      }
    } catch {
      // not JSON (or a duplicate key, which the parser refuses before a judge is asked): shown as written
    }
    return `${name} with raw arguments ${JSON.stringify(args)}`;
  }
  if (args !== null && typeof args === 'object' && !Array.isArray(args)) return proseCall(name, args as Record<string, unknown>);
  return `${name} with arguments ${proseValue(args)}`;
}

/** An assistant turn as the actions it shows: reasoning, text, refusal, every call. */
function assistantActions(m: ChatMessage): string[] {
  const out: string[] = [];
  const content = `${from(m)}${messageText(m.content)}`;
  if (typeof m.reasoning_content === 'string' && m.reasoning_content.trim()) out.push(`reasoned: ${JSON.stringify(m.reasoning_content)}`);
  if (content.trim()) out.push(content.trim());
  if (typeof m.refusal === 'string' && m.refusal.trim()) out.push(`refused: ${JSON.stringify(m.refusal)}`);
  const calls = Array.isArray(m.tool_calls) ? (m.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) : [];
  const legacy = m.function_call as { name?: unknown; arguments?: unknown } | undefined;
  for (const f of [...calls.map((c) => c.function), ...(legacy ? [legacy] : [])]) out.push(`called ${viewCall(String(f?.name ?? '?'), f?.arguments ?? {})}`);
  return out;
}

function toolsText(tools: readonly ToolSpec[], opts: ViewOptions): string {
  if (tools.length === 0) return '(no tools)';
  if (opts.toolView === 'json') return JSON.stringify(tools, null, 2);
  if (!opts.flatten) throw new Error('judge view: toolView "prose" needs a flatten function');
  return proseToolView(tools, opts.flatten);
}

/** The request's other settings that carry text (stop strings, a JSON-schema response format …), one per line. */
function settingsText(settings: Readonly<Record<string, unknown>> | undefined): string {
  return Object.entries(settings ?? {}).map(([k, v]) => `${proseKey(k)}: ${proseValue(v)}`).join('\n');
}

/** The conversation's parts without the tools (what does not depend on a tool view). */
export function conversationView(messages: readonly ChatMessage[]): Omit<JudgeView, 'tools' | 'settings'> {
  const instructions: string[] = [];
  const request: string[] = [];
  const actions: string[] = [];
  const observations: string[] = [];
  const history: string[] = [];
  for (const m of messages) {
    const content = `${from(m)}${messageText(m.content)}`;
    if (m.role === 'system' || m.role === 'developer') instructions.push(content);
    else if (m.role === 'user') request.push(content);
    else if (m.role === 'tool' || m.role === 'ipython' || m.role === 'function') {
      observations.push(content);
      history.push(`returned: ${JSON.stringify(content)}`);
    } else if (m.role === 'assistant') {
      const a = assistantActions(m);
      actions.push(...a);
      history.push(...a);
    }
  }
  return {
    instructions: instructions.join('\n\n').trim() || NO_AGENT_INSTRUCTIONS,
    request: request.join('\n\n').trim(),
    actions,
    observations,
    history,
  };
}

/** THE view: what every guard shows its judge of `req`. */
export function judgeView(req: AgentRequest, opts: ViewOptions): JudgeView {
  return { ...conversationView(req.messages), tools: toolsText(req.tools, opts), settings: settingsText(req.settings) };
}

/** The view as one text (every section, in order): what a filter or a rule matches against. */
export function viewText(v: Omit<JudgeView, 'tools'> & { tools?: string }): string {
  return [v.instructions, v.request, ...v.history, v.settings].filter((t) => t !== '').join('\n\n');
}
