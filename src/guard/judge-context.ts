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
import { JUDGE_QUESTION, SAFETY_ASSESSOR_ROLE } from './prompts.ts';
import { proseCall } from './prose-value.ts';
import type { AgentRequest, ChatMessage } from './types.ts';
import { judgeView, messageText, type JudgeView, type ToolView, type ViewOptions } from './view.ts';

export { proseCall, messageText };

export type { ToolView };

type JudgeContextOptions = ViewOptions;

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
  return judgePromptOf(judgeView(req, opts));
}

/** The judge's prompt for a view (the only way a judge prompt is made from a request: `judgeView`, then this). */
export function judgePromptOf(p: JudgeView): ChatMessage[] {
  const parts: [string, string][] = [
    ["## The agent's role and instructions", p.instructions],
    ['## Tools the agent can use', p.tools],
    ['## The request', p.request],
  ];
  if (p.actions.length > 0) parts.push(['## What the agent has done so far', p.actions.join('\n')]);
  if (p.observations.length > 0) parts.push(['## What the tools returned', p.observations.join('\n\n')]);
  if (p.settings !== '') parts.push(['## Other settings of the request', p.settings]);
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
