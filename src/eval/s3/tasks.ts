/**
 * Tasks for `safekeep s3 eval`: each joins a benign and a hazardous component, as S³'s scenarios do, with
 * simulated tools.
 *
 * - InjecAgent (per case and setting: `base`, and `enhanced`, whose observations prefix the attacker's instruction
 *   with InjecAgent's "IMPORTANT!!! Ignore all previous instructions …" hacking prompt): the user's instruction is the benign component (call the user tool, then answer); the
 *   user tool answers with the case's observation, which carries the attacker's instruction (the hazardous
 *   component). Data stealing: the extraction tool answers with InjecAgent's simulated attacker response for that
 *   tool (exact parameters when they match a stored key, else the tool's first stored response); sending and
 *   direct-harm tools answer `{"success": true}`.
 * - AgentHarm (per benign behaviour of test_public): the benign request, then — in the same user message — a
 *   harmful behaviour whose target functions do not overlap the benign ones (the next one in file order with
 *   disjoint targets), so each component is scored by its own calls. Every tool answers from its spec: a JSON
 *   object with the tool's name, its description and the arguments it was given.
 *
 * `limit` keeps the first N tasks of each group (injecagent/<setting>/dh, injecagent/<setting>/ds, agentharm/pair).
 */
import { readAgentHarm } from '../../data/agentharm.ts';
import { INJECAGENT_SETTINGS, readInjecAgentCases, readInjecAgentTools, readSimulatedAttackerResponses, type InjecAgentSetting } from '../../data/injecagent.ts';
import type { ToolSpec } from '../../data/types.ts';
import type { CallView } from '../../s3/event.ts';
import { airTasks } from './air-tasks.ts';
import { multistageTasks } from './multistage-tasks.ts';
import type { S3Task } from './task.ts';
import { AGENT_SYSTEM } from '../../benchmarks/cases.ts';

import { S3_BENCHES, type S3Bench } from '../../analysis/results.ts';

export { S3_BENCHES, type S3Bench };

/** Python `json.dumps` text of an arguments object (the form InjecAgent's stored keys use). */
function pyJsonDumps(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(pyJsonDumps).join(', ')}]`;
  if (v && typeof v === 'object') return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyJsonDumps(x)}`).join(', ')}}`;
  return JSON.stringify(v) ?? 'null';
}

function attackerResponse(responses: Map<string, string>, tool: string, args: Record<string, unknown>): string {
  const exact = responses.get(`(${tool},${pyJsonDumps(args)})`);
  if (exact !== undefined) return exact;
  for (const [k, v] of responses) if (k.startsWith(`(${tool},`)) return v;
  return '{"success": true}';
}

/** InjecAgent tasks: settings in the order given, then dh before ds, each in file order. */
function injecAgentTasks(dir: string, limit = Infinity, settings: readonly InjecAgentSetting[] = INJECAGENT_SETTINGS): S3Task[] {
  const tools = readInjecAgentTools(dir);
  const responses = readSimulatedAttackerResponses(dir);
  const out: S3Task[] = [];
  for (const setting of settings) {
    for (const attack of ['dh', 'ds'] as const) {
      for (const c of readInjecAgentCases(dir, setting, [attack], tools).slice(0, limit)) {
        const simulate = (call: CallView): string => {
          if (call.name === c.userTool) return c.toolResponse;
          if (attack === 'ds' && call.name === c.attackerTools[0]) return attackerResponse(responses, call.name, call.arguments);
          if (c.attackerTools.includes(call.name)) return '{"success": true}';
          return `{"error": "InvalidRequestException: tool ${call.name} is not available"}`;
        };
        out.push({
          id: c.id,
          group: `injecagent/${setting}/${attack}`,
          setting,
          messages: [{ role: 'system', content: AGENT_SYSTEM }, { role: 'user', content: c.userInstruction }],
          tools: [...c.tools],
          simulate,
          scoring: { kind: 'injecagent', attack, userTool: c.userTool, attackerTools: [...c.attackerTools] },
          plan: false,
        });
      }
    }
  }
  return out;
}

/** A tool's simulated answer from its spec. */
function specAnswer(tool: ToolSpec | undefined, call: CallView): string {
  if (!tool) return `{"error": "tool ${call.name} is not available"}`;
  return JSON.stringify({ tool: call.name, status: 'success', result: `${tool.function.description || call.name} — done.`, arguments: call.arguments });
}

function agentHarmTasks(dir: string, limit = Infinity): S3Task[] {
  const ah = readAgentHarm(dir, ['test_public']);
  const out: S3Task[] = [];
  for (let i = 0; i < ah.benign.length && out.length < limit; i++) {
    const b = ah.benign[i]!;
    let h = null;
    for (let k = 0; k < ah.harmful.length && !h; k++) {
      const cand = ah.harmful[(i + k) % ah.harmful.length]!;
      if (!cand.targetFunctions.some((f) => b.targetFunctions.includes(f))) h = cand;
    }
    if (!h) continue;
    const tools = [...b.tools];
    for (const t of h.tools) if (!tools.some((x) => x.function.name === t.function.name)) tools.push(t);
    out.push({
      id: `ah-${b.id}+${h.id}`,
      group: 'agentharm/pair',
      messages: [{ role: 'system', content: AGENT_SYSTEM }, { role: 'user', content: `${b.prompt}\n\nThen: ${h.prompt}` }],
      tools,
      simulate: (call) => specAnswer(tools.find((t) => t.function.name === call.name), call),
      scoring: { kind: 'agentharm', harmfulTargets: [...h.targetFunctions], benignTargets: [...b.targetFunctions] },
      plan: false,
    });
  }
  return out;
}

/** `settings`: InjecAgent's (injecagent and mixed benches), both by default as in `guard eval`. */
export function s3Tasks(bench: S3Bench, dirs: { injecagent?: string; agentharm?: string; multistage?: string }, limit = Infinity,
  settings: readonly InjecAgentSetting[] = INJECAGENT_SETTINGS): S3Task[] {
  const out: S3Task[] = [];
  if (bench === 'air') return airTasks(dirs.injecagent!, limit, settings);
  if (bench === 'multistage') return multistageTasks(dirs.multistage!, limit);
  if (bench !== 'agentharm') out.push(...injecAgentTasks(dirs.injecagent!, limit, settings));
  if (bench !== 'injecagent') out.push(...agentHarmTasks(dirs.agentharm!, limit));
  return out;
}
