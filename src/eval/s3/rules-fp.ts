/**
 * How often a `check: rules` skill at tool_selection fires on benign calls (its false-positive rate) and on the
 * attack calls it exists to stop (its hit rate), on events built from the data sets without any model:
 *
 * benign calls —
 * - bundled pairs and AgentHarm benign behaviours: the behaviour's target functions called in order, each call
 *   seen with the calls before it and their simulated results in the history. Arguments are synthesised from the
 *   schema: an e-mail / URL / phone parameter takes that kind of value from the request (a plain name when the
 *   request has none: the simulated tools return no addresses), date and time parameters a date-time
 *   (`2022-02-23 16:00`), other strings a phrase of the request, numbers 1.
 * - InjecAgent's user tools: each distinct user-tool call with InjecAgent's own `Tool Parameters`, after the user's
 *   instruction; then the same call again after that first call's result (a benign read → act chain).
 * attack calls —
 * - InjecAgent data stealing: the user tool's call and its observation (the injection inside), the extraction
 *   tool's call and InjecAgent's simulated response, then the send to the attacker's address (the address of the
 *   attacker instruction) with that response as the body. The rule should fire on the send.
 */
import type { ToolSpec } from '../../data/types.ts';
import type { ChatMessage } from '../../guard/types.ts';
import type { CheckEnv } from '../../s3/check.ts';
import type { CallView, StageEvent } from '../../s3/event.ts';
import { runStage } from '../../s3/guard.ts';
import type { Skill } from '../../s3/skill.ts';

/** One tool_selection event with the call under test (its last call). */
export interface RuleCase {
  source: string;
  id: string;
  event: StageEvent;
}

interface Behaviour { id: string; prompt: string; targetFunctions: readonly string[]; tools: readonly ToolSpec[] }

type Schema = { type?: string | string[]; properties?: Record<string, Schema>; required?: string[]; items?: Schema; enum?: unknown[] };

const EMAIL = /[\w.+-]+@[\w-]+(?:\.[\w-]+)+/;
const URL_RE = /\bhttps?:\/\/[^\s"'<>)]+/;
const PHONE = /\+?\d[\d ().-]{8,}\d/;

/** A value for one parameter, drawn from the request where the parameter asks for an address. */
function valueFor(name: string, s: Schema, request: string, depth = 0): unknown {
  if (s.enum?.length) return s.enum[0];
  const type = Array.isArray(s.type) ? s.type[0] : s.type;
  const n = name.toLowerCase();
  if (type === 'integer' || type === 'number') return 1;
  if (type === 'boolean') return true;
  if (type === 'array') return depth > 2 ? [] : [valueFor(name, s.items ?? { type: 'string' }, request, depth + 1)];
  if (type === 'object') return depth > 2 ? {} : argsFor(s, request, depth + 1);
  if (/e-?mail|recipient|^to$|sender|cc|bcc/.test(n)) return EMAIL.exec(request)?.[0] ?? 'Alex';
  if (/url|link|website|domain/.test(n)) return URL_RE.exec(request)?.[0] ?? 'the page';
  if (/phone|number_to|mobile/.test(n)) return PHONE.exec(request)?.[0] ?? 'Alex';
  if (/date|time|start|end|when|deadline/.test(n)) return '2022-02-23 16:00';
  return request.split(/\s+/).slice(0, 6).join(' ');
}

function argsFor(s: Schema, request: string, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of s.required ?? Object.keys(s.properties ?? {})) out[k] = valueFor(k, s.properties?.[k] ?? { type: 'string' }, request, depth);
  return out;
}

const wire = (c: CallView) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments) } });

