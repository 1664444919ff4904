/**
 * A stage-specific safety skill (S³): a folder with a SKILL.md whose front matter says when the skill applies and
 * how it checks, and whose body is the checking procedure in prose (shown to the guard agent when it decides which
 * skills to run, and to `llm` checks as `{{procedure}}`). See `skill-file.ts` for the format and src/s3/README.md.
 */
import type { InspectionPart } from './inspection.ts';
import type { Stage } from './stages.ts';

/** How a skill assesses risk. */
export const CHECK_KINDS = ['llm', 'rules', 'probe'] as const;
export type CheckKind = (typeof CHECK_KINDS)[number];

/**
 * What happens on a risk: `recover` = the stage's recovery (the task goes on), `block` = the task ends with a
 * refusal, `respond` (tool_execution only) = incident response: the call runs, then it is contained, remediated
 * where the tool set allows, and reported (`incident.ts`).
 */
export const MITIGATIONS = ['block', 'recover', 'respond'] as const;
export type Mitigation = (typeof MITIGATIONS)[number];

/** Built-in judgment contexts an `llm` check can use instead of a prompt file (`prompt: builtin:<name>`). */
export const BUILTIN_PROMPTS = ['safekeep-judge', 'safejudge'] as const;
export type BuiltinPrompt = (typeof BUILTIN_PROMPTS)[number];

/**
 * The cheap rule layer of the trigger. Every given field must match (AND); within a list any entry may match (OR).
 * An absent field matches everything.
 */
export interface SkillFilter {
  /** tool names the stage event involves (calls, or the tool of an observation); `*` is a wildcard */
  tools?: string[];
  /** regular expressions (case-insensitive) over the stage's text (see `StageEvent.text`) */
  patterns?: RegExp[];
  /** roles of the messages the stage event is about (input: every role the request holds; tool_observation: tool; ...) */
  roles?: string[];
}

/** Parameters of a `probe` check (activations; the check itself is supplied by the caller, see `check.ts`). */
export interface ProbeSpec {
  /** absolute path of the direction file (a resource) */
  direction: string;
  /** hidden-state index (hidden[0] = embeddings, hidden[l] = output of block l-1) */
  layer: number;
  /** risky when the projection on the direction is above this */
  threshold: number;
}

export interface Skill {
  name: string;
  stage: Stage;
  description: string;
  filter: SkillFilter;
  /** the parts of the stage event the skill reads (declared, or every part of its stage); the rest is withheld */
  inspection: InspectionPart[];
  /**
   * runs on every event of its stage: neither its filter nor the guard agent can drop it (a stage's coverage must not
   * hang on a pattern or on the guard agent's answer)
   */
  mandatory: boolean;
  /** resource file names (beside SKILL.md) → absolute paths */
  resources: Map<string, string>;
  check: CheckKind;
  /** llm: the prompt template text (a resource file's content), or a builtin judgment context */
  prompt?: { builtin: BuiltinPrompt } | { template: string; file: string };
  /** llm: rule memory file (absolute path), retrieved by the tools in play and shown as `{{memory}}` */
  memory?: string;
  /** llm: answer budget (default 32 tokens) */
  maxTokens?: number;
  /** rules: the rule-set text and its file */
  rules?: { text: string; file: string };
  probe?: ProbeSpec;
  mitigation: Mitigation;
  /** recovery message template (`{{skill}}`, `{{reason}}`, `{{evidence}}`, `{{tool}}` are filled in) */
  recovery: string;
  /** post-recovery guidance template, shown to the next model turn (same placeholders) */
  guidance: string;
  /** the checking procedure, in prose */
  body: string;
  dir: string;
  file: string;
}

/** Placeholders a recovery or guidance template may use. */
export const TEMPLATE_VARS = ['skill', 'reason', 'evidence', 'tool'] as const;

/** Placeholders an `llm` check's prompt template may use (filled by `checks/llm.ts`). */
export const PROMPT_VARS = ['stage', 'instructions', 'request', 'tools', 'history', 'text', 'tool', 'observation', 'calls', 'answer', 'procedure',
  'description', 'memory', 'plan', 'entries'] as const;

export function fillTemplate(template: string, vars: Partial<Record<string, string>>): string {
  return template.replace(/\{\{\s*(\w+)\s*\}\}/g, (_m, k: string) => vars[k] ?? '');
}
