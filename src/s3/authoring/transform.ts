/**
 * The S³ transform agent: a defense's description (paper text, docs) → a tested skill folder, in S³'s four steps,
 * each an LLM call answered in JSON:
 *   1. method model — the target stage, the inspection information, the resources, the checking procedure and the
 *      mitigation, extracted from the description;
 *   2. skill write — the skill's files (SKILL.md + resources) in our format, validated by the SAME strict parser
 *      `serve` and `s3 eval` use (skill-file.ts); a parse error is a failed round, fed back like a failed case;
 *   3. skill test — test cases (S³'s tuple: a stage event, the resources the skill reads for it, the expected
 *      safe/unsafe), generated once, run through the guard (`runStage`, the layered trigger with this one skill) →
 *      a result per case. A case's resources are written beside the skill's files for that case only;
 *   4. skill refine — the files and every failure (or the parse error) on the TUNING cases go back to the LLM for
 *      new files; steps 2–3 again, up to `maxRounds` rounds in all.
 * The cases are split once: per expected label with at least two cases, the last third (at least one) is held out.
 * The refine loop never sees held-out cases; each round is judged on them separately, so a skill tuned to its own
 * tests shows up as held-out failures. Every round's skill, cases and results are kept under
 * `<out>/transform/round-<k>/`; the final folder `<out>` holds the round with the fewest tuning failures (ties → the
 * later round); `transform.json` names the draft (round 1) and the final round, for `s3 fidelity`'s Draft vs Final
 * rows. An existing `<out>` is never overwritten without `force`.
 */
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { writeFileAtomic } from '../../util/atomic.ts';
import { SafekeepError } from '../../util/errors.ts';
import type { ChatBackend, ChatMessage } from '../../guard/types.ts';
import type { CheckEnv } from '../check.ts';
import type { StageEvent } from '../event.ts';
import { runStage } from '../guard.ts';
import type { Skill } from '../skill.ts';
import { loadSkill } from '../skill-file.ts';
import { isStage, STAGES } from '../stages.ts';

interface MethodModel {
  name: string;
  stage: string;
  inspection: string;
  resources: string[];
  procedure: string;
  mitigation: string;
}

export interface TestCase {
  id: string;
  expected: 'safe' | 'unsafe';
  event: StageEvent;
  /** resource files (name → content) the skill reads for this case, written beside its files */
  resources?: Record<string, string>;
  /** held out from the refine loop (set by the split) */
  heldOut?: boolean;
}

interface CaseResult {
  id: string;
  heldOut: boolean;
  expected: 'safe' | 'unsafe';
  got: 'safe' | 'unsafe' | 'error';
  action: string;
  reason: string;
  pass: boolean;
}

export interface RoundRecord {
  round: number;
  /** file name → content, as the LLM wrote them */
  files: Record<string, string>;
  /** the parser's error when the files were not a valid skill */
  parseError: string | null;
  results: CaseResult[];
  /** failures among the tuning cases (all cases when the files did not parse) */
  failures: number;
  /** failures among the held-out cases */
  heldOutFailures: number;
  dir: string;
}

export interface TransformOptions {
  /** the defense's description */
  description: string;
  /** the skill folder to create (its basename is the skill name) */
  out: string;
  /** the LLM that transforms (and, for `llm` checks, the guard's LLM) */
  backend: ChatBackend;
  maxRounds?: number;
  force?: boolean;
  /** extra check environment (e.g. `probe`-capable providers); backend defaults to `backend` */
  env?: Partial<CheckEnv>;
  /** answer budget of each transform call (default 2048) */
  maxTokens?: number;
  log?: (line: string) => void;
}

export interface TransformResult {
  skillDir: string;
  methodModel: MethodModel;
  cases: TestCase[];
  rounds: RoundRecord[];
  /** the round copied to `skillDir` */
  chosen: number;
  /** the chosen round passes every tuning and every held-out case */
  passed: boolean;
}

/** The format the LLM writes to (kept short; the full reference is src/s3/README.md). */
export const SKILL_FORMAT = [
  'A skill is a folder: SKILL.md plus resource files beside it. SKILL.md = front matter between two "---" lines, then the checking procedure in prose.',
  'Fields: name (= the folder name), stage (input | tool_selection | tool_execution | tool_observation | output), description (one line),',
  'inspection (optional list of what the skill reads: request, history, calls, observation, answer; a prompt placeholder or rule predicate that reads an undeclared part is an error),',
  'filter (optional map: tools: [globs], patterns: [regexes], roles: [roles]), resources: [file names], check (llm | rules | probe),',
  'prompt (llm: a resource or builtin:safekeep-judge), rules (rules: a resource), mitigation (recover | block | respond — respond only at tool_execution),',
  'recovery (message template; placeholders {{skill}} {{reason}} {{evidence}} {{tool}}), guidance (optional template).',
  'Rule files (check: rules): "rule <id>" / "trigger <tool-name globs or *>" / "check [not] <predicate> <args>" lines / "reason \\"...\\"" / "end".',
  'Predicates: read_before REGEX, recipient_not_in_request, name_matches REGEX, arg_matches ARG REGEX, pattern REGEX, secret_patterns, echoes_observation_data, unrequested_action REGEX.',
].join('\n');

