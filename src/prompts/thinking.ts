/**
 * Thinking models (Qwen3 thinks by default): one switch for the chat template's `enable_thinking` variable.
 * Analyses and evaluations run with thinking OFF by default on templates that read `enable_thinking` (the paper
 * measures the answer, not a reasoning trace); templates without the switch are unaffected ('n/a').
 * `--chat-template-kwargs JSON` passes any template variables; an explicit `enable_thinking` there wins over the
 * default, and `--thinking on|off` sets it.
 */
import { SafekeepError } from '../util/errors.ts';

export type ThinkingFlag = 'on' | 'off';
export const THINKING_VALUES: readonly ThinkingFlag[] = ['on', 'off'];

/** Whether a chat template has a thinking switch (reads `enable_thinking`). */
export function templateHasThinking(template: string): boolean {
  return /\benable_thinking\b/.test(template);
}

interface ResolvedTemplateKwargs {
  kwargs: Record<string, unknown>;
  /** what ran: 'on' / 'off' on a template with the switch, 'n/a' on one without */
  thinking: 'on' | 'off' | 'n/a';
}

/** Parse `--chat-template-kwargs` (a JSON object). */
export function parseTemplateKwargs(s: string | undefined, flag = '--chat-template-kwargs'): Record<string, unknown> {
  if (s === undefined) return {};
  let v: unknown;
  try {
    v = JSON.parse(s);
  } catch (e) {
    throw new SafekeepError(`${flag} must be a JSON object (${(e as Error).message})`);
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new SafekeepError(`${flag} must be a JSON object`);
  return v as Record<string, unknown>;
}

/**
 * Template kwargs of a run from the template text, `--thinking` and `--chat-template-kwargs`.
 * `--thinking on` on a template without the switch is an error (it would silently do nothing).
 */
export function resolveTemplateKwargs(template: string, thinking: ThinkingFlag | undefined, kwargs: Record<string, unknown> = {}): ResolvedTemplateKwargs {
  const has = templateHasThinking(template);
  if (thinking !== undefined && 'enable_thinking' in kwargs && Boolean(kwargs.enable_thinking) !== (thinking === 'on')) {
    throw new SafekeepError(`--thinking ${thinking} contradicts --chat-template-kwargs enable_thinking=${JSON.stringify(kwargs.enable_thinking)}`);
  }
  if (!has) {
    if (thinking === 'on') throw new SafekeepError('--thinking on: this chat template has no thinking switch (it never reads enable_thinking)');
    return { kwargs: { ...kwargs }, thinking: 'n/a' };
  }
  const on = 'enable_thinking' in kwargs ? Boolean(kwargs.enable_thinking) : thinking === 'on';
  return { kwargs: { ...kwargs, enable_thinking: on }, thinking: on ? 'on' : 'off' };
}
