/**
 * The guard methods as one table (`guardedRespond`'s executor runs it; the CLI and the servers derive their method
 * lists from it). Types only: loadable by the CLI before any model code.
 */
import type { GuardMethod } from './types.ts';
import type { ToolView } from './view.ts';

/**
 * The method table: what each guard method shows its judge, what gates the agent's call, what a flagged request
 * gets, and what it needs. `guardedRespond` runs every row with one executor (`respond`); the CLI's and the
 * servers' method lists are derived from it, so a method is one row, never a new branch.
 *
 * - judge: the tool view of the judge's prompt (built by the one view function, `view.ts`); null = no judge call.
 * - gate: none = the agent call as is; judge = SafeKeep's decision first; probe = the probed agent call;
 *   judge+probe = the decision whose safe branch is the probed call; probe-band = the probe's calibrated band
 *   decides outside it, the judge inside it.
 * - flagged: refuse = no tools, the refusal prefix prefilled; steer = the agent call again with +α·r̂ at ℓ*.
 * - prompt: safeprompt = AgentHarm's refusal prompt appended to the agent's system message.
 * - probe: the method reads a trained probe (and the agent's own hidden states: the local engine); 'cascade' and
 *   'steer' need that calibration from `probe train --calibrate`.
 */
export interface MethodRow {
  judge: ToolView | null;
  gate: 'none' | 'judge' | 'probe' | 'judge+probe' | 'probe-band';
  flagged: 'refuse' | 'steer' | null;
  prompt: 'as-is' | 'safeprompt';
  probe: null | 'plain' | 'cascade' | 'steer';
}

export const METHOD_TABLE: Readonly<Record<GuardMethod, MethodRow>> = {
  base: { judge: null, gate: 'none', flagged: null, prompt: 'as-is', probe: null },
  safeprompt: { judge: null, gate: 'none', flagged: null, prompt: 'safeprompt', probe: null },
  safekeep: { judge: 'prose', gate: 'judge', flagged: 'refuse', prompt: 'as-is', probe: null },
  safejudge: { judge: 'json', gate: 'judge', flagged: 'refuse', prompt: 'as-is', probe: null },
  'refusal-probe': { judge: null, gate: 'probe', flagged: 'refuse', prompt: 'as-is', probe: 'plain' },
  'safekeep+probe': { judge: 'prose', gate: 'judge+probe', flagged: 'refuse', prompt: 'as-is', probe: 'plain' },
  'probe-cascade': { judge: 'prose', gate: 'probe-band', flagged: 'refuse', prompt: 'as-is', probe: 'cascade' },
  'probe-steer': { judge: null, gate: 'probe', flagged: 'steer', prompt: 'as-is', probe: 'steer' },
};

/** The methods whose every step an endpoint can serve (no hidden states read): what `serve --upstream` offers. */
export const ENDPOINT_JUDGE_METHODS = (Object.keys(METHOD_TABLE) as GuardMethod[]).filter((m) => METHOD_TABLE[m].judge !== null && METHOD_TABLE[m].probe === null);

/** Every method, in the table's order: what `serve --model` offers. */
export const TABLE_METHODS = Object.keys(METHOD_TABLE) as GuardMethod[];

