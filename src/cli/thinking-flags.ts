/**
 * `--thinking on|off` and `--chat-template-kwargs JSON` (render, extract, reproduce, steer, guard eval): flag-table
 * rows and their parsing. Kept apart from run-flags.ts so `render` does not load the engine.
 */
import { choiceValue, type FlagDef, type ParsedArgs } from './args.ts';
import { parseTemplateKwargs, THINKING_VALUES, type ThinkingFlag } from '../prompts/thinking.ts';

/** --thinking and --chat-template-kwargs (render, extract, reproduce, steer, guard eval) */
export const THINKING_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'thinking', value: 'on|off', default: 'off where the template has a thinking switch', help: 'the template\'s enable_thinking (Qwen3)' },
  { name: 'chat-template-kwargs', value: 'JSON', default: '{}', help: 'extra chat-template variables, e.g. \'{"enable_thinking": false}\'' },
];

export function thinkingOptions(a: ParsedArgs): { thinking?: ThinkingFlag; chatTemplateKwargs: Record<string, unknown> } {
  const t = a.values.get('thinking');
  return {
    ...(t !== undefined ? { thinking: choiceValue(a, 'thinking', THINKING_VALUES, 'off') } : {}),
    chatTemplateKwargs: parseTemplateKwargs(a.values.get('chat-template-kwargs')),
  };
}
