/**
 * The planning stage's plan (S³): the agent writes a plan before acting — a numbered list, one step per line, each
 * naming the tool it will use — when the task or a skill of the `planning` stage wants one. Its steps are read as the
 * calls the plan proposes (ids `step-<i>`), so AgentSpec-style rules act on a plan as on tool invocations; the plan
 * is checked before any tool runs. Recovery re-plans: the agent is asked for a new plan without the flagged steps,
 * told why (the skill's guidance), and the new plan is checked again.
 */
import type { ToolSpec } from '../data/types.ts';
import type { CallView } from './event.ts';

/** What the loop asks the agent for (a user turn; no tools are offered for this turn). */
export const PLAN_REQUEST = 'Before you act, write your plan: a numbered list, one step per line, each naming the tool it will use and ' +
  'its arguments, like `1. tool_name(arg="value")`. Do not call any tool yet; write only the plan.';

/** After an accepted plan: go on with it. */
export const PLAN_GO = 'Now carry out your plan, one tool call at a time.';

/** `key="v"` / `key=3` / `key=true` pairs of a written call. */
function writtenArguments(s: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const m of s.matchAll(/(\w+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^,\s)]+))/g)) {
    const raw = m[4];
    out[m[1]!] = m[2] ?? m[3] ?? (raw === 'true' ? true : raw === 'false' ? false : raw !== undefined && /^-?\d+(\.\d+)?$/.test(raw) ? Number(raw) : raw);
  }
  return out;
}

/**
 * The plan's steps as calls: each line that names an offered tool (the first one it names) is one step; `tool(…)`
 * arguments are read when the step writes them. Lines that name no tool are prose, not steps.
 */
export function planSteps(plan: string, tools: readonly ToolSpec[]): CallView[] {
  const names = tools.map((t) => t.function.name).sort((a, b) => b.length - a.length);
  const out: CallView[] = [];
  for (const line of plan.split('\n')) {
    let best: { name: string; at: number } | null = null;
    for (const n of names) {
      const at = line.search(new RegExp(`(^|[^\\w])${n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![\\w])`));
      if (at >= 0 && (best === null || at < best.at)) best = { name: n, at };
    }
    if (!best) continue;
    const rest = line.slice(line.indexOf(best.name) + best.name.length);
    const args = /^\s*\(([^)]*)\)/.exec(rest);
    out.push({ id: `step-${out.length + 1}`, name: best.name, arguments: args ? writtenArguments(args[1]!) : {} });
  }
  return out;
}

/** The re-plan request: which steps were rejected and why (the skills' guidance, unless the ablation drops it). */
export function replanRequest(rejected: readonly CallView[], why: string, guidance: boolean): string {
  const steps = rejected.map((c) => c.name).join(', ');
  return guidance
    ? `[guard: your plan was rejected: ${why} Write a new plan for the user's own request without ${steps || 'the rejected steps'}; do not add steps the user did not ask for.]\n\n${PLAN_REQUEST}`
    : `[guard: your plan was rejected.]\n\n${PLAN_REQUEST}`;
}
