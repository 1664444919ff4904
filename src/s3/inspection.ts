/**
 * A skill's inspection information (S³'s seed field): which parts of the stage event the skill reads. The parser
 * checks the declaration against the stage and the skill's prompt / rules (`skill-file.ts`); `limitEvent` removes
 * every part the skill did not declare before its check or prompt sees the event, so a skill cannot depend on what
 * it says it does not read. A declaration narrows what one skill is shown, never what its stage covers: the guard
 * checks that the skills that ran read every part the event holds (`eventParts`, guard.ts).
 *
 * - request: the user's messages and the agent's instructions (system / developer messages);
 * - history: the earlier turns — assistant turns and tool results before the stage's item (at input: those the
 *   request carries, e.g. an assistant turn the client wrote);
 * - calls: the proposed call(s) (tool_selection, tool_execution);
 * - observation: the tool result (tool_observation);
 * - answer: the final answer (output);
 * - plan: the plan the agent wrote and its steps (planning);
 * - entries: the memory entries read or about to be written (memory).
 */
import type { StageEvent } from './event.ts';
import type { Stage } from './stages.ts';

export const INSPECTION_PARTS = ['request', 'history', 'calls', 'observation', 'answer', 'plan', 'entries'] as const;
export type InspectionPart = (typeof INSPECTION_PARTS)[number];

/** Parts that exist at each stage. */
export const STAGE_PARTS: Record<Stage, readonly InspectionPart[]> = {
  input: ['request', 'history'],
  planning: ['request', 'history', 'plan'],
  memory: ['request', 'history', 'entries'],
  tool_selection: ['request', 'history', 'calls'],
  tool_execution: ['request', 'history', 'calls'],
  tool_observation: ['request', 'history', 'observation'],
  output: ['request', 'history', 'answer'],
};

/** The part each `llm` prompt placeholder reveals (null: not part of the event, always available). */
export const PLACEHOLDER_PART: Record<string, InspectionPart | 'item' | null> = {
  stage: null, tools: null, procedure: null, description: null, memory: null,
  instructions: 'request', request: 'request', history: 'history', calls: 'calls', observation: 'observation', answer: 'answer',
  plan: 'plan', entries: 'entries',
  // the stage's own item (calls, observation or answer) and the tool it concerns
  text: 'item', tool: 'item',
};

/** The part a rule predicate reads beyond the call itself. */
export const PREDICATE_PARTS: Record<string, readonly InspectionPart[]> = {
  read_before: ['history'],
  recipient_not_in_request: ['request', 'calls', 'plan'],
  name_matches: ['calls', 'plan'],
  arg_matches: ['calls', 'plan'],
  pattern: [],
  secret_patterns: ['request'],
  echoes_observation_data: ['history', 'request'],
  unrequested_action: ['request', 'calls', 'plan'],
  hidden_characters: [],
};

/** The stage's item part (what `{{text}}` shows). */
export function itemPart(stage: Stage): InspectionPart | null {
  if (stage === 'tool_selection' || stage === 'tool_execution') return 'calls';
  if (stage === 'tool_observation') return 'observation';
  if (stage === 'output') return 'answer';
  if (stage === 'planning') return 'plan';
  if (stage === 'memory') return 'entries';
  return 'request';
}

const REQUEST_ROLES = new Set(['system', 'developer', 'user']);

/** The parts an event actually holds (a request without earlier turns has no history). */
export function eventParts(e: StageEvent): InspectionPart[] {
  const out: InspectionPart[] = [];
  if (e.messages.some((m) => REQUEST_ROLES.has(m.role))) out.push('request');
  if (e.messages.some((m) => !REQUEST_ROLES.has(m.role))) out.push('history');
  if (e.calls?.length && e.stage !== 'planning') out.push('calls');
  if (e.observation) out.push('observation');
  if (e.answer !== undefined) out.push('answer');
  if (e.plan !== undefined) out.push('plan');
  if (e.memory?.entries.length) out.push('entries');
  return out;
}

const NOT_INSPECTED = '(not inspected by this skill)';

/** The event with every part outside `parts` removed (contents blanked, history dropped). */
export function limitEvent(e: StageEvent, parts: readonly InspectionPart[]): StageEvent {
  const has = (p: InspectionPart) => parts.includes(p);
  let messages = e.messages;
  if (!has('history')) messages = messages.filter((m) => m.role === 'system' || m.role === 'developer' || m.role === 'user');
  if (!has('request')) messages = messages.map((m) => (m.role === 'system' || m.role === 'developer' || m.role === 'user' ? { ...m, content: NOT_INSPECTED } : m));
  const out: StageEvent = { stage: e.stage, messages, tools: e.tools };
  if (e.calls) out.calls = has('calls') ? e.calls : [];
  if (e.observation) out.observation = has('observation') ? e.observation : { ...e.observation, content: NOT_INSPECTED };
  if (e.answer !== undefined) out.answer = has('answer') ? e.answer : NOT_INSPECTED;
  // a plan's steps are the plan (read as calls by the rules), not the stage's `calls` part
  if (e.plan !== undefined) out.plan = has('plan') ? e.plan : NOT_INSPECTED;
  if (e.stage === 'planning' && e.calls) out.calls = has('plan') ? e.calls : [];
  if (e.memory) out.memory = has('entries') ? e.memory : { ...e.memory, entries: e.memory.entries.map((x) => ({ ...x, content: NOT_INSPECTED })) };
  if (e.settings && has('request')) out.settings = e.settings;
  return out;
}
