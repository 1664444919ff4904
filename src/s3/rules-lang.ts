/**
 * The declarative rule language of `check: rules` skills, in the style of AgentSpec (Wang et al., 2025): a rule
 * names the event that triggers it, the predicates that must all hold, and why it fires.
 *
 *   # comment
 *   rule no-exfiltration
 *     trigger *Send*, *Email*, *Message*     # tool-name globs (calls), or * (any event of the skill's stage)
 *     check read_before "Get|Read|View|Search|Fetch|Retrieve|List|Download|Access"
 *     check recipient_not_in_request
 *     reason "Sending data to an address the user never gave, after private data was read."
 *   end
 *
 * Arguments are words or JSON double-quoted strings. `check not <predicate> ...` negates. Predicates (their
 * meaning is in `checks/rules.ts`): read_before REGEX, recipient_not_in_request, name_matches REGEX,
 * arg_matches ARG REGEX, pattern REGEX, secret_patterns, echoes_observation_data, unrequested_action REGEX,
 * hidden_characters.
 * Regular expressions are case-insensitive. Strict: anything else is an error with the line number.
 */
import { SafekeepError } from '../util/errors.ts';

export const PREDICATES: Record<string, { args: string[] }> = {
  read_before: { args: ['REGEX'] },
  recipient_not_in_request: { args: [] },
  name_matches: { args: ['REGEX'] },
  arg_matches: { args: ['ARG', 'REGEX'] },
  pattern: { args: ['REGEX'] },
  secret_patterns: { args: [] },
  echoes_observation_data: { args: [] },
  unrequested_action: { args: ['REGEX'] },
  hidden_characters: { args: [] },
};

export interface Predicate {
  name: string;
  negate: boolean;
  args: string[];
  /** compiled REGEX arguments, by position */
  regex: (RegExp | null)[];
}

export interface Rule {
  id: string;
  trigger: string[];
  checks: Predicate[];
  reason: string;
  line: number;
}

function tokens(s: string, file: string, line: number): string[] {
  const out: string[] = [];
  const re = /\s*("(?:[^"\\]|\\.)*"|[^\s,"]+)\s*,?/gy;
  let m: RegExpExecArray | null;
  let pos = 0;
  while (pos < s.length && (m = re.exec(s))) {
    const t = m[1]!;
    out.push(t.startsWith('"') ? (JSON.parse(t) as string) : t);
    pos = re.lastIndex;
  }
  if (s.slice(pos).trim() !== '') throw new SafekeepError(`${file}: line ${line}: cannot read "${s.slice(pos).trim()}" (quote text with spaces as a JSON string)`);
  return out;
}

export function parseRules(text: string, file: string): Rule[] {
  const rules: Rule[] = [];
  let cur: Rule | null = null;
  const fail = (line: number, msg: string) => new SafekeepError(`${file}: line ${line}: ${msg}`);
  text.replace(/\r\n?/g, '\n').split('\n').forEach((raw, i) => {
    const n = i + 1;
    const l = raw.replace(/(^|\s)#.*$/, '').trim();
    if (!l) return;
    const [kw, ...restParts] = l.split(/\s+/);
    const rest = l.slice(kw!.length).trim();
    if (kw === 'rule') {
      if (cur) throw fail(n, `rule '${cur.id}' has no "end" before the next rule`);
      if (!/^[\w-]+$/.test(rest)) throw fail(n, 'write "rule <id>" (letters, digits, _ and -)');
      if (rules.some((r) => r.id === rest)) throw fail(n, `rule id '${rest}' is used twice`);
      cur = { id: rest, trigger: [], checks: [], reason: '', line: n };
      return;
    }
    if (!cur) throw fail(n, `"${kw}" outside a rule (start one with "rule <id>")`);
    const r: Rule = cur;
    if (kw === 'end') {
      if (restParts.length) throw fail(n, '"end" takes nothing after it');
      if (r.trigger.length === 0) throw fail(n, `rule '${r.id}' has no trigger`);
      if (r.checks.length === 0) throw fail(n, `rule '${r.id}' has no check`);
      if (!r.reason) throw fail(n, `rule '${r.id}' has no reason`);
      rules.push(r);
      cur = null;
    } else if (kw === 'trigger') {
      const t = tokens(rest, file, n);
      if (t.length === 0) throw fail(n, 'trigger needs tool-name globs or *');
      for (const g of t) if (!/^[\w.*-]+$/.test(g)) throw fail(n, `'${g}' is not a tool name or glob`);
      r.trigger.push(...t);
    } else if (kw === 'check') {
      const t = tokens(rest, file, n);
      const negate = t[0] === 'not';
      if (negate) t.shift();
      const name = t.shift();
      if (!name || !(name in PREDICATES)) throw fail(n, `unknown predicate '${name ?? ''}' (known: ${Object.keys(PREDICATES).join(', ')})`);
      const want = PREDICATES[name]!.args;
      if (t.length !== want.length) throw fail(n, `${name} takes ${want.length ? want.join(' ') : 'no arguments'}, got ${t.length} argument(s)`);
      const regex = want.map((a, k) => {
        if (a !== 'REGEX') return null;
        try {
          return new RegExp(t[k]!, 'iu');
        } catch (e) {
          throw fail(n, `'${t[k]}' is not a regular expression (${(e as Error).message})`);
        }
      });
      r.checks.push({ name, negate, args: t, regex });
    } else if (kw === 'reason') {
      const t = tokens(rest, file, n);
      if (t.length !== 1) throw fail(n, 'write reason "<one sentence>" (a JSON string)');
      r.reason = t[0]!;
    } else {
      throw fail(n, `unknown keyword '${kw}' (rule, trigger, check, reason, end)`);
    }
  });
  if (cur) throw new SafekeepError(`${file}: rule '${(cur as Rule).id}' (line ${(cur as Rule).line}) has no "end"`);
  if (rules.length === 0) throw new SafekeepError(`${file}: no rules (write "rule <id>" … "end")`);
  return rules;
}
