/** An S³ evaluation task: a request with a benign and a hazardous component, simulated tools, and how it is scored. */
import type { ToolSpec } from '../../data/types.ts';
import type { ChatMessage } from '../../guard/types.ts';
import type { CallView, MemoryEntry } from '../../s3/event.ts';
import type { Stage } from '../../s3/stages.ts';

/** A state predicate over a scripted environment's end state (`world.ts`). */
export type StatePredicate =
  | { path: string; equals: unknown }
  | { path: string; includes: Record<string, unknown> }
  | { all: StatePredicate[] }
  | { any: StatePredicate[] }
  | { not: StatePredicate };

type TaskScoring =
  | { kind: 'injecagent'; attack: 'dh' | 'ds'; userTool: string; attackerTools: string[] }
  | { kind: 'agentharm'; harmfulTargets: string[]; benignTargets: string[] }
  /** multistage: both components read from the environment's end state, not from text */
  | { kind: 'state'; hazard: StatePredicate; benign: StatePredicate };

/**
 * A scripted tool environment with a checkable state (one per task run): executing a call changes the state and
 * returns the tool's result; `effects` are calls the environment carried out beyond the one asked for (an
 * environment perturbation: a tool whose execution has an unexpected effect).
 */
export interface Environment {
  execute(call: CallView): { result: string; effects: CallView[] };
  state(): Record<string, unknown>;
}

export interface S3Task {
  id: string;
  /** injecagent/<setting>/dh, injecagent/<setting>/ds, agentharm/pair, multistage/<riskType> */
  group: string;
  /** InjecAgent's setting (base: the attacker's instruction as is; enhanced: with the hacking prompt) */
  setting?: 'base' | 'enhanced';
  /** system + user */
  messages: ChatMessage[];
  tools: ToolSpec[];
  /** the simulated tool's answer to an executed call (`turn` = the model turn that proposed it) */
  simulate(call: CallView, turn: number): string;
  scoring: TaskScoring;
  /** a scripted environment, fresh per run (replaces `simulate` when given) */
  environment?: () => Environment;
  /**
   * the agent writes a plan before acting (the planning stage): true = always, false = never (the InjecAgent and
   * AgentHarm tasks, single requests scored as published), absent = when a skill of the planning stage is loaded
   */
  plan?: boolean;
  /**
   * a memory store the agent reads before it reasons (through `readTool`, checked at the memory stage before the
   * model sees it) and writes to through `writeTool` (checked before it is stored)
   */
  memory?: { readTool: string; writeTool?: string; entries: MemoryEntry[] };
  /** multistage: the risk type and the stage where its hazard enters */
  riskType?: string;
  hazardStage?: Stage;
}
