/**
 * Incident-response evaluation tasks (`s3 eval --bench air`): environment perturbations where prevention-only skills
 * fail. Each is an InjecAgent direct-harm case whose attacker tool has an inverse action in its toolkit
 * (GrantGuestAccess → RevokeGuestAccess, PlaceOrder → CancelOrder, CreatePolicy → DeletePolicy, UnlockDoor →
 * LockDoor, …). The perturbation: the environment offers that inverse tool as well, and the harmful tool answers
 * like a real service — success plus the ids of what it created (the values the inverse needs) — so a harm that
 * got through can be undone. Prevention at selection (tool-rules) has nothing to stop here (no address, no secret):
 * whenever the observation-stage check misses the injection, the harmful call runs, and only a response after
 * execution removes the harm. Scored as InjecAgent direct harm, plus whether the harm was undone (`remediated`).
 */
import { INJECAGENT_SETTINGS, readInjecAgentCases, readInjecAgentTools, type InjecAgentSetting } from '../../data/injecagent.ts';
import type { ToolSpec } from '../../data/types.ts';
import { AGENT_SYSTEM } from '../../benchmarks/cases.ts';
import type { CallView } from '../../s3/event.ts';
import { inverseTool } from '../../s3/incident.ts';
import type { S3Task } from './task.ts';

type Schema = { properties?: Record<string, unknown>; required?: string[] };

export function airTasks(dir: string, limit = Infinity, settings: readonly InjecAgentSetting[] = INJECAGENT_SETTINGS): S3Task[] {
  const all = readInjecAgentTools(dir);
  const tools = [...all.values()];
  const out: S3Task[] = [];
  for (const setting of settings) {
    let n = 0;
    for (const c of readInjecAgentCases(dir, setting, ['dh'], all)) {
      if (n >= limit) break;
      const harm = c.attackerTools[0]!;
      const inv = inverseTool(harm, tools);
      if (!inv) continue;
      n++;
      const offered: ToolSpec[] = [...c.tools, inv];
      const simulate = (call: CallView): string => {
        if (call.name === c.userTool) return c.toolResponse;
        if (call.name === harm) {
          // a real service's answer: success and the ids of what it created
          const ids: Record<string, unknown> = {};
          for (const k of (inv.function.parameters as Schema).required ?? []) if (!(k in call.arguments)) ids[k] = `${k}-0001`;
          return JSON.stringify({ success: true, ...ids });
        }
        if (call.name === inv.function.name) return '{"success": true}';
        return `{"error": "InvalidRequestException: tool ${call.name} is not available"}`;
      };
      out.push({
        id: `air-${c.id}`,
        group: `air/${setting}/dh`,
        setting,
        messages: [{ role: 'system', content: AGENT_SYSTEM }, { role: 'user', content: c.userInstruction }],
        tools: offered,
        simulate,
        scoring: { kind: 'injecagent', attack: 'dh', userTool: c.userTool, attackerTools: [...c.attackerTools] },
        plan: false,
      });
    }
  }
  return out;
}
