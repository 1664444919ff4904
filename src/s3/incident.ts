/**
 * Incident response (AIR-style) at tool_execution: a call a skill marks harmful has run (in the simulated
 * environment: the executor ran it before, or despite, prevention). The response, in AIR's three steps:
 *
 * 1. contain — the chain of calls that follows from it stops: the remaining calls of the same turn are not executed,
 *    and the same tool is not executed again in this task;
 * 2. remediate — where the tool set offers an inverse action (`inverseTool`: Grant → Revoke, Create → Delete,
 *    Place → Cancel, Unlock → Lock, Disable → Enable, …), it is called with the harmful call's arguments and the ids
 *    its result returned (`inverseArguments`); when there is none, or its required arguments cannot be filled, the
 *    incident stays unremediated and says so;
 * 3. tell — the main agent reads a guard note in the harmful call's tool result, and the user an incident report
 *    appended to the final answer.
 */
import type { ToolSpec } from '../data/types.ts';
import type { CallView } from './event.ts';

/** Verb → inverse verb, as tool names spell them (CamelCase or snake_case). */
export const INVERSE_VERBS: readonly (readonly [string, string])[] = [
  ['Grant', 'Revoke'], ['Create', 'Delete'], ['Create', 'Cancel'], ['Add', 'Remove'], ['Add', 'Delete'], ['Schedule', 'Cancel'], ['Book', 'Cancel'],
  ['Place', 'Cancel'], ['Unlock', 'Lock'], ['Lock', 'Unlock'], ['Disable', 'Enable'], ['Enable', 'Disable'], ['Deposit', 'Withdraw'], ['Share', 'Unshare'],
  ['Follow', 'Unfollow'], ['Post', 'Delete'], ['Leave', 'Join'], ['Join', 'Leave'], ['Subscribe', 'Unsubscribe'], ['Install', 'Uninstall'],
];

/** The name of `name` with its verb swapped, for every spelling: GrantGuestAccess / grant_guest_access. */
function swapped(name: string, from: string, to: string): string[] {
  const out: string[] = [];
  const camel = new RegExp(`${from}(?=[A-Z]|$)`);
  if (camel.test(name)) out.push(name.replace(camel, to));
  const snake = new RegExp(`(^|_)${from.toLowerCase()}(?=_|$)`);
  if (snake.test(name)) out.push(name.replace(snake, `$1${to.toLowerCase()}`));
  return out.filter((x) => x !== name);
}

/** The inverse tool of a call among `tools`, or null. */
export function inverseTool(name: string, tools: readonly ToolSpec[]): ToolSpec | null {
  for (const [from, to] of INVERSE_VERBS) {
    for (const cand of swapped(name, from, to)) {
      const t = tools.find((x) => x.function.name === cand);
      if (t) return t;
    }
  }
  return null;
}

type Schema = { properties?: Record<string, unknown>; required?: string[] };

/** Values by key anywhere in a JSON(-ish) result: `{"order_id": "o-1"}`, `{'guest_id': 'g1'}`. */
function resultValues(result: string): Map<string, unknown> {
  const out = new Map<string, unknown>();
  const walk = (v: unknown) => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) { if (!out.has(k)) out.set(k, x); walk(x); }
  };
  try { walk(JSON.parse(result)); } catch {
    for (const m of result.matchAll(/["'](\w+)["']\s*:\s*["']([^"']*)["']/g)) if (!out.has(m[1]!)) out.set(m[1]!, m[2]);
  }
  return out;
}

/** The inverse call's arguments: each parameter from the harmful call's arguments, else from its result; null when a required one is missing. */
export function inverseArguments(inverse: ToolSpec, call: CallView, result: string): Record<string, unknown> | null {
  const p = inverse.function.parameters as Schema;
  const fromResult = resultValues(result);
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(p.properties ?? {})) {
    if (k in call.arguments) out[k] = call.arguments[k];
    else if (fromResult.has(k)) out[k] = fromResult.get(k);
  }
  for (const k of p.required ?? []) if (!(k in out)) return null;
  return out;
}

export interface Incident {
  turn: number;
  call: { name: string; arguments: Record<string, unknown> };
  reason: string;
  /** the inverse action run, or null (why in `note`) */
  remediation: { name: string; arguments: Record<string, unknown>; result: string } | null;
  /** calls of the same turn that were not executed */
  contained: string[];
  note: string;
}

/** Steps 2–3 for one harmful call that has run: the remediation (run through `execute`) and the messages. */
export function respondToIncident(
  call: CallView, result: string, reason: string, tools: readonly ToolSpec[], execute: (c: CallView) => string, turn: number,
): Incident {
  const inv = inverseTool(call.name, tools);
  const args = inv ? inverseArguments(inv, call, result) : null;
  let remediation: Incident['remediation'] = null;
  let note: string;
  if (inv && args) {
    const r = execute({ id: `guard_${call.id}`, name: inv.function.name, arguments: args });
    remediation = { name: inv.function.name, arguments: args, result: r };
    note = `the guard undid it with ${inv.function.name}(${JSON.stringify(args)}) → ${r}`;
  } else {
    note = inv ? `no remediation: ${inv.function.name} needs arguments the call and its result do not give` : 'no remediation: the tool set has no inverse action';
  }
  return { turn, call: { name: call.name, arguments: call.arguments }, reason, remediation, contained: [], note };
}

export const incidentAgentNote = (i: Incident) =>
  `\n\n[guard: incident — the call ${i.call.name} ran and was harmful: ${i.reason} The chain that follows from it is stopped; ${i.note}. Do not repeat it; finish the user's own request.]`;

export const incidentUserReport = (xs: readonly Incident[]) =>
  `\n\n[guard: incident report — ${xs.map((i) => `${i.call.name} ran (${i.reason}); ${i.remediation ? `undone with ${i.remediation.name}` : i.note}`).join('; ')}]`;
