/**
 * The stages of an agent loop where S³ (multi-stage defense) can act, named once here.
 *
 * - input: the user request (and the agent's instructions), before the model sees it.
 * - planning: the plan the agent writes before acting (a plan step the loop asks for when the task or a skill of
 *   this stage wants one), checked before any tool runs — where a backdoored chain-of-thought demonstration turns a
 *   trigger into an unsafe plan.
 * - memory: entries the agent retrieves from a memory store, checked before the model sees them, and entries it
 *   writes to the store, checked before they are stored — where a poisoned memory entry enters.
 * - tool_selection: the model's tool calls, before any of them runs.
 * - tool_execution: one call being executed (only for executors we control, e.g. simulated tools).
 * - tool_observation: a tool result, before the model sees it (where indirect injections enter).
 * - output: the final answer, before it is returned.
 */
export const STAGES = ['input', 'planning', 'memory', 'tool_selection', 'tool_execution', 'tool_observation', 'output'] as const;
export type Stage = (typeof STAGES)[number];

export function isStage(s: unknown): s is Stage {
  return typeof s === 'string' && (STAGES as readonly string[]).includes(s);
}
