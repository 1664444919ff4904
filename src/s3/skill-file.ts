/**
 * SKILL.md: strict parsing. One bad field → one SafekeepError naming the file, the field and the fix.
 *
 * ```
 * ---
 * name: parse-data                 # = the folder name; [a-z0-9-]
 * stage: tool_observation          # input | tool_selection | tool_execution | tool_observation | output
 * description: One line the guard agent reads when picking skills.
 * inspection: [request, history, observation]   # optional; the parts of the stage event the skill reads
 *                                  # (request | history | calls | observation | answer; default: all of its stage's)
 * mandatory: true                  # optional (default false): runs on every event of its stage, whatever its
 *                                  # filter or the guard agent picks
 * filter:                          # optional; every field given must match (not applied to a mandatory skill)
 *   tools: ["*"]                   # tool names, * = wildcard
 *   patterns: ["ignore (all )?previous"]   # case-insensitive regular expressions over the stage text
 *   roles: [tool]
 * resources: [prompt.md]           # files beside SKILL.md
 * check: llm                       # llm | rules | probe
 * prompt: prompt.md                # llm: a resource, or builtin:safekeep-judge | builtin:safejudge
 * memory: memory.json              # llm, optional: rule memory (a resource)
 * max_tokens: 48                   # llm, optional
 * rules: rules.txt                 # rules: a resource in the rule language of rules-lang.ts
 * direction: direction.json        # probe: a resource; with layer: N and threshold: X
 * mitigation: recover              # recover | block | respond (tool_execution: incident response)
 * recovery: "Removed ... {{evidence}}"    # recovery message template
 * guidance: "..."                  # optional post-recovery guidance template
 * ---
 * The checking procedure in prose.
 * ```
 */
import { existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { basename, join, resolve, sep } from 'node:path';
import { readRegularText } from '../checkpoint/regular-file.ts';
import { SafekeepError } from '../util/errors.ts';
import { readRuleMemory } from './memory.ts';
import { parseRules } from './rules-lang.ts';
import { FrontMatterError, parseFrontMatter, splitFrontMatter, type FmValue } from './front-matter.ts';
import { BUILTIN_PROMPTS, CHECK_KINDS, MITIGATIONS, PROMPT_VARS, TEMPLATE_VARS, type BuiltinPrompt, type CheckKind, type Mitigation, type Skill, type SkillFilter } from './skill.ts';
import { STAGES, isStage, type Stage } from './stages.ts';
import { INSPECTION_PARTS, itemPart, PLACEHOLDER_PART, PREDICATE_PARTS, STAGE_PARTS, type InspectionPart } from './inspection.ts';

export class SkillFileError extends SafekeepError {
  constructor(readonly file: string, readonly field: string, problem: string, fix: string) {
    super(`${file}: field "${field}": ${problem} — fix: ${fix}`, 2);
    this.name = 'SkillFileError';
  }
}

const FIELDS = ['name', 'stage', 'description', 'inspection', 'mandatory', 'filter', 'resources', 'check', 'prompt', 'memory', 'max_tokens', 'rules', 'direction', 'layer',
  'threshold', 'mitigation', 'recovery', 'guidance'] as const;
const FILTER_FIELDS = ['tools', 'patterns', 'roles'] as const;
/** fields that belong to one check kind only */
const CHECK_FIELDS: Record<string, CheckKind> = { prompt: 'llm', memory: 'llm', max_tokens: 'llm', rules: 'rules', direction: 'probe', layer: 'probe', threshold: 'probe' };

/** The most a SKILL.md, prompt or rule file may hold: a procedure is prose, not megabytes. */
export const MAX_SKILL_FILE_BYTES = 1024 * 1024;

/**
 * A skill file's text: a regular file only (a FIFO would block start-up, a device never end) of at most
 * MAX_SKILL_FILE_BYTES, checked on the opened descriptor before anything is read.
 */
export function readSkillFile(path: string): string {
  return readRegularText(path, MAX_SKILL_FILE_BYTES);
}

export const DEFAULT_GUIDANCE = 'Safety note from the guard ({{skill}}): {{reason}} Do not try to do this again; continue with the rest of the user\'s request.';

/**
 * The front matter's fields, read strictly: each reader throws the SkillFileError that names the file, the field
 * and the fix. The parse steps below share one, so every message has the same shape.
 */
class SkillFields {
  constructor(readonly fm: Map<string, FmValue>, readonly file: string) {}

  err(field: string, problem: string, fix: string): SkillFileError {
    return new SkillFileError(this.file, field, problem, fix);
  }

  /** a one-line text field, trimmed */
  str(k: string, required: boolean): string | undefined {
    const v = this.fm.get(k);
    if (v === undefined) {
      if (required) throw this.err(k, 'missing', `add "${k}: ..."`);
      return undefined;
    }
    if (typeof v !== 'string' || v.trim() === '') throw this.err(k, 'must be a non-empty text', `write "${k}: <text>"`);
    return v.trim();
  }

  /** a list field (one bare value is a list of one) */
  list(v: FmValue | undefined, field: string): string[] | undefined {
    if (v === undefined) return undefined;
    if (typeof v === 'string') return [v];
    if (!Array.isArray(v)) throw this.err(field, 'must be a list', `write "${field}: [a, b]"`);
    return v;
  }

  /** a recovery or guidance template: only the placeholders the runtime fills */
  template(k: string, required: boolean): string | undefined {
    const t = this.str(k, required);
    if (t === undefined) return undefined;
    for (const m of t.matchAll(/\{\{\s*(\w+)\s*\}\}/g)) {
      if (!(TEMPLATE_VARS as readonly string[]).includes(m[1]!)) throw this.err(k, `unknown placeholder {{${m[1]}}}`, `use only ${TEMPLATE_VARS.map((v) => `{{${v}}}`).join(', ')}`);
    }
    return t;
  }

  /** a field naming one of the skill's resources → its absolute path */
  resource(k: string, required: boolean, resources: ReadonlyMap<string, string>): string | undefined {
    const r = this.str(k, required);
    if (r === undefined) return undefined;
    const p = resources.get(r);
    if (!p) throw this.err(k, `'${r}' is not listed in resources`, `add '${r}' to "resources: [...]"`);
    return p;
  }
}

/** The front matter split off and parsed; a field no skill has is refused before any is read. */
function readFrontMatter(text: string, file: string): { fields: SkillFields; body: string } {
  const split = splitFrontMatter(text);
  if (!split) throw new SkillFileError(file, '---', 'no front matter', 'start the file with a line "---", the fields, then a line "---"');
  let fm: Map<string, FmValue>;
  try {
    fm = parseFrontMatter(split.front);
  } catch (e) {
    if (e instanceof FrontMatterError) throw new SkillFileError(file, e.key ?? `line ${e.line + 1}`, `${e.message} (line ${e.line + 1})`, 'write "key: value" lines as in src/s3/README.md');
    throw e;
  }
  const fields = new SkillFields(fm, file);
  for (const k of fm.keys()) {
    if (!(FIELDS as readonly string[]).includes(k)) throw fields.err(k, 'unknown field', `remove it; known fields: ${FIELDS.join(', ')}`);
  }
  return { fields, body: split.body };
}

/** The declared inspection parts (each one that exists at the stage), or every part of the stage by default. */
function parseInspection(f: SkillFields, stage: Stage): InspectionPart[] {
  const stageParts = STAGE_PARTS[stage];
  const insp = f.list(f.fm.get('inspection'), 'inspection');
  if (insp === undefined) return [...stageParts];
  if (insp.length === 0) throw f.err('inspection', 'is empty', `name the parts the skill reads: ${stageParts.join(', ')}`);
  for (const x of insp) {
    if (!(INSPECTION_PARTS as readonly string[]).includes(x)) throw f.err('inspection', `unknown part '${x}'`, `use ${INSPECTION_PARTS.join(', ')}`);
    if (!(stageParts as readonly string[]).includes(x)) throw f.err('inspection', `'${x}' does not exist at stage ${stage}`, `use only ${stageParts.join(', ')}`);
  }
  return [...new Set(insp as InspectionPart[])];
}

/** The fields every skill has, checked in the order a reader fixes them (who it is, what it reads, how it acts). */
function parseCommon(f: SkillFields, dir: string) {
  const name = f.str('name', true)!;
  if (!/^[a-z0-9][a-z0-9-]*$/.test(name)) throw f.err('name', `'${name}' is not a skill name`, 'use lower-case letters, digits and dashes');
  if (name !== basename(dir)) throw f.err('name', `'${name}' differs from the folder name '${basename(dir)}'`, `rename the folder or set "name: ${basename(dir)}"`);
  const stage = f.str('stage', true)!;
  if (!isStage(stage)) throw f.err('stage', `unknown stage '${stage}'`, `use one of ${STAGES.join(', ')}`);
  const description = f.str('description', true)!;
  const inspection = parseInspection(f, stage);
  const mand = f.str('mandatory', false);
  if (mand !== undefined && mand !== 'true' && mand !== 'false') throw f.err('mandatory', `'${mand}' is not true or false`, 'write "mandatory: true" or leave the field out');
  const check = f.str('check', true)!;
  if (!(CHECK_KINDS as readonly string[]).includes(check)) throw f.err('check', `unknown check '${check}'`, `use one of ${CHECK_KINDS.join(', ')}`);
  const mitigation = f.str('mitigation', true)!;
  if (!(MITIGATIONS as readonly string[]).includes(mitigation)) throw f.err('mitigation', `unknown mitigation '${mitigation}'`, `use one of ${MITIGATIONS.join(', ')}`);
  if (mitigation === 'respond' && stage !== 'tool_execution') throw f.err('mitigation', `respond (incident response) acts on a call that ran: only at stage tool_execution, not ${stage}`, 'use recover or block, or stage: tool_execution');
  // a field of another check kind would be silently ignored: refuse it so the author sees the mismatch
  for (const [k, kind] of Object.entries(CHECK_FIELDS)) {
    if (f.fm.has(k) && kind !== check) throw f.err(k, `only used by "check: ${kind}" (this skill has check: ${check})`, `remove "${k}" or set "check: ${kind}"`);
  }
  const recovery = f.template('recovery', true)!;
  const guidance = f.template('guidance', false) ?? DEFAULT_GUIDANCE;
  return { name, stage, description, inspection, mandatory: mand === 'true', check: check as CheckKind, mitigation: mitigation as Mitigation, recovery, guidance };
}

/** `filter:` — tool names or globs, case-insensitive patterns, roles; every field given must match. */
function parseFilter(f: SkillFields): SkillFilter {
  const filter: SkillFilter = {};
  const fv = f.fm.get('filter');
  if (fv === undefined) return filter;
  if (typeof fv === 'string' || Array.isArray(fv)) throw f.err('filter', 'must be a map', 'write "filter:" and indented "tools: [..]", "patterns: [..]" or "roles: [..]" lines');
  for (const k of Object.keys(fv)) {
    if (!(FILTER_FIELDS as readonly string[]).includes(k)) throw f.err(`filter.${k}`, 'unknown filter field', `use ${FILTER_FIELDS.join(', ')}`);
  }
  const tools = f.list(fv.tools, 'filter.tools');
  if (tools) {
    for (const t of tools) if (!/^[\w.*-]+$/.test(t)) throw f.err('filter.tools', `'${t}' is not a tool name or glob`, 'use letters, digits, _ . - and * only');
    filter.tools = tools;
  }
  const patterns = f.list(fv.patterns, 'filter.patterns');
  if (patterns) {
    filter.patterns = patterns.map((p) => {
      try {
        return new RegExp(p, 'iu');
      } catch (e) {
        throw f.err('filter.patterns', `'${p}' is not a regular expression (${(e as Error).message})`, 'write a JavaScript regular expression (case-insensitive)');
      }
    });
  }
  const roles = f.list(fv.roles, 'filter.roles');
  if (roles) {
    for (const r of roles) if (!['system', 'developer', 'user', 'assistant', 'tool'].includes(r)) throw f.err('filter.roles', `unknown role '${r}'`, 'use system, developer, user, assistant or tool');
    filter.roles = roles;
  }
  return filter;
}

/** `resources:` — file names inside the skill folder → absolute paths. */
function parseResources(f: SkillFields, dir: string): Map<string, string> {
  const resources = new Map<string, string>();
  for (const r of f.list(f.fm.get('resources'), 'resources') ?? []) {
    if (!/^[\w.-]+(\/[\w.-]+)*$/.test(r) || r.split('/').includes('..')) throw f.err('resources', `'${r}' is not a file name inside the skill folder`, 'name files relative to the skill folder, without ..');
    const p = join(dir, r);
    if (!existsSync(p) || !statSync(p).isFile()) throw f.err('resources', `'${r}' does not exist in ${dir}`, `add the file or remove it from resources`);
    // a symlink (of the file or a folder on its way) may lead out of the skill folder: what is read, and sent to a
    // judge, must be inside it
    if (!realpathSync(p).startsWith(realpathSync(dir) + sep)) {
      throw f.err('resources', `'${r}' is a link to a file outside the skill folder`, 'copy the file into the skill folder instead of linking to it');
    }
    resources.set(r, resolve(p));
  }
  return resources;
}

/** `prompt:` — a builtin judgment context, or a template whose placeholders read only declared parts. */
function parsePrompt(f: SkillFields, skill: Skill): NonNullable<Skill['prompt']> {
  const p = f.str('prompt', true)!;
  if (p.startsWith('builtin:')) {
    const b = p.slice('builtin:'.length);
    if (!(BUILTIN_PROMPTS as readonly string[]).includes(b)) throw f.err('prompt', `unknown builtin '${b}'`, `use ${BUILTIN_PROMPTS.map((x) => `builtin:${x}`).join(' or ')}, or a prompt file`);
    if (!skill.inspection.includes('request')) throw f.err('inspection', `builtin:${b} judges the request, which is not declared`, 'add request to "inspection: [...]"');
    return { builtin: b as BuiltinPrompt };
  }
  const file = f.resource('prompt', true, skill.resources)!;
  const t = readSkillFile(file);
  // a placeholder null-mapped reads nothing of the event; 'item' is the stage's own item (call, result or answer)
  const reads = (part: InspectionPart | 'item' | null): boolean => part === null || skill.inspection.includes(part === 'item' ? itemPart(skill.stage)! : part);
  for (const m of t.matchAll(/\{\{\s*(\w+)\s*\}\}/g)) {
    if (!(PROMPT_VARS as readonly string[]).includes(m[1]!)) throw f.err('prompt', `${file} uses unknown placeholder {{${m[1]}}}`, `use only ${PROMPT_VARS.map((v) => `{{${v}}}`).join(', ')}`);
    const part = PLACEHOLDER_PART[m[1]!] ?? null;
    if (!reads(part)) throw f.err('inspection', `${file} shows {{${m[1]}}}, which reads '${part === 'item' ? itemPart(skill.stage) : part}', not declared`, `add it to "inspection: [...]" or remove {{${m[1]}}} from the prompt`);
  }
  return { template: t, file };
}

/** `check: llm` — its prompt, optional rule memory (which the template must show) and answer budget. */
function parseLlmCheck(f: SkillFields, skill: Skill): void {
  skill.prompt = parsePrompt(f, skill);
  skill.memory = f.resource('memory', false, skill.resources);
  if (skill.memory) {
    try {
      readRuleMemory(skill.memory);
    } catch (e) {
      throw f.err('memory', (e as Error).message, 'regenerate it with `safekeep s3 rules` or correct the file');
    }
    if ('template' in skill.prompt && !/\{\{\s*memory\s*\}\}/.test(skill.prompt.template)) throw f.err('memory', 'the prompt template has no {{memory}} placeholder', 'add {{memory}} to the prompt file where the rules should appear');
  }
  const mt = f.str('max_tokens', false);
  if (mt !== undefined) {
    const n = Number(mt);
    if (!Number.isInteger(n) || n < 1 || n > 4096) throw f.err('max_tokens', `'${mt}' is not an integer in 1..4096`, 'write e.g. "max_tokens: 32"');
    skill.maxTokens = n;
  }
}

/** `check: rules` — the rule file parses, and no rule reads a part of the stage the skill did not declare. */
function parseRulesCheck(f: SkillFields, skill: Skill): void {
  const file = f.resource('rules', true, skill.resources)!;
  skill.rules = { text: readSkillFile(file), file };
  let parsedRules;
  try {
    parsedRules = parseRules(skill.rules.text, file);
  } catch (e) {
    throw f.err('rules', (e as Error).message, 'correct the rule file (syntax in src/s3/rules-lang.ts)');
  }
  const stageParts = STAGE_PARTS[skill.stage] as readonly string[];
  for (const r of parsedRules) {
    for (const p of r.checks) {
      const miss = (PREDICATE_PARTS[p.name] ?? []).filter((x) => stageParts.includes(x) && !skill.inspection.includes(x));
      if (miss.length) throw f.err('inspection', `rule ${r.id}: ${p.name} reads ${miss.join(', ')}, not declared`, `add ${miss.join(', ')} to "inspection: [...]"`);
    }
  }
}

/** `check: probe` — the direction file, the layer it reads (hidden[0] = embeddings) and the threshold (default 0). */
function parseProbeCheck(f: SkillFields, skill: Skill): void {
  const direction = f.resource('direction', true, skill.resources)!;
  const layer = Number(f.str('layer', true));
  if (!Number.isInteger(layer) || layer < 0) throw f.err('layer', `'${f.fm.get('layer') as string}' is not a layer index`, 'write an integer ≥ 0 (hidden[0] = embeddings)');
  const thr = f.str('threshold', false);
  const threshold = thr === undefined ? 0 : Number(thr);
  if (!Number.isFinite(threshold)) throw f.err('threshold', `'${thr}' is not a number`, 'write e.g. "threshold: 0.5"');
  skill.probe = { direction, layer, threshold };
}

/**
 * Parse SKILL.md text. `dir` is the skill folder (resources are looked up there). The steps run in a fixed order
 * (common fields, filter, resources, body, then the check's own fields), so a file with several faults always
 * reports the same one first.
 */
export function parseSkill(text: string, file: string, dir: string): Skill {
  const { fields: f, body } = readFrontMatter(text, file);
  const common = parseCommon(f, dir);
  const filter = parseFilter(f);
  const resources = parseResources(f, dir);
  const { name, stage, description, inspection, mandatory, check, mitigation, recovery, guidance } = common;
  const skill: Skill = { name, stage, description, inspection, mandatory, filter, resources, check, mitigation, recovery, guidance, body: body.trim(), dir: resolve(dir), file };
  if (skill.body === '') throw f.err('(body)', 'the checking procedure is empty', 'describe below the front matter, in prose, how the risk is checked');
  if (skill.check === 'llm') parseLlmCheck(f, skill);
  else if (skill.check === 'rules') parseRulesCheck(f, skill);
  else parseProbeCheck(f, skill);
  return skill;
}

/** Read `<dir>/SKILL.md`. */
export function loadSkill(dir: string): Skill {
  const file = join(dir, 'SKILL.md');
  if (!existsSync(file)) throw new SkillFileError(file, '(file)', 'no SKILL.md in the skill folder', `add ${file} or remove the folder from --skills`);
  return parseSkill(readSkillFile(file), file, dir);
}

/**
 * Skills from a list of folders: each folder is a skill (it has SKILL.md) or holds skill folders. Names must be
 * unique across all folders.
 */
export function loadSkills(dirs: readonly string[]): Skill[] {
  const out: Skill[] = [];
  const seen = new Map<string, string>();
  for (const d of dirs) {
    if (!existsSync(d) || !statSync(d).isDirectory()) throw new SafekeepError(`skills folder ${d} does not exist`);
    const folders = existsSync(join(d, 'SKILL.md')) ? [d] : readdirSync(d).sort().map((f) => join(d, f)).filter((f) => statSync(f).isDirectory() && existsSync(join(f, 'SKILL.md')));
    if (folders.length === 0) throw new SafekeepError(`skills folder ${d} has no SKILL.md (neither in it nor in its sub-folders)`);
    for (const f of folders) {
      const s = loadSkill(f);
      const prev = seen.get(s.name);
      if (prev) throw new SkillFileError(s.file, 'name', `'${s.name}' is also the name of ${prev}`, 'give each skill a unique name');
      seen.set(s.name, s.file);
      out.push(s);
    }
  }
  return out;
}

/** `--skills DIR[,DIR]` → absolute folders (default: `<root>/skills`, the shipped skills). */
export function skillDirsFromFlag(flag: string | undefined, root: string): string[] {
  return (flag ?? join(root, 'skills')).split(',').map((x) => x.trim()).filter(Boolean).map((d) => resolve(d));
}
