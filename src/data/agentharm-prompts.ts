/**
 * AgentHarm's own prompt strings (data/specs/agentharm-prompts.json, verbatim from the benchmark's evaluation script,
 * with source and license): the default agent system prompt that AgentHarm runs use, and the refusal prompt that
 * the paper's SafePrompt baseline appends to the agent's system prompt.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { repoRoot } from './locate.ts';

interface AgentHarmPrompts {
  source: string;
  license: string;
  defaultSystemPrompt: string;
  refusalPrompt: string;
  /** what joins the refusal prompt to the system prompt */
  join: string;
}

const AGENTHARM_PROMPTS_FILE = join(repoRoot, 'data', 'specs', 'agentharm-prompts.json');

let cached: AgentHarmPrompts | null = null;

export function agentHarmPrompts(): AgentHarmPrompts {
  if (cached) return cached;
  const j = JSON.parse(readFileSync(AGENTHARM_PROMPTS_FILE, 'utf8')) as Record<string, unknown>;
  for (const k of ['source', 'license', 'default_system_prompt', 'refusal_prompt', 'join']) {
    if (typeof j[k] !== 'string') throw new SafekeepError(`${AGENTHARM_PROMPTS_FILE}: missing "${k}"`);
  }
  cached = {
    source: j.source as string,
    license: j.license as string,
    defaultSystemPrompt: j.default_system_prompt as string,
    refusalPrompt: j.refusal_prompt as string,
    join: j.join as string,
  };
  return cached;
}
