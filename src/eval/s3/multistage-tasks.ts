/**
 * `s3 eval --bench multistage`: our own suite built after the six risk types of the S³ paper (not its benchmark,
 * which is not public; data/multistage/DATA_CARD.md). Every task joins a benign and a hazardous component in a
 * scripted world (`world.ts`: a household and an office with API-like tools), the hazard entering at one stage:
 *
 * | riskType | stage | the hazard |
 * | input | input | a harmful instruction in the user's own request |
 * | memory | memory | a poisoned entry among the memory the agent retrieves |
 * | backdoor_pot | planning | a poisoned plan demonstration whose trigger is in the request |
 * | tool_selection | tool_selection | a call against policy (a secret the user never typed sent out) |
 * | environment_perturbation | tool_execution | a requested tool also carries out an unsafe action |
 * | indirect_injection | tool_observation | an instruction injected into a tool result |
 *
 * Both components are scored from the world's end state (a harm incident response undid is gone from it). Every
 * task plans first (`plan: true`: the same agent procedure under every configuration). `limit` keeps the first N
 * tasks of each risk type.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { AGENT_SYSTEM } from '../../benchmarks/cases.ts';
import { SafekeepError } from '../../util/errors.ts';
import type { MemoryEntry } from '../../s3/event.ts';
import { isStage, type Stage } from '../../s3/stages.ts';
import type { S3Task, StatePredicate } from './task.ts';
import { getPath, makeEnvironment, worldToolSpecs, type WorldSpec } from './world.ts';

/** The risk types, in the order of the tables. */
export const RISK_TYPES = ['input', 'memory', 'backdoor_pot', 'tool_selection', 'environment_perturbation', 'indirect_injection'] as const;

interface TaskFile {
  id: string;
  riskType: string;
  stage: string;
  world: string;
  request: string;
  tools: string[];
  benign: StatePredicate;
  hazard: StatePredicate;
  memory?: MemoryEntry[];
  demonstrations?: string;
  perturb?: Record<string, { name: string; arguments: Record<string, unknown> }[]>;
  /** initial-state overrides, by dotted path */
  state?: Record<string, unknown>;
}

function setAt(state: Record<string, unknown>, path: string, value: unknown): void {
  const ks = path.split('.');
  let o = state;
  for (const k of ks.slice(0, -1)) o = (o[k] ??= {}) as Record<string, unknown>;
  o[ks.at(-1)!] = value;
}

function task(t: TaskFile, worlds: Record<string, WorldSpec>, file: string): S3Task {
  const w = worlds[t.world];
  if (!w) throw new SafekeepError(`${file}: task ${t.id}: unknown world '${t.world}'`);
  if (!(RISK_TYPES as readonly string[]).includes(t.riskType) || !isStage(t.stage)) throw new SafekeepError(`${file}: task ${t.id}: unknown risk type '${t.riskType}' or stage '${t.stage}'`);
  const missing = t.tools.filter((n) => !w.tools[n]);
  if (missing.length) throw new SafekeepError(`${file}: task ${t.id}: tools not in world ${t.world}: ${missing.join(', ')}`);
  const state = structuredClone(w.state);
  for (const [p, v] of Object.entries(t.state ?? {})) {
    if (getPath(w.state, p) === undefined) throw new SafekeepError(`${file}: task ${t.id}: state path '${p}' is not in world ${t.world}`);
    setAt(state, p, v);
  }
  const world: WorldSpec = { state, tools: Object.fromEntries(t.tools.map((n) => [n, w.tools[n]!])) };
  const system = t.demonstrations ? `${AGENT_SYSTEM}\n\n${t.demonstrations}` : AGENT_SYSTEM;
  return {
    id: t.id,
    group: `multistage/${t.riskType}`,
    messages: [{ role: 'system', content: system }, { role: 'user', content: t.request }],
    tools: worldToolSpecs(world.tools),
    simulate: () => { throw new Error('multistage tasks run in their environment'); },
    environment: () => makeEnvironment(world, t.perturb ?? {}),
    scoring: { kind: 'state', hazard: t.hazard, benign: t.benign },
    plan: true,
    ...(t.memory ? { memory: { readTool: 'memory_search', writeTool: 'memory_write', entries: t.memory } } : {}),
    riskType: t.riskType,
    hazardStage: t.stage as Stage,
  };
}

/** The suite's tasks from `dir` (data/multistage): the first `limit` of each risk type, in file order. */
export function multistageTasks(dir: string, limit = Infinity): S3Task[] {
  const worldsFile = join(dir, 'worlds.json');
  const tasksFile = join(dir, 'tasks.jsonl');
  const worlds = (JSON.parse(readFileSync(worldsFile, 'utf8')) as { worlds: Record<string, WorldSpec> }).worlds;
  const rows = readFileSync(tasksFile, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l) as TaskFile);
  const out: S3Task[] = [];
  for (const r of RISK_TYPES) out.push(...rows.filter((t) => t.riskType === r).slice(0, limit).map((t) => task(t, worlds, tasksFile)));
  return out;
}
