/**
 * `check: rules`: the skill's rule set (`../rules-lang.ts`) evaluated over the stage event, no model call.
 * At tool_selection / tool_execution each call is a target (the trigger globs match its name); at other stages
 * the event is one target and only `*` triggers match. A rule fires on a target when all its predicates hold.
 *
 * Predicates:
 * - read_before REGEX: an earlier call in the trajectory has a name matching REGEX (private data was read).
 * - recipient_not_in_request: the call's arguments hold an e-mail address, phone number (10–15 digits, never a
 *   date or date-time) or URL that the user's request does not give (evidence: those values).
 * - name_matches REGEX / arg_matches ARG REGEX: the call's name / the argument's value (as text).
 * - pattern REGEX: the stage text matches (evidence: the matches).
 * - secret_patterns: the stage text holds a secret or sensitive identifier (API key or token, private key block,
 *   password assignment, card number passing the Luhn check, US SSN, IBAN) that is not in the user's request (evidence: the matches).
 * - echoes_observation_data: a sensitive value (as in secret_patterns) that an earlier tool result returned
 *   occurs in the stage text and not in the user's request (evidence: the values).
 *
 * "The request gives a value" compares whole values (`isGiven`): an address equal to one in the request (lower-case),
 * a URL equal to one there (scheme, host, port, path, query: `new URL` normalised), a number whose digits equal a
 * number written there (its digit groups, however they are separated), other text bounded by non-word characters.
 * Never a part of one: `alice@bank.co` is not given by `alice@bank.com`, nor 555-123-4567 by 99555123456799.
 * Every text is read in its normalised form (NFKC, invisible characters removed: `../normalize.ts`) first.
 * Every pattern here runs in linear time on any text (no pattern retries a long run from each of its positions).
 * - unrequested_action REGEX: the call's action — the first word of its name (CamelCase or snake_case) that REGEX
 *   matches, e.g. Grant in AugustSmartLockGrantGuestAccess — is not asked for in the user's request (no request
 *   word starts with its first four letters: "pay" ~ "payment"); no word matching → does not hold.
 */
import type { CheckEnv, CheckResult } from '../check.ts';
import { callsSoFar, observationsSoFar, stageText, userRequestText, type CallView, type StageEvent } from '../event.ts';
import { globMatch } from '../filter.ts';
import { normalizeText } from '../normalize.ts';
import { parseRules, type Predicate, type Rule } from '../rules-lang.ts';
import type { Skill } from '../skill.ts';

const LOCAL_CHAR = /[\w.+-]/;
const LABEL_CHAR = /[\w-]/;

/**
 * E-mail addresses in a text (what /[\w.+-]+@[\w-]+(?:\.[\w-]+)+/g finds), by one pass over the '@' signs: that
 * pattern retries its local part at every start in a long run without '@', quadratic in the run (seconds on a 40 KB
 * argument). Here each character is read a bounded number of times: a local part never reaches back past the
 * previous '@' or the previous address.
 */
export function emailsIn(s: string): string[] {
  const out: string[] = [];
  let floor = 0;
  for (let at = s.indexOf('@'); at >= 0; at = s.indexOf('@', Math.max(at + 1, floor))) {
    let a = at;
    while (a > floor && LOCAL_CHAR.test(s[a - 1]!)) a--;
    const lower = at + 1;
    floor = Math.max(floor, lower);
    if (a === at) continue;
    // the domain: labels of [\w-]+ joined by single dots, at least two labels
    let e = lower;
    while (e < s.length && LABEL_CHAR.test(s[e]!)) e++;
    if (e === lower) continue;
    let labels = 1;
    while (s[e] === '.' && e + 1 < s.length && LABEL_CHAR.test(s[e + 1]!)) {
      e++;
      while (e < s.length && LABEL_CHAR.test(s[e]!)) e++;
      labels++;
    }
    if (labels < 2) continue;
    out.push(s.slice(a, e));
    floor = e;
  }
  return out;
}
const PHONE = /\+?\d[\d ().-]{7,}\d/g;
/** a date (2022-02-23, 23.02.2022, 2022/02/23), optionally with a time: never a phone number */
const DATE_TIME = /^\d{4}[-/.]\d{1,2}[-/.]\d{1,2}(?:[ T]\d{1,2})?$|^\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}(?:[ T]\d{1,2})?$/;

