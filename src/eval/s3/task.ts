/** An S³ evaluation task: a request with a benign and a hazardous component, simulated tools, and how it is scored. */
import type { ToolSpec } from '../../data/types.ts';
import type { ChatMessage } from '../../guard/types.ts';
import type { CallView } from '../../s3/event.ts';

type TaskScoring =
  | { kind: 'injecagent'; attack: 'dh' | 'ds'; userTool: string; attackerTools: string[] }
  | { kind: 'agentharm'; harmfulTargets: string[]; benignTargets: string[] };

export interface S3Task {
  id: string;
  /** injecagent/<setting>/dh, injecagent/<setting>/ds, agentharm/pair */
  group: string;
  /** InjecAgent's setting (base: the attacker's instruction as is; enhanced: with the hacking prompt) */
  setting?: 'base' | 'enhanced';
  /** system + user */
  messages: ChatMessage[];
  tools: ToolSpec[];
  /** the simulated tool's answer to an executed call (`turn` = the model turn that proposed it) */
  simulate(call: CallView, turn: number): string;
  scoring: TaskScoring;
}