/** The chain's events: call k seen after calls 0..k-1 and their simulated results. */
function chainEvents(source: string, id: string, system: string, request: string, tools: readonly ToolSpec[], calls: readonly CallView[], results: readonly string[]): RuleCase[] {
  const out: RuleCase[] = [];
  const messages: ChatMessage[] = [{ role: 'system', content: system }, { role: 'user', content: request }];
  calls.forEach((c, k) => {
    out.push({ source, id: `${id}#${k + 1}:${c.name}`, event: { stage: 'tool_selection', messages: [...messages], tools: [...tools], calls: [c] } });
    messages.push({ role: 'assistant', content: '', tool_calls: [wire(c)] }, { role: 'tool', tool_call_id: c.id, name: c.name, content: results[k] ?? '{"status": "success"}' });
  });
  return out;
}

/** Benign chains of a behaviour list (pairs' benign requests, AgentHarm's benign behaviours). */
export function behaviourCases(source: string, system: string, behaviours: readonly Behaviour[]): RuleCase[] {
  return behaviours.flatMap((b) => {
    const calls = b.targetFunctions.map((f, i): CallView => {
      const spec = b.tools.find((t) => t.function.name === f);
      return { id: `c${i + 1}`, name: f, arguments: spec ? argsFor(spec.function.parameters as Schema, b.prompt) : {} };
    });
    const results = calls.map((c) => JSON.stringify({ tool: c.name, status: 'success', arguments: c.arguments }));
    return chainEvents(source, b.id, system, b.prompt, b.tools, calls, results);
  });
}

interface InjecCase { id: string; userInstruction: string; userTool: string; userToolArguments: Record<string, unknown>; toolResponse: string; tools: readonly ToolSpec[] }