/**
 * Phone numbers in a text: PHONE candidates with 10 to 15 digits (E.164's range; shorter runs are amounts, ids,
 * dates) that are not a date or date-time and are not followed by a time's colon (`2022-02-23 16:00`).
 */
export function phonesIn(s: string): string[] {
  const out: string[] = [];
  for (const m of s.matchAll(PHONE)) {
    const v = m[0].trim();
    const digits = v.replace(/\D/g, '').length;
    if (digits < 10 || digits > 15 || DATE_TIME.test(v) || s[m.index + m[0].length] === ':') continue;
    out.push(v);
  }
  return out;
}
const URL_RE = /\bhttps?:\/\/[^\s"'<>)]+/gi;

/** Secret and sensitive-identifier patterns (global regexes). */
const SECRET_PATTERNS: readonly { name: string; re: RegExp }[] = [
  { name: 'api key or token', re: /\b(?:sk|pk|rk|ghp|gho|xox[abp]|AKIA)[-_][A-Za-z0-9_-]{10,}\b|\bAKIA[0-9A-Z]{16}\b/g },
  { name: 'private key', re: /-----BEGIN [A-Z ]*PRIVATE KEY-----/g },
  { name: 'password', re: /\b(?:password|passwd|passcode|pin)\s*(?:is|[:=])\s*[^\s"',;)]+/gi },
  { name: 'card number', re: /\b(?:\d[ -]?){12,18}\d\b/g },
  { name: 'ssn', re: /\b\d{3}-\d{2}-\d{4}\b/g },
  { name: 'iban', re: /\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b/g },
];

/** Luhn checksum (card numbers): cuts false positives among long digit runs. */
function luhnValid(digits: string): boolean {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = Number(digits[digits.length - 1 - i]);
    if (i % 2 === 1) { d *= 2; if (d > 9) d -= 9; }
    sum += d;
  }
  return digits.length >= 13 && digits.length <= 19 && sum % 10 === 0;
}

function strings(v: unknown, out: string[] = []): string[] {
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) v.forEach((x) => strings(x, out));
  else if (v && typeof v === 'object') Object.values(v).forEach((x) => strings(x, out));
  else if (typeof v === 'number') out.push(String(v));
  return out;
}

const norm = (s: string) => s.toLowerCase().replace(/\s+/g, ' ');
const NUMERIC = /^[\d\s().+/-]+$/;
/**
 * `value` occurs somewhere in `text` (a sensitive value found in an answer): deliberately loose, a part of a longer
 * value counts — this direction finds leaks; what the user gave is `isGiven`, compared whole.
 */
const occursIn = (value: string, text: string) => norm(text).includes(norm(value)) || (NUMERIC.test(value) && text.replace(/\D/g, '').includes(value.replace(/\D/g, '')));

/** A URL's comparable form: trailing sentence punctuation dropped, scheme, host and port normalised by `new URL`. */
function urlKey(u: string): string {
  const t = u.replace(/[.,;:!?]+$/, '');
  try {
    return new URL(t).href;
  } catch {
    return t.toLowerCase();
  }
}

/** groups of one written number are joined by at most this many separator characters (`) `, ` - `) */
const MAX_JOIN = 3;
const JOIN = /^[\s().+/-]+$/;
/** a number is at most this many digit groups (+1 (555) 123-4567 is four; an IBAN's digits fewer than eight) */
const MAX_GROUPS = 8;

/**
 * The digit strings of the numbers a text writes: each chain of digit groups joined by short separators, and each
 * contiguous part of such a chain (a card number and its CVV written one after the other are two numbers). A digit
 * string inside a longer group is never one: 5551234567 is not a number of "order 99555123456799".
 */
export function numbersIn(text: string): Set<string> {
  const out = new Set<string>();
  let chain: string[] = [];
  let prevEnd = -1;
  for (const m of text.matchAll(/\d+/g)) {
    const gap = m.index - prevEnd;
    if (prevEnd < 0 || gap > MAX_JOIN || !JOIN.test(text.slice(prevEnd, m.index))) chain = [];
    chain.push(m[0]);
    if (chain.length > MAX_GROUPS) chain.shift();
    let cat = '';
    for (let i = chain.length - 1; i >= 0; i--) out.add(cat = chain[i]! + cat);
    prevEnd = m.index + m[0].length;
  }
  return out;
}

/** What a user's request gives, in the forms values are compared in (see isGiven). */
export interface Given {
  /** the normalised request, lower-case, white space collapsed */
  text: string;
  emails: Set<string>;
  urls: Set<string>;
  numbers: Set<string>;
}

export function givenBy(request: string): Given {
  const r = normalizeText(request);
  return {
    text: norm(r),
    emails: new Set(emailsIn(r).map((e) => e.toLowerCase())),
    urls: new Set([...r.matchAll(URL_RE)].map((m) => urlKey(m[0]))),
    numbers: numbersIn(r),
  };
}

const WORD = /[\p{L}\p{N}_]/u;

/** `v` occurs in `text` with no letter, digit or _ glued to either end of it. */
function wholeIn(v: string, text: string): boolean {
  if (v === '') return false;
  const edgeStart = WORD.test(v[0]!);
  const edgeEnd = WORD.test(v[v.length - 1]!);
  for (let i = text.indexOf(v); i >= 0; i = text.indexOf(v, i + 1)) {
    const before = i === 0 ? '' : text[i - 1]!;
    const after = text[i + v.length] ?? '';
    if ((!edgeStart || !before || !WORD.test(before)) && (!edgeEnd || !after || !WORD.test(after))) return true;
  }
  return false;
}

/** The request gives `value`, compared whole (an address, a URL, a number, or word-bounded text). */
export function isGiven(value: string, g: Given): boolean {
  const v = normalizeText(value).trim();
  const emails = emailsIn(v);
  if (emails.length === 1 && emails[0] === v) return g.emails.has(v.toLowerCase());
  if (/^https?:\/\//i.test(v)) return g.urls.has(urlKey(v));
  if (NUMERIC.test(v) && /\d/.test(v)) return g.numbers.has(v.replace(/\D/g, ''));
  return wholeIn(norm(v), g.text);
}

/** Addresses (e-mail, phone, URL) in a call's arguments, normalised (../normalize.ts). */
export function addressesIn(args: Record<string, unknown>): string[] {
  const out = new Set<string>();
  for (const raw of strings(args)) {
    const s = normalizeText(raw);
    for (const m of emailsIn(s)) out.add(m);
    for (const m of s.matchAll(URL_RE)) out.add(m[0].trim());
    for (const p of phonesIn(s)) out.add(p);
  }
  return [...out];
}

export function secretsIn(text: string): string[] {
  const out = new Set<string>();
  const ibans = [...text.matchAll(SECRET_PATTERNS.find((p) => p.name === 'iban')!.re)].map((m) => m[0]);
  for (const { name, re } of SECRET_PATTERNS) {
    for (const m of text.matchAll(re)) {
      const v = m[0].trim();
      if (name === 'card number' && (!luhnValid(v.replace(/\D/g, '')) || ibans.some((i) => i.includes(v)))) continue;
      out.add(v);
    }
  }
  return [...out];
}

interface Holds { holds: boolean; evidence: string[] }

/**
 * Unicode tag characters (U+E0000–E007F: invisible ASCII) and bidi override / isolate controls in a text; zero-width
 * joiners are left alone (emoji sequences use them).
 */
const HIDDEN = /[\u{E0000}-\u{E007F}\u202A-\u202E\u2066-\u2069]+/gu;

/**
 * Hidden text: each run of tag characters decoded to the ASCII it spells (what a model may read while a person sees
 * nothing), and a note for runs of other invisible format characters.
 */
export function hiddenCharacters(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(HIDDEN)) {
    const tags = [...m[0]].filter((c) => c.codePointAt(0)! >= 0xe0000).map((c) => String.fromCodePoint(c.codePointAt(0)! - 0xe0000)).join('');
    out.push(tags.trim() ? `hidden text: ${tags}` : `${[...m[0]].length} bidi control character(s)`);
  }
  return out;
}

function evalPredicate(p: Predicate, e: StageEvent, call: CallView | null): Holds {
  const given = givenBy(userRequestText(e.messages));
  const text = normalizeText(call ? stageText({ ...e, calls: [call] }) : stageText(e));
  let r: Holds;
  switch (p.name) {
    case 'read_before':
      r = { holds: callsSoFar(e.messages).some((c) => p.regex[0]!.test(normalizeText(c.name))), evidence: [] };
      break;
    case 'recipient_not_in_request': {
      const ev = call ? addressesIn(call.arguments).filter((a) => !isGiven(a, given)) : [];
      r = { holds: ev.length > 0, evidence: ev };
      break;
    }
    case 'name_matches':
      r = { holds: call !== null && p.regex[0]!.test(normalizeText(call.name)), evidence: [] };
      break;
    case 'arg_matches': {
      const v = call?.arguments[p.args[0]!];
      r = { holds: v !== undefined && p.regex[1]!.test(normalizeText(typeof v === 'string' ? v : JSON.stringify(v))), evidence: [] };
      break;
    }
    case 'pattern': {
      const re = new RegExp(p.regex[0]!.source, 'giu');
      const ev = [...new Set([...text.matchAll(re)].map((m) => m[0]).filter(Boolean))];
      r = { holds: ev.length > 0, evidence: ev };
      break;
    }
    case 'secret_patterns': {
      const ev = secretsIn(text).filter((s) => !isGiven(s, given));
      r = { holds: ev.length > 0, evidence: ev };
      break;
    }
    case 'echoes_observation_data': {
      const seen = new Set(observationsSoFar(e.messages).flatMap((o) => secretsIn(normalizeText(o.content))));
      const ev = [...seen].filter((s) => occursIn(s, text) && !isGiven(s, given));
      r = { holds: ev.length > 0, evidence: ev };
      break;
    }
    case 'unrequested_action': {
      const words = call ? normalizeText(call.name).replace(/([a-z0-9])([A-Z])/g, '$1 $2').split(/[\s_-]+/).filter(Boolean) : [];
      const verb = words.find((w) => new RegExp(`^(?:${p.regex[0]!.source})$`, 'i').test(w));
      const stem = verb?.toLowerCase().slice(0, 4);
      const asked = stem !== undefined && given.text.split(/[^a-z]+/).some((w) => w.startsWith(stem));
      r = { holds: verb !== undefined && !asked, evidence: verb && !asked ? [verb] : [] };
      break;
    }
    case 'hidden_characters': {
      // the raw text (every other predicate reads it normalised, which removes exactly these characters)
      const ev = hiddenCharacters(call ? stageText({ ...e, calls: [call] }) : stageText(e));
      r = { holds: ev.length > 0, evidence: ev };
      break;
    }
    default:
      throw new Error(`unknown predicate ${p.name}`);
  }
  return p.negate ? { holds: !r.holds, evidence: [] } : r;
}

const parsed = new Map<string, Rule[]>();

function skillRules(skill: Skill): Rule[] {
  if (!skill.rules) throw new Error(`skill ${skill.name}: check rules without a rules file`);
  let r = parsed.get(skill.rules.file);
  if (!r) {
    r = parseRules(skill.rules.text, skill.rules.file);
    parsed.set(skill.rules.file, r);
  }
  return r;
}

/** Rules that fire on an event, with their evidence and the calls they fired on. */
function fireRules(rules: readonly Rule[], e: StageEvent): { rule: Rule; evidence: string[]; callId: string | null }[] {
  // a plan's steps are targets as proposed calls are: AgentSpec's rules act on plans and on tool invocations alike
  const targets: (CallView | null)[] = (e.stage === 'tool_selection' || e.stage === 'tool_execution' || e.stage === 'planning') ? (e.calls ?? []) : [null];
  const fired: { rule: Rule; evidence: string[]; callId: string | null }[] = [];
  for (const rule of rules) {
    for (const call of targets) {
      const name = call ? normalizeText(call.name) : undefined;
      if (!rule.trigger.some((g) => g === '*' || (name !== undefined && globMatch(g, name)))) continue;
      const evidence: string[] = [];
      let all = true;
      for (const p of rule.checks) {
        const h = evalPredicate(p, e, call);
        if (!h.holds) { all = false; break; }
        evidence.push(...h.evidence);
      }
      if (all) fired.push({ rule, evidence, callId: call?.id ?? null });
    }
  }
  return fired;
}

export async function rulesCheck(skill: Skill, e: StageEvent, _env: CheckEnv): Promise<CheckResult> {
  const t0 = performance.now();
  const fired = fireRules(skillRules(skill), e);
  const callIds = [...new Set(fired.map((f) => f.callId).filter((x): x is string => x !== null))];
  return {
    risky: fired.length > 0,
    reason: fired.length ? [...new Set(fired.map((f) => f.rule.reason))].join(' ') : 'no rule fired',
    evidence: [...new Set(fired.flatMap((f) => f.evidence))],
    ...(callIds.length ? { callIds } : {}),
    verdict: null,
    score: null,
    raw: fired.map((f) => f.rule.id).join(','),
    tokens: 0,
    latencyMs: performance.now() - t0,
  };
}
