/**
 * The stages of an agent loop where S³ (multi-stage defense) can act, named once here.
 *
 * - input: the user request (and the agent's instructions), before the model sees it.
 * - tool_selection: the model's tool calls, before any of them runs.
 * - tool_execution: one call being executed (only for executors we control, e.g. simulated tools).
 * - tool_observation: a tool result, before the model sees it (where indirect injections enter).
 * - output: the final answer, before it is returned.
 */
export const STAGES = ['input', 'tool_selection', 'tool_execution', 'tool_observation', 'output'] as const;
export type Stage = (typeof STAGES)[number];

export function isStage(s: unknown): s is Stage {
  return typeof s === 'string' && (STAGES as readonly string[]).includes(s);
}
