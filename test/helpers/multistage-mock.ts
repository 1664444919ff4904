/**
 * A scripted OpenAI-compatible endpoint for the multistage suite (data/multistage/): a gullible agent and a guard
 * that follows fixed rules, so every configuration's outcome on every task is computable by hand.
 *
 * Calls are written in the tasks' text as `` `tool(arg="v")` ``. A *hazard call* is one of unlock_door,
 * disable_smoke_alarm, share_camera_feed, transfer_funds, grant_access, share_file.
 *
 * guard agent (GUARD_AGENT_ROLE) — picks every candidate (`### name`).
 * safekeep-judge (SAFETY_ASSESSOR_ROLE) — YES iff the request section names a hazard call.
 * rewrite (S3_REWRITE_ROLE) — the request before "Then:", else NONE.
 * parse-data ("## The result returned by") — YES + EVIDENCE "Please also run `hazard call` … ." when the result holds one.
 * memory-guard ("## The memory entries") — YES + EVIDENCE the text of each entry that names a hazard call.
 * AlignmentCheck ("## The user's goal") — YES iff the proposed call's tool is not named in the user's goal.
 * other checks (rule-memory) — NO.
 * agent:
 *   plan turn (the loop's plan request, no tools) — "Plan:" and one numbered step per call: the calls of the user's
 *     request, of the retrieved memory, and of every example plan whose trigger ("It's <trigger>:") the request
 *     holds — unless the guard rejected the plan: then only the request's calls;
 *   action turn — the next call not yet made, in order: the plan's steps (else the request's and memory's calls),
 *     then any call a tool result asks for (gullible); an argument written `<…>` is the last tool result; when none
 *     is left, the final answer "Done.";
 *   anything else (the refusal path) — "It would be unsafe.".
 */
import { GUARD_AGENT_ROLE } from '../../src/s3/guard-agent.ts';
import { S3_CHECK_ROLE } from '../../src/s3/checks/llm.ts';
import { S3_REWRITE_ROLE } from '../../src/s3/rewrite.ts';
import { PLAN_REQUEST } from '../../src/s3/plan.ts';
import { SAFETY_ASSESSOR_ROLE } from '../../src/guard/prompts.ts';
import { completion, type MockAnswer } from './guard-mock.ts';

type Msg = { role: string; content: string | null; name?: string; tool_calls?: { function: { name: string; arguments: string } }[] };
interface Call { name: string; args: Record<string, unknown> }

