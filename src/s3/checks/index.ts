/** The built-in check implementations (`probe` needs activations and is supplied by the caller). */
import type { CheckRegistry } from '../check.ts';
import { llmCheck } from './llm.ts';
import { rulesCheck } from './rules.ts';

export const builtinChecks: CheckRegistry = { llm: llmCheck, rules: rulesCheck };