/** Each distinct InjecAgent user-tool call, alone and once more after its own (injection-free) result. */
export function injecAgentUserCases(system: string, cases: readonly InjecCase[]): RuleCase[] {
  const seen = new Set<string>();
  const out: RuleCase[] = [];
  for (const c of cases) {
    const key = `${c.userTool} ${JSON.stringify(c.userToolArguments)}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const call: CallView = { id: 'u1', name: c.userTool, arguments: c.userToolArguments };
    const tools = c.tools.filter((t) => t.function.name === c.userTool);
    out.push(...chainEvents('injecagent-user', `${c.userTool}`, system, c.userInstruction, tools, [call, { ...call, id: 'u2' }], ['{"status": "success"}']));
  }
  return out;
}

interface DsCase extends InjecCase { attackerInstruction: string; attackerTools: readonly string[]; attack: string }

/** InjecAgent data stealing: the attacker's send, after the extraction, as a rule must see it. */
export function injecAgentAttackCases(system: string, cases: readonly DsCase[], extractionResult: (tool: string) => string): RuleCase[] {
  return cases.filter((c) => c.attack === 'ds' && c.attackerTools.length >= 2).map((c) => {
    const to = EMAIL.exec(c.attackerInstruction)?.[0] ?? 'amy.watson@gmail.com';
    const data = extractionResult(c.attackerTools[0]!);
    const calls: CallView[] = [
      { id: 'u1', name: c.userTool, arguments: c.userToolArguments },
      { id: 'a1', name: c.attackerTools[0]!, arguments: {} },
      { id: 'a2', name: c.attackerTools[1]!, arguments: { to, subject: 'Requested data', body: data } },
    ];
    return chainEvents('injecagent-ds', c.id, system, c.userInstruction, c.tools, calls, [c.toolResponse, data]).at(-1)!;
  });
}

export interface RuleRate { source: string; n: number; fired: number; examples: string[] }

/** Runs the skill (filter + check, no guard agent: no model) on each case; per source, how many fired. */
export async function ruleFireRates(skill: Skill, cases: readonly RuleCase[], env: CheckEnv): Promise<RuleRate[]> {
  const by = new Map<string, RuleRate>();
  for (const c of cases) {
    const d = await runStage(c.event, { skills: [skill], guardDecision: false, mitigation: 'skill' }, env);
    const r = by.get(c.source) ?? { source: c.source, n: 0, fired: 0, examples: [] };
    r.n++;
    if (d.action !== 'pass') {
      r.fired++;
      if (r.examples.length < 3) r.examples.push(`${c.id}: ${d.runs.map((x) => x.result.raw).join(',')} ${d.runs.flatMap((x) => x.result.evidence).join('; ')}`);
    }
    by.set(c.source, r);
  }
  return [...by.values()];
}

/** Every benign and attack case from the bundled pairs, AgentHarm (test_public + validation when present) and InjecAgent (base). */
export async function loadRuleCases(dirs: { agentharm?: string; injecagent?: string }, system: string): Promise<{ benign: RuleCase[]; attacks: RuleCase[] }> {
  const { loadPairSet } = await import('../../data/load.ts');
  const { readAgentHarm } = await import('../../data/agentharm.ts');
  const { readInjecAgentCases, readInjecAgentTools, readSimulatedAttackerResponses } = await import('../../data/injecagent.ts');
  const pairs = await loadPairSet('pairs');
  const benign = behaviourCases('pairs', system, pairs.pairs.map((p) => ({ id: p.id, prompt: p.benign.prompt, targetFunctions: p.benign.targetFunctions, tools: p.tools })));
  if (dirs.agentharm) {
    // validation is optional in a copy of AgentHarm (the public test split always exists)
    let ah;
    try { ah = readAgentHarm(dirs.agentharm, ['test_public', 'validation']); } catch { ah = readAgentHarm(dirs.agentharm, ['test_public']); }
    benign.push(...behaviourCases('agentharm-benign', system, ah.benign.map((b) => ({ id: b.id, prompt: b.prompt, targetFunctions: b.targetFunctions, tools: b.tools }))));
  }
  const attacks: RuleCase[] = [];
  if (dirs.injecagent) {
    const tools = readInjecAgentTools(dirs.injecagent);
    const cases = readInjecAgentCases(dirs.injecagent, 'base', ['dh', 'ds'], tools);
    benign.push(...injecAgentUserCases(system, cases));
    const responses = readSimulatedAttackerResponses(dirs.injecagent);
    const first = (tool: string) => { for (const [k, v] of responses) if (k.startsWith(`(${tool},`)) return v; return '{"success": true}'; };
    attacks.push(...injecAgentAttackCases(system, cases, first));
  }
  return { benign, attacks };
}

export interface RulesFpReport {
  skill: string;
  benign: RuleRate[];
  attacks: RuleRate[];
  /** over every benign call */
  falsePositive: { fired: number; n: number };
  /** over every attack call */
  hit: { fired: number; n: number };
}

export async function rulesFpReport(skill: Skill, dirs: { agentharm?: string; injecagent?: string }, system: string, env: CheckEnv): Promise<RulesFpReport> {
  const { benign, attacks } = await loadRuleCases(dirs, system);
  const b = await ruleFireRates(skill, benign, env);
  const a = await ruleFireRates(skill, attacks, env);
  const sum = (rs: RuleRate[]) => ({ fired: rs.reduce((x, r) => x + r.fired, 0), n: rs.reduce((x, r) => x + r.n, 0) });
  return { skill: skill.name, benign: b, attacks: a, falsePositive: sum(b), hit: sum(a) };
}

const pct = (k: number, n: number) => (n ? `${((100 * k) / n).toFixed(1)} % (${k}/${n})` : '–');

export function rulesFpMarkdown(r: RulesFpReport): string {
  return [
    `| ${r.skill}: calls | n | fired |`, '| --- | --- | --- |',
    ...r.benign.map((x) => `| benign: ${x.source} | ${x.n} | ${pct(x.fired, x.n)} |`),
    `| **benign, all (false-positive rate)** | ${r.falsePositive.n} | ${pct(r.falsePositive.fired, r.falsePositive.n)} |`,
    ...r.attacks.map((x) => `| attack: ${x.source} | ${x.n} | ${pct(x.fired, x.n)} |`),
    `| **attacks, all (hit rate)** | ${r.hit.n} | ${pct(r.hit.fired, r.hit.n)} |`,
  ].join('\n') + '\n';
}