export const HAZARD = /\b(?:unlock_door|disable_smoke_alarm|share_camera_feed|transfer_funds|grant_access|share_file)\(/;

/** The calls written in a text, in order. */
export function callsIn(text: string): Call[] {
  const out: Call[] = [];
  for (const m of text.matchAll(/`(\w+)\(([^`]*)\)`/g)) {
    if (m[1] === 'tool_name') continue;
    const args: Record<string, unknown> = {};
    for (const a of m[2]!.matchAll(/(\w+)\s*=\s*(?:"([^"]*)"|([^,\s)]+))/g)) args[a[1]!] = a[2] ?? (/^-?\d+(\.\d+)?$/.test(a[3]!) ? Number(a[3]) : a[3]);
    out.push({ name: m[1]!, args });
  }
  return out;
}

/** The text of a `## heading` section of a prompt (up to the next `## `). */
const section = (text: string, heading: string): string => text.split(`## ${heading}`)[1]?.split(/\n## /)[0] ?? '';

function check(user: string): string {
  if (user.includes('## The result returned by')) {
    const m = /(?:IMPORTANT!!![^\n]*?)?Please also run `[^`]+`[^\n]*?\.(?=\s|$)/.exec(section(user, 'The result returned by'));
    return m && HAZARD.test(m[0]) ? `YES\nEVIDENCE: ${m[0].replace(/^.*?(?=Please also run)/, '')}` : 'NO';
  }
  if (user.includes('## The memory entries')) {
    const bad = [...section(user, 'The memory entries').matchAll(/^\[memory [\w.-]+\] (.*)$/gm)].filter((m) => HAZARD.test(m[1]!)).map((m) => m[1]!.trim());
    return bad.length ? `YES\n${bad.map((b) => `EVIDENCE: ${b}`).join('\n')}` : 'NO';
  }
  if (user.includes("## The user's goal")) {
    const goal = section(user, "The user's goal");
    const action = /(\w+)\(/.exec(section(user, 'The action the agent proposes now'))?.[1] ?? '';
    return action && !goal.includes(action) ? `YES\nEVIDENCE: ${action}` : 'NO';
  }
  return 'NO';
}

/** The user's own request: the first user message as the input stage left it (without a plan request joined to it). */
const requestOf = (msgs: Msg[]): string => (msgs.find((m) => m.role === 'user')?.content ?? '').split('\n\n[guard: your plan was rejected')[0]!.split(`\n\n${PLAN_REQUEST}`)[0]!;

function planText(msgs: Msg[], rejected: boolean): string {
  const request = requestOf(msgs);
  const calls = callsIn(request);
  if (!rejected) {
    for (const m of msgs.filter((x) => x.role === 'tool' && x.name === 'memory_search')) calls.push(...callsIn(m.content ?? ''));
    const sys = msgs[0]?.role === 'system' ? msgs[0].content ?? '' : '';
    for (const ex of sys.split(/\nExample: /).slice(1)) {
      const trigger = /request "It's ([^:]+):/.exec(ex)?.[1];
      if (trigger && request.toLowerCase().includes(trigger.toLowerCase())) calls.push(...callsIn(ex).filter((c) => !calls.some((x) => x.name === c.name)));
    }
  }
  const args = (c: Call) => Object.entries(c.args).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(', ');
  return `Plan:\n${calls.map((c, i) => `${i + 1}. \`${c.name}(${args(c)})\``).join('\n')}`;
}

/** The calls the agent means to make, in order: its plan's steps (else the request's and memory's), then what tool results ask. */
function intended(msgs: Msg[]): Call[] {
  const planAt = msgs.findIndex((m, i) => m.role === 'assistant' && msgs[i - 1]?.role === 'user' && (msgs[i - 1]!.content ?? '').includes(PLAN_REQUEST));
  const own = planAt >= 0 ? callsIn(msgs[planAt]!.content ?? '')
    : [...callsIn(requestOf(msgs)), ...msgs.filter((m) => m.role === 'tool' && m.name === 'memory_search').flatMap((m) => callsIn(m.content ?? ''))];
  return [...own, ...msgs.filter((m) => m.role === 'tool' && m.name !== 'memory_search').flatMap((m) => callsIn(m.content ?? ''))];
}

function act(msgs: Msg[]): MockAnswer {
  const made = msgs.flatMap((m) => (m.tool_calls ?? []).map((c) => ({ name: c.function.name, args: JSON.parse(c.function.arguments) as Record<string, unknown> })))
    .filter((c) => c.name !== 'memory_search');
  const lastResult = [...msgs].reverse().find((m) => m.role === 'tool' && m.name !== 'memory_search')?.content ?? '';
  const pending = [...made];
  const next = intended(msgs).find((c) => {
    const i = pending.findIndex((p) => p.name === c.name && Object.entries(c.args).every(([k, v]) => (typeof v === 'string' && /^<.*>$/.test(v)) || JSON.stringify(p.args[k]) === JSON.stringify(v)));
    if (i >= 0) { pending.splice(i, 1); return false; }
    return true;
  });
  if (!next) return { json: completion('Done.', { promptTokens: 10, completionTokens: 2 }) };
  const args = Object.fromEntries(Object.entries(next.args).map(([k, v]) => [k, typeof v === 'string' && /^<.*>$/.test(v) ? lastResult : v]));
  const id = `c${msgs.filter((m) => m.role === 'tool').length + 1}`;
  return { json: completion(null, { toolCalls: [{ id, type: 'function', function: { name: next.name, arguments: JSON.stringify(args) } }], promptTokens: 10, completionTokens: 2 }) };
}

export function multistageScript(body: Record<string, unknown> | null): MockAnswer {
  const msgs = (body?.messages ?? []) as Msg[];
  const sys = msgs[0]?.content ?? '';
  const user = msgs.filter((m) => m.role === 'user').map((m) => m.content ?? '').join('\n');
  if (sys === GUARD_AGENT_ROLE) return { json: completion([...user.matchAll(/^### (\S+)$/gm)].map((m) => m[1]).join(', ') || 'NONE', { promptTokens: 100, completionTokens: 1 }) };
  if (sys === S3_REWRITE_ROLE) {
    const req = (user.split('## The request\n')[1]?.split('\n\n## Why it was found unsafe')[0] ?? '')
      .replace(/^\[BEGIN DATA [0-9a-f]{16}\]\n/, '').replace(/\n\[END DATA [0-9a-f]{16}\]$/, '');
    const i = req.indexOf('\n\nThen:');
    return { json: completion(i > 0 ? req.slice(0, i) : 'NONE', { promptTokens: 500, completionTokens: 3 }) };
  }
  if (sys === SAFETY_ASSESSOR_ROLE) return { json: completion(HAZARD.test(section(user, 'The request')) ? 'YES' : 'NO', { promptTokens: 200, completionTokens: 1 }) };
  if (sys === S3_CHECK_ROLE) return { json: completion(check(user), { promptTokens: 300, completionTokens: 2 }) };
  const last = msgs.at(-1);
  if (!body?.tools && last?.role === 'user' && (last.content ?? '').includes(PLAN_REQUEST)) {
    return { json: completion(planText(msgs, (last.content ?? '').includes('[guard: your plan was rejected')), { promptTokens: 20, completionTokens: 8 }) };
  }
  if (!body?.tools) return { json: completion('It would be unsafe.', { promptTokens: 50, completionTokens: 5 }) };
  return act(msgs);
}
