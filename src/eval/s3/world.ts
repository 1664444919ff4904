/**
 * Scripted tool environments for the multistage suite (`data/multistage/`): a world is a JSON state and tools that
 * read and change it, so a task's benign and hazardous components are scored from the end state, not from text.
 *
 * A tool (worlds.json):
 *   { "description": "...", "params": { "room": "string" }, "required": ["room"],
 *     "set": { "lights.{room}": true },                  // state paths ({arg} substituted) ← value ("{arg}" = the argument)
 *     "append": { "outbox": { "to": "{to}", "body": "{body}" } },   // push an object onto a list
 *     "remove": { "shares": { "path": "{path}" } },       // drop the list's objects that match
 *     "returns": "The lights in {room} are on." }       // {arg} = the argument, {a.b} = the state at a.b (JSON when not text)
 * A task may override a tool's `returns` (where an injection sits) and add `perturb`: tool → the calls the
 * environment also carries out when that tool runs (its unexpected effect), reported as effects.
 */
import type { ToolSpec } from '../../data/types.ts';
import type { CallView } from '../../s3/event.ts';
import type { Environment, StatePredicate } from './task.ts';

export interface WorldTool {
  description: string;
  params: Record<string, 'string' | 'number' | 'integer' | 'boolean'>;
  required?: string[];
  set?: Record<string, unknown>;
  append?: Record<string, Record<string, unknown>>;
  /** drop the list's objects that match (every field equal) */
  remove?: Record<string, Record<string, unknown>>;
  returns?: string;
}

export interface WorldSpec {
  state: Record<string, unknown>;
  tools: Record<string, WorldTool>;
}

type Json = Record<string, unknown>;

export function getPath(state: unknown, path: string): unknown {
  let v: unknown = state;
  for (const k of path.split('.')) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Json)[k];
  }
  return v;
}

function setPath(state: Json, path: string, value: unknown): void {
  const ks = path.split('.');
  let o = state;
  for (const k of ks.slice(0, -1)) {
    if (o[k] === null || typeof o[k] !== 'object') o[k] = {};
    o = o[k] as Json;
  }
  o[ks.at(-1)!] = value;
}

const text = (v: unknown): string => (typeof v === 'string' ? v : JSON.stringify(v) ?? '');

/** `{name}` → the argument, else the state at that path; a value that is exactly "{arg}" keeps the argument's type. */
function fill(template: unknown, args: Json, state: Json): unknown {
  if (typeof template === 'string') {
    const whole = /^\{([\w.]+)\}$/.exec(template);
    if (whole && whole[1]! in args) return args[whole[1]!];
    // innermost first (the pattern only matches braces with nothing nested), so "{files.{path}}" reads the state at
    // the path the argument names; an argument's own braces are dropped, so it cannot name a state path
    let out = template;
    for (let i = 0; i < 3 && /\{[\w.]+\}/.test(out); i++) {
      out = out.replace(/\{([\w.]+)\}/g, (_m, k: string) => (k in args ? text(args[k]).replace(/[{}]/g, '') : text(getPath(state, k) ?? '')));
    }
    return out;
  }
  if (Array.isArray(template)) return template.map((x) => fill(x, args, state));
  if (template && typeof template === 'object') return Object.fromEntries(Object.entries(template).map(([k, v]) => [k, fill(v, args, state)]));
  return template;
}

/** The tools as OpenAI function specs. */
export function worldToolSpecs(tools: Record<string, WorldTool>): ToolSpec[] {
  return Object.entries(tools).map(([name, t]) => ({
    type: 'function',
    function: {
      name,
      description: t.description,
      parameters: { type: 'object', properties: Object.fromEntries(Object.entries(t.params).map(([k, ty]) => [k, { type: ty }])), required: t.required ?? Object.keys(t.params) },
    },
  }) as ToolSpec);
}

/** A fresh environment over a deep copy of the world (one per task run). */
export function makeEnvironment(world: WorldSpec, perturb: Record<string, { name: string; arguments: Json }[]> = {}): Environment {
  const state = structuredClone(world.state) as Json;
  const apply = (call: CallView): string => {
    const t = world.tools[call.name];
    if (!t) return JSON.stringify({ error: `tool ${call.name} is not available` });
    const missing = (t.required ?? Object.keys(t.params)).filter((k) => !(k in call.arguments));
    if (missing.length) return JSON.stringify({ error: `missing argument(s): ${missing.join(', ')}` });
    for (const [p, v] of Object.entries(t.set ?? {})) setPath(state, fill(p, call.arguments, state) as string, fill(v, call.arguments, state));
    for (const [p, v] of Object.entries(t.append ?? {})) {
      const list = getPath(state, p);
      setPath(state, p, [...(Array.isArray(list) ? list : []), fill(v, call.arguments, state)]);
    }
    for (const [p, v] of Object.entries(t.remove ?? {})) {
      const list = getPath(state, p);
      const want = fill(v, call.arguments, state) as Json;
      if (Array.isArray(list)) setPath(state, p, list.filter((x) => !Object.entries(want).every(([k, w]) => (x as Json)?.[k] === w)));
    }
    return t.returns !== undefined ? text(fill(t.returns, call.arguments, state)) : JSON.stringify({ success: true });
  };
  return {
    execute(call) {
      const result = apply(call);
      const effects = (perturb[call.name] ?? []).map((e, i): CallView => ({ id: `${call.id}_effect${i}`, name: e.name, arguments: e.arguments }));
      for (const e of effects) apply(e);
      return { result, effects };
    },
    state: () => structuredClone(state),
  };
}

/** Whether a predicate holds on a state. */
export function holds(p: StatePredicate, state: unknown): boolean {
  if ('all' in p) return p.all.every((x) => holds(x, state));
  if ('any' in p) return p.any.some((x) => holds(x, state));
  if ('not' in p) return !holds(p.not, state);
  const v = getPath(state, p.path);
  if ('equals' in p) return JSON.stringify(v) === JSON.stringify(p.equals);
  const want = p.includes;
  return Array.isArray(v) && v.some((x) => x && typeof x === 'object' && Object.entries(want).every(([k, w]) => {
    const got = (x as Json)[k];
    return typeof w === 'string' && typeof got === 'string' ? got.toLowerCase().includes(w.toLowerCase()) : JSON.stringify(got) === JSON.stringify(w);
  }));
}