export const TRANSFORM_ROLE = 'You are the S³ transform agent: you turn the description of an agent-safety defense into a stage-specific safety skill for a guard agent. Answer with exactly one JSON object and nothing else.';

function ask(step: string, body: string): ChatMessage[] {
  return [{ role: 'system', content: TRANSFORM_ROLE }, { role: 'user', content: `S3-TRANSFORM ${step}\n\n${body}` }];
}

/** The first JSON object in an answer (code fences allowed). */
export function parseJsonAnswer(raw: string, what: string): Record<string, unknown> {
  const t = raw.replace(/```(?:json)?/g, '');
  const start = t.indexOf('{');
  const end = t.lastIndexOf('}');
  if (start < 0 || end < start) throw new SafekeepError(`s3 transform: the ${what} answer holds no JSON object: ${raw.slice(0, 200)}`);
  try {
    const v = JSON.parse(t.slice(start, end + 1)) as unknown;
    if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
    return v as Record<string, unknown>;
  } catch (e) {
    throw new SafekeepError(`s3 transform: the ${what} answer is not valid JSON (${(e as Error).message}): ${raw.slice(0, 200)}`);
  }
}

function parseMethodModel(v: Record<string, unknown>, name: string): MethodModel {
  const s = (k: string): string => {
    const x = v[k];
    if (typeof x !== 'string' || x.trim() === '') throw new SafekeepError(`s3 transform: method model field "${k}" must be a non-empty text`);
    return x.trim();
  };
  const stage = s('stage');
  if (!isStage(stage)) throw new SafekeepError(`s3 transform: method model stage '${stage}' is not one of ${STAGES.join(', ')}`);
  const resources = Array.isArray(v.resources) ? v.resources.filter((x): x is string => typeof x === 'string') : [];
  return { name, stage, inspection: s('inspection'), resources, procedure: s('procedure'), mitigation: s('mitigation') };
}

function parseFiles(v: Record<string, unknown>): Record<string, string> {
  const files = v.files;
  if (!files || typeof files !== 'object' || Array.isArray(files)) throw new SafekeepError('s3 transform: the skill answer needs "files": {"SKILL.md": "...", ...}');
  const out: Record<string, string> = {};
  for (const [k, c] of Object.entries(files)) {
    if (!/^[\w.-]+$/.test(k) || k.startsWith('.')) throw new SafekeepError(`s3 transform: file name '${k}' is not a plain file name`);
    if (typeof c !== 'string') throw new SafekeepError(`s3 transform: file '${k}' must be text`);
    out[k] = c;
  }
  if (!out['SKILL.md']) throw new SafekeepError('s3 transform: the skill answer has no SKILL.md');
  return out;
}

export function parseCases(v: Record<string, unknown>, stage: string): TestCase[] {
  const cases = v.cases;
  if (!Array.isArray(cases) || cases.length === 0) throw new SafekeepError('s3 transform: the test answer needs "cases": [...] (at least one)');
  return cases.map((c, i) => {
    const o = c as { id?: unknown; expected?: unknown; event?: Partial<StageEvent> };
    const id = typeof o.id === 'string' && o.id ? o.id : `case-${i + 1}`;
    if (o.expected !== 'safe' && o.expected !== 'unsafe') throw new SafekeepError(`s3 transform: case ${id}: "expected" must be safe or unsafe`);
    const e = o.event;
    if (!e || !Array.isArray(e.messages)) throw new SafekeepError(`s3 transform: case ${id}: "event.messages" must be a list`);
    const event: StageEvent = { stage: (isStage(e.stage) ? e.stage : stage) as StageEvent['stage'], messages: e.messages, tools: Array.isArray(e.tools) ? e.tools : [] };
    if (e.calls) event.calls = e.calls;
    if (e.observation) event.observation = e.observation;
    if (typeof e.answer === 'string') event.answer = e.answer;
    const tc: TestCase = { id, expected: o.expected, event };
    const res = (c as { resources?: unknown }).resources;
    if (res !== undefined) {
      if (!res || typeof res !== 'object' || Array.isArray(res)) throw new SafekeepError(`s3 transform: case ${id}: "resources" must be {"file name": "content", ...}`);
      tc.resources = {};
      for (const [k, v] of Object.entries(res)) {
        if (!/^[\w.-]+$/.test(k) || k.startsWith('.') || k === 'SKILL.md') throw new SafekeepError(`s3 transform: case ${id}: resource '${k}' is not a plain resource file name`);
        if (typeof v !== 'string') throw new SafekeepError(`s3 transform: case ${id}: resource '${k}' must be text`);
        tc.resources[k] = v;
      }
    }
    return tc;
  });
}

/** Holds out, per expected label with ≥ 2 cases, the last third of its cases (at least one). */
export function splitHeldOut(cases: readonly TestCase[]): TestCase[] {
  const held = new Set<string>();
  for (const label of ['safe', 'unsafe'] as const) {
    const mine = cases.filter((c) => c.expected === label);
    if (mine.length < 2) continue;
    for (const c of mine.slice(mine.length - Math.max(1, Math.floor(mine.length / 3)))) held.add(c.id);
  }
  return cases.map((c) => ({ ...c, heldOut: held.has(c.id) }));
}

function writeFiles(dir: string, files: Record<string, string>): void {
  mkdirSync(dir, { recursive: true });
  for (const [k, c] of Object.entries(files)) writeFileAtomic(join(dir, k), c);
}

/** Each case through the guard; a case with resources runs a copy of the skill with them (kept under `caseRoot`). */
export async function runCases(skill: Skill, files: Record<string, string>, cases: readonly TestCase[], env: CheckEnv, caseRoot: string): Promise<CaseResult[]> {
  const out: CaseResult[] = [];
  for (const c of cases) {
    const heldOut = c.heldOut === true;
    try {
      let sk = skill;
      if (c.resources && Object.keys(c.resources).length) {
        const dir = join(caseRoot, c.id.replace(/[^\w.-]+/g, '_'), skill.name);
        writeFiles(dir, { ...files, ...c.resources });
        sk = loadSkill(dir);
      }
      const d = await runStage({ ...c.event, stage: sk.stage }, { skills: [sk], guardDecision: false, mitigation: 'skill' }, env);
      const got = d.action === 'pass' ? 'safe' : 'unsafe';
      const reason = d.runs.map((r) => r.result.reason).join('; ') || (d.invoked ? '' : 'filtered out (the skill did not run)');
      out.push({ id: c.id, heldOut, expected: c.expected, got, action: d.action, reason, pass: got === c.expected });
    } catch (e) {
      out.push({ id: c.id, heldOut, expected: c.expected, got: 'error', action: 'error', reason: (e as Error).message, pass: false });
    }
  }
  return out;
}

export async function transformSkill(o: TransformOptions): Promise<TransformResult> {
  const name = basename(o.out);
  if (!/^[a-z0-9][a-z0-9-]*$/.test(name)) throw new SafekeepError(`--out: the folder name '${name}' is the skill name: use lower-case letters, digits and dashes`);
  if (existsSync(o.out) && readdirSync(o.out).length > 0) {
    if (!o.force) throw new SafekeepError(`${o.out} already exists; pass --force to replace it (its transform history goes with it)`);
    rmSync(o.out, { recursive: true, force: true });
  }
  const maxRounds = o.maxRounds ?? 3;
  if (!Number.isInteger(maxRounds) || maxRounds < 1) throw new SafekeepError(`--max-rounds must be a positive integer, got ${maxRounds}`);
  const log = o.log ?? (() => {});
  const maxTokens = o.maxTokens ?? 2048;
  const env: CheckEnv = { backend: o.backend, ...o.env };
  const call = async (step: string, body: string): Promise<Record<string, unknown>> => {
    const r = await o.backend.chat({ messages: ask(step, body), maxTokens, purpose: 'judge' });
    return parseJsonAnswer(r.content, step);
  };
  const history = join(o.out, 'transform');
  mkdirSync(history, { recursive: true });
  writeFileAtomic(join(history, 'description.md'), o.description);

  // 1. method model
  const mm = parseMethodModel(await call('STEP 1: method model', [
    'Extract from the defense description below: "stage" (one of ' + STAGES.join(', ') + '), "inspection" (what information the check looks at),',
    '"resources" (files or lists the check needs), "procedure" (how risk is checked), "mitigation" (block or recover, and what the recovery says).',
    'Answer {"stage": ..., "inspection": ..., "resources": [...], "procedure": ..., "mitigation": ...}.',
    '', '--- description ---', o.description,
  ].join('\n')), name);
  writeFileAtomic(join(history, 'method-model.json'), JSON.stringify(mm, null, 2) + '\n');
  log(`s3 transform: method model — stage ${mm.stage}`);

  // 2. skill write (round 1)
  let files = parseFiles(await call('STEP 2: skill write', [
    `Write the skill "${name}" for this method model as files. Answer {"files": {"SKILL.md": "...", "<resource>": "..."}}.`,
    '', '--- method model ---', JSON.stringify(mm, null, 2), '', '--- format ---', SKILL_FORMAT,
  ].join('\n')));

  // 3. test cases (once)
  const cases = splitHeldOut(parseCases(await call('STEP 3: skill test', [
    `Write test cases for the skill "${name}" at stage ${mm.stage}: each a stage event the guard sees, the resources the skill reads for it`,
    '(optional: resource file name → content, e.g. a rule list), and whether it is safe or unsafe, covering both outcomes.',
    'Answer {"cases": [{"id": ..., "expected": "safe"|"unsafe", "resources": {...}, "event": {"messages": [...], "tools": [...], "calls": [{"id", "name", "arguments"}], "observation": {...}, "answer": "..."}}]}.',
    '', '--- method model ---', JSON.stringify(mm, null, 2),
  ].join('\n')), mm.stage));
  const tuning = cases.filter((c) => !c.heldOut);
  writeFileAtomic(join(history, 'cases.json'), JSON.stringify(cases, null, 2) + '\n');

  const rounds: RoundRecord[] = [];
  for (let k = 1; k <= maxRounds; k++) {
    const dir = join(history, `round-${k}`, name);
    writeFiles(dir, files);
    let parseError: string | null = null;
    let results: CaseResult[] = [];
    try {
      const skill = loadSkill(dir);
      results = await runCases(skill, files, cases, env, join(history, `round-${k}`, 'cases'));
    } catch (e) {
      if (!(e instanceof SafekeepError)) throw e;
      parseError = e.message;
    }
    const failures = parseError ? tuning.length : results.filter((r) => !r.heldOut && !r.pass).length;
    const heldOutFailures = parseError ? cases.length - tuning.length : results.filter((r) => r.heldOut && !r.pass).length;
    const rec: RoundRecord = { round: k, files, parseError, results, failures, heldOutFailures, dir };
    rounds.push(rec);
    writeFileAtomic(join(history, `round-${k}`, 'results.json'), JSON.stringify({ round: k, parseError, failures, heldOutFailures, cases: cases.length, tuning: tuning.length, results }, null, 2) + '\n');
    log(`s3 transform: round ${k}: ${parseError ? `invalid skill (${parseError})` : `${tuning.length - failures}/${tuning.length} tuning cases pass, ${cases.length - tuning.length - heldOutFailures}/${cases.length - tuning.length} held-out`}`);
    if (failures === 0 || k === maxRounds) break;
    // 4. refine
    const feedback = parseError
      ? `The files are not a valid skill. The parser said: ${parseError}`
      : results.filter((r) => !r.heldOut && !r.pass).map((r) => {
        const c = cases.find((x) => x.id === r.id)!;
        return `- case ${r.id}: expected ${r.expected}, the guard said ${r.got} (${r.reason || 'no reason'}). Event: ${JSON.stringify(c.event)}`;
      }).join('\n');
    files = parseFiles(await call('STEP 4: skill refine', [
      `Round ${k} of the skill "${name}" failed these checks. Rewrite the files so that every case comes out as expected.`,
      'Answer {"files": {...}} with every file of the skill.',
      '', '--- failures ---', feedback, '', '--- current files ---', JSON.stringify(files, null, 2), '', '--- format ---', SKILL_FORMAT,
    ].join('\n')));
  }
  // the final folder: the round with the fewest failures, later rounds winning ties
  let best = rounds[0]!;
  for (const r of rounds) if (r.failures <= best.failures) best = r;
  writeFiles(o.out, best.files);
  const passed = best.failures === 0 && best.heldOutFailures === 0;
  const draft = rounds[0]!;
  const summary = {
    skill: name, chosen: best.round, passed, cases: cases.length, tuning: tuning.length, heldOut: cases.filter((c) => c.heldOut).map((c) => c.id),
    // paths relative to the skill folder: the draft (round 1, when it parsed) and the final skill (the folder itself)
    draft: draft.parseError ? null : relative(o.out, draft.dir), final: '.',
    rounds: rounds.map((r) => ({ round: r.round, failures: r.failures, heldOutFailures: r.heldOutFailures, parseError: r.parseError })),
  };
  writeFileAtomic(join(history, 'transform.json'), JSON.stringify(summary, null, 2) + '\n');
  return { skillDir: o.out, methodModel: mm, cases, rounds, chosen: best.round, passed };
}
