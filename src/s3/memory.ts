/**
 * SafeHarbor-style rule memory (the rule-memory skill): context-dependent safety rules kept per domain and tool,
 * retrieved by the tools in play and shown to the judge. "SafeHarbor-style": the SafeHarbor authors' rules are not
 * public; ours are generated once from a seed set (`safekeep s3 rules`) and saved as a reviewable JSON file:
 *
 *   {"format": "safekeep-rule-memory/1", "generatedBy": "...", "rules": [
 *     {"id": "email-1", "domain": "email", "tools": ["*Email*", "send_email"], "rule": "...", "origin": "seed|generated"}]}
 *
 * Retrieval: every rule with a tool glob matching one of the tools in play (globs `*`), in file order, then
 * general rules (`tools: ["*"]`), capped at `limit`.
 */
import { readRegularText } from '../checkpoint/regular-file.ts';
import { SafekeepError } from '../util/errors.ts';
import { globMatch } from './filter.ts';

export const RULE_MEMORY_FORMAT = 'safekeep-rule-memory/1';

export interface MemoryRule {
  id: string;
  domain: string;
  tools: string[];
  rule: string;
  origin: 'seed' | 'generated';
}

export interface RuleMemory {
  format: typeof RULE_MEMORY_FORMAT;
  generatedBy: string;
  rules: MemoryRule[];
}

export function validateRuleMemory(raw: unknown, file: string): RuleMemory {
  const bad = (what: string) => new SafekeepError(`${file}: ${what} (format ${RULE_MEMORY_FORMAT}, see src/s3/memory.ts)`);
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw bad('expected a JSON object');
  const o = raw as Record<string, unknown>;
  if (o.format !== RULE_MEMORY_FORMAT) throw bad(`"format" must be "${RULE_MEMORY_FORMAT}"`);
  if (!Array.isArray(o.rules)) throw bad('"rules" must be a list');
  const ids = new Set<string>();
  const rules = o.rules.map((r, i) => {
    const w = `rules[${i}]`;
    if (!r || typeof r !== 'object') throw bad(`${w} must be an object`);
    const x = r as Record<string, unknown>;
    for (const k of ['id', 'domain', 'rule'] as const) if (typeof x[k] !== 'string' || !(x[k] as string).trim()) throw bad(`${w}.${k} must be a non-empty text`);
    if (!Array.isArray(x.tools) || x.tools.length === 0 || !x.tools.every((t) => typeof t === 'string' && /^[\w.*-]+$/.test(t))) throw bad(`${w}.tools must be a non-empty list of tool names or globs`);
    if (x.origin !== 'seed' && x.origin !== 'generated') throw bad(`${w}.origin must be "seed" or "generated"`);
    if (ids.has(x.id as string)) throw bad(`${w}.id '${x.id as string}' is used twice`);
    ids.add(x.id as string);
    return { id: x.id as string, domain: x.domain as string, tools: x.tools as string[], rule: (x.rule as string).trim(), origin: x.origin as MemoryRule['origin'] };
  });
  return { format: RULE_MEMORY_FORMAT, generatedBy: typeof o.generatedBy === 'string' ? o.generatedBy : '', rules };
}

const cache = new Map<string, RuleMemory>();

/** a generated memory holds a few rules per tool: far below this for any tool set */
const MAX_MEMORY_BYTES = 16 * 1024 * 1024;

export function readRuleMemory(file: string): RuleMemory {
  let m = cache.get(file);
  if (!m) {
    // a regular file of bounded size (refused as such, with its own message), then JSON
    const text = readRegularText(file, MAX_MEMORY_BYTES);
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (e) {
      throw new SafekeepError(`${file}: not readable JSON (${(e as Error).message})`);
    }
    m = validateRuleMemory(raw, file);
    cache.set(file, m);
  }
  return m;
}

/** The rules for the tools in play, as a bullet list ('(no stored rules apply)' when none). */
export function retrieveRules(memory: RuleMemory, tools: readonly string[], limit = 12): string {
  const specific = memory.rules.filter((r) => !r.tools.includes('*') && r.tools.some((g) => tools.some((t) => globMatch(g, t))));
  const general = memory.rules.filter((r) => r.tools.includes('*'));
  const picked = [...specific, ...general].slice(0, limit);
  return picked.length ? picked.map((r) => `- [${r.domain}] ${r.rule}`).join('\n') : '(no stored rules apply)';
}
