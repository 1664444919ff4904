/**
 * The research fields of `serve --model --allow-interventions` (docs/serve-research.md): the request body's
 * `safekeep` object — per-request steering, interventions (at a layer or a named hook point), feature edits of the
 * server's sparse autoencoders (research-sae.ts) and activation capture —
 * and OpenAI's `logprobs` / `top_logprobs`, parsed on the server's side into one generation's edits (the engine's
 * `GenerationEdits`, the one edit contract: the field's `steer`, hidden[l] −= α·v̂, becomes an add of −α) and options
 * (`ResearchCall`), and the response parts built from what the generation returned.
 *
 * Every bad value is a 400 naming its field, found before any generation: vectors have d_model finite float32
 * values, alphas are finite float32, layers and hook names exist, at most `maxHooks` hook points per request, and the
 * captured bytes of a response are computed from the prompt's tokens and max_tokens and bounded by
 * `maxCaptureBytes` (default 64 MiB). The engine's own checks (interventionInputs, hook edit inputs) run here too,
 * so a value they would refuse is the client's 400, not a 500 mid-batch.
 *
 * Capture reads the residual stream (`blocks.l.resid_pre` = hidden[l], `blocks.l.resid_post` = hidden[l+1]) from
 * the hidden states the scheduler returns per row in every batched step, whatever graph the row runs; the other
 * points (z, attn_out, resid_mid, mlp_out) are outputs of a graph with those points (graph/hooks.ts), so such a
 * request decodes with the rows capturing and editing the same points. `pattern` (its width grows every step) is
 * refused by name: `safekeep hooks` / runWithCache capture it one sequence at a time.
 */
import { SafekeepError } from '../util/errors.ts';
import { badRequest } from '../http/errors.ts';
import { parseHookName, resolveHookNames, type HookShape } from '../engine/graph/hooks.ts';
import { callInterventions, interventionInputs, selectPositions } from '../engine/run/batch.ts';
import { hookEditInputs } from '../engine/run/hooked.ts';
import { MAX_TOP_LOGPROBS } from '../engine/run/scheduler.ts';
import type { GenerationEdits, HookIntervention, Intervention, Steering } from '../engine/types.ts';
import { alphaField, alphaValue, isF32, isObject, kindField, knownFields, layerField, positionsField, shown, type Fail } from '../engine/run/intervention-json.ts';
import type { ResearchCall, ResearchReply } from '../chat/types.ts';
import type { Sae } from '../sae/types.ts';
import { parseSaesField } from './research-sae.ts';

export const DEFAULT_MAX_CAPTURE_BYTES = 64 * 2 ** 20;
export const DEFAULT_MAX_HOOKS = 32;
/** interventions per request */
export const MAX_INTERVENTIONS = 64;

/** What the server knows to check a research request: the model's shapes, the named directions, the bounds. */
export interface ResearchOptions extends HookShape {
  /** `--directions FILE.safetensors`: name → [L+1, d] (row l = the direction at hidden[l]) */
  directions?: ReadonlyMap<string, Float32Array>;
  /** hook points per request, captured and edited together (default 32) */
  maxHooks?: number;
  /** bytes of captured activations per response (default 64 MiB); beyond → 400 before generation */
  maxCaptureBytes?: number;
  /** `--sae NAME=DIR`: the sparse autoencoders a request may splice in by name (research-sae.ts) */
  saes?: ReadonlyMap<string, Sae>;
}

/**
 * A parsed capture: the hook names, the hidden-state row each residual-stream point reads (null: a graph output),
 * each point's width, the positions still to resolve.
 */
export interface CaptureSpec {
  hooks: { name: string; hidden: number | null; width: number }[];
  positions: 'last' | 'all' | number[];
  generated: boolean;
}

/**
 * The `safekeep` field parsed: its edits in the engine's one contract (GenerationEdits: an add is h + α·r̂, so the
 * field's `steer`, documented as hidden[l] −= α·v̂, is an add of −α), and its capture, whose positions need the
 * prompt's length. `steer`: the field's steering as sent, for the log line.
 */
export interface ResearchRequest {
  edits: GenerationEdits;
  steer?: { layer: number; alpha: number };
  capture: CaptureSpec | null;
}

/** the field's own terms, before they become GenerationEdits */
interface FieldEdits {
  steer?: Steering;
  interventions?: Intervention[];
  hooks?: HookIntervention[];
}

/** the server's failures are JSON 400s */
const fail: Fail = (message) => { throw badRequest(message); };

function vectorOf(v: unknown, width: number, at: string): number[] {
  if (!Array.isArray(v)) throw badRequest(`${at} must be an array of ${width} numbers`);
  if (v.length !== width) throw badRequest(`${at} has ${v.length} values; this model's width there is ${width}`);
  let nonzero = false;
  v.forEach((x, i) => {
    if (!isF32(x)) throw badRequest(`${at}[${i}] is not a finite float32 number: ${shown(x)}`);
    if (x !== 0) nonzero = true;
  });
  if (!nonzero) throw badRequest(`${at} is all zeros (it has no direction)`);
  return v as number[];
}

/** the `vector` or the named `direction` (row `layer` of it) of an object at `at` */
function directionOrVector(o: Record<string, unknown>, layer: number | null, width: number, at: string, opts: ResearchOptions): number[] {
  if (o.vector !== undefined && o.direction !== undefined) throw badRequest(`${at}: give "vector" or "direction", not both`);
  if (o.direction === undefined) {
    if (o.vector === undefined) throw badRequest(`${at}.vector: missing (d_model numbers, or "direction": a name from the server's --directions file)`);
    return vectorOf(o.vector, width, `${at}.vector`);
  }
  if (typeof o.direction !== 'string') throw badRequest(`${at}.direction must be a direction's name`);
  if (layer === null) throw badRequest(`${at}.direction: a named direction is read at a "layer" (row layer of it); at a hook point send "vector"`);
  const dirs = opts.directions;
  if (!dirs || dirs.size === 0) throw badRequest(`${at}.direction: this server has no directions file (start it with --directions FILE.safetensors), send "vector"`);
  const m = dirs.get(o.direction);
  if (!m) throw badRequest(`${at}.direction: no direction ${shown(o.direction)} (this server has ${[...dirs.keys()].join(', ')})`);
  const d = opts.hiddenSize;
  if (m.length !== (opts.numLayers + 1) * d) throw badRequest(`${at}.direction: ${shown(o.direction)} does not fit this model`);
  return Array.from(m.subarray(layer * d, (layer + 1) * d));
}

function parseSteer(v: unknown, opts: ResearchOptions): Steering {
  const at = 'safekeep.steer';
  if (!isObject(v)) throw badRequest(`${at} must be {"layer", "vector" | "direction", "alpha", "positions"}`);
  knownFields(v, ['layer', 'vector', 'direction', 'alpha', 'positions'], at, fail);
  const layer = layerField(v.layer, `${at}.layer`, fail, opts.numLayers);
  const vector = directionOrVector(v, layer, opts.hiddenSize, at, opts);
  const positions = positionsField(v.positions, `${at}.positions`, fail);
  return { layer, vector, alpha: alphaValue(v.alpha, `${at}.alpha`, fail), ...(positions ? { positions } : {}) };
}

/** one `interventions` entry: at a layer (an Intervention) or at a hook point (a HookIntervention) */
function parseIntervention(v: unknown, i: number, opts: ResearchOptions): { iv?: Intervention; hook?: HookIntervention } {
  const at = `safekeep.interventions[${i}]`;
  if (!isObject(v)) throw badRequest(`${at} must be {"layer" | "hook", "kind", "vector" | "direction", "alpha", "positions"}`);
  knownFields(v, ['layer', 'hook', 'kind', 'vector', 'direction', 'alpha', 'positions'], at, fail);
  const kind = kindField(v.kind, `${at}.kind`, fail);
  const alpha = alphaField(kind, v.alpha, `${at}.alpha`, fail);
  if ((v.layer === undefined) === (v.hook === undefined)) throw badRequest(`${at}: give "layer" (the residual stream hidden[layer]) or "hook" (a hook point name), one of them`);
  if (v.layer !== undefined) {
    const layer = layerField(v.layer, `${at}.layer`, fail, opts.numLayers);
    const vector = directionOrVector(v, layer, opts.hiddenSize, at, opts);
    const positions = positionsField(v.positions, `${at}.positions`, fail);
    return { iv: { layer, kind, vector, ...(alpha !== undefined ? { alpha } : {}), ...(positions ? { positions } : {}) } };
  }
  if (typeof v.hook !== 'string' || v.hook.includes('*')) throw badRequest(`${at}.hook must be one hook point name, blocks.<layer>.<point>`);
  let point: string;
  try {
    point = parseHookName(v.hook, opts).point;
  } catch (e) {
    if (e instanceof SafekeepError) throw badRequest(`${at}.hook: ${e.message}`);
    throw e;
  }
  if (v.positions !== undefined) throw badRequest(`${at}.positions: an edit at a hook point applies at every position of the generation`);
  const width = point === 'z' ? opts.numHeads * opts.headDim : opts.hiddenSize;
  if (point === 'pattern') throw badRequest(`${at}.hook: ${v.hook} is read-only (edit z or the residual-stream points)`);
  const vector = directionOrVector(v, null, width, at, opts);
  const hook = kind === 'ablate' ? { hook: v.hook, kind, vector } : { hook: v.hook, kind, vector, alpha: alpha! };
  return { hook };
}

/** `capture.hooks`: residual-stream points only (see the module comment); globs expand against the model */
function parseCapture(v: unknown, opts: ResearchOptions): CaptureSpec {
  const at = 'safekeep.capture';
  if (!isObject(v)) throw badRequest(`${at} must be {"hooks": [names], "positions": "last" | "all" | [i, …], "generated": bool}`);
  knownFields(v, ['hooks', 'positions', 'generated'], at, fail);
  if (!Array.isArray(v.hooks) || v.hooks.length === 0) throw badRequest(`${at}.hooks must be a non-empty array of hook point names`);
  const names: string[] = [];
  v.hooks.forEach((h, i) => {
    if (typeof h !== 'string') throw badRequest(`${at}.hooks[${i}] must be a hook point name`);
    try {
      names.push(...resolveHookNames([h], opts));
    } catch (e) {
      if (e instanceof SafekeepError) throw badRequest(`${at}.hooks[${i}]: ${e.message}`);
      throw e;
    }
  });
  const unique = [...new Set(names)];
  const hooks = unique.map((name) => {
    const { layer, point } = parseHookName(name, opts);
    if (point === 'pattern') {
      throw badRequest(`${at}.hooks: ${name} cannot be captured while generating (a pattern's width grows every step); capture it one sequence at a time with safekeep hooks`);
    }
    const width = point === 'z' ? opts.numHeads * opts.headDim : opts.hiddenSize;
    return { name, hidden: point === 'resid_pre' ? layer : point === 'resid_post' ? layer + 1 : null, width };
  });
  let positions: CaptureSpec['positions'] = 'last';
  if (v.positions !== undefined) {
    if (v.positions === 'last' || v.positions === 'all') positions = v.positions;
    else if (Array.isArray(v.positions) && v.positions.length > 0 && v.positions.every((p) => Number.isInteger(p))) positions = v.positions as number[];
    else throw badRequest(`${at}.positions must be "last", "all" or a non-empty array of integer positions, got ${shown(v.positions)}`);
  }
  if (v.generated !== undefined && typeof v.generated !== 'boolean') throw badRequest(`${at}.generated must be a boolean`);
  return { hooks, positions, generated: v.generated === true };
}

/**
 * The `safekeep` field → the generation's options (without the capture positions, resolved later against the prompt).
 * `field` undefined/null → nothing.
 */
export function parseResearchField(field: unknown, opts: ResearchOptions): ResearchRequest {
  if (field === undefined || field === null) return { edits: {}, capture: null };
  if (!isObject(field)) throw badRequest('"safekeep" must be an object: {"steer", "interventions", "saes", "capture"}');
  knownFields(field, ['steer', 'interventions', 'saes', 'capture'], 'safekeep', fail);
  const call: FieldEdits = {};
  if (field.steer !== undefined) call.steer = parseSteer(field.steer, opts);
  if (field.interventions !== undefined) {
    if (!Array.isArray(field.interventions)) throw badRequest('safekeep.interventions must be an array');
    if (field.interventions.length > MAX_INTERVENTIONS) throw badRequest(`safekeep.interventions: at most ${MAX_INTERVENTIONS}, got ${field.interventions.length}`);
    const parsed = field.interventions.map((x, i) => parseIntervention(x, i, opts));
    const ivs = parsed.flatMap((p) => (p.iv ? [p.iv] : []));
    const hooks = parsed.flatMap((p) => (p.hook ? [p.hook] : []));
    if (ivs.length) call.interventions = ivs;
    if (hooks.length) call.hooks = hooks;
  }
  const saes = field.saes === undefined ? undefined : parseSaesField(field.saes, opts.saes, opts.numLayers, opts.hiddenSize);
  const capture = field.capture === undefined ? null : parseCapture(field.capture, opts);
  const maxHooks = opts.maxHooks ?? DEFAULT_MAX_HOOKS;
  const edited = new Set((call.hooks ?? []).map((h) => h.hook));
  const nHooks = edited.size + (capture?.hooks.length ?? 0) + (saes?.length ?? 0);
  if (nHooks > maxHooks) throw badRequest(`safekeep: ${nHooks} hook points (captured and edited${saes ? ', SAEs included' : ''}) in one request; this server allows at most ${maxHooks}`);
  // the engine's own checks (two projections at one layer, an add that overflows float32, …) as the client's 400
  const ivList = callInterventions(call);
  try {
    interventionInputs(opts.numLayers, opts.hiddenSize, ivList);
  } catch (e) {
    if (e instanceof SafekeepError) throw badRequest(`safekeep: ${e.message}`);
    throw e;
  }
  try {
    if (call.hooks) hookEditInputs(call.hooks, opts, 1);
  } catch (e) {
    if (e instanceof SafekeepError) throw badRequest(`safekeep.interventions: ${e.message}`);
    throw e;
  }
  // one edit contract: the steering shorthand becomes the add it stands for (α negated), before the interventions
  const edits: GenerationEdits = { ...(ivList.length ? { interventions: ivList } : {}), ...(call.hooks ? { hooks: call.hooks } : {}), ...(saes ? { saes } : {}) };
  return { edits, ...(call.steer ? { steer: { layer: call.steer.layer, alpha: call.steer.alpha } } : {}), capture };
}

/** OpenAI's `logprobs` / `top_logprobs`: the k to compute (undefined = none). */
export function logprobsOf(body: Record<string, unknown>): number | undefined {
  const want = body.logprobs === true;
  const k = body.top_logprobs;
  if (k !== undefined && k !== null) {
    if (!Number.isInteger(k) || (k as number) < 0 || (k as number) > MAX_TOP_LOGPROBS) throw badRequest(`"top_logprobs" must be an integer 0..${MAX_TOP_LOGPROBS}, got ${shown(k)}`);
    if (!want && k !== 0) throw badRequest('"top_logprobs" needs "logprobs": true');
  }
  return want ? ((k as number | undefined | null) ?? 0) : undefined;
}

/**
 * The capture's prompt positions for a prompt of `promptTokens` tokens, and its bytes bounded before generation:
 * hooks × (positions + max_tokens when generated tokens are kept) × d × 4.
 */
export function resolveCapture(spec: CaptureSpec, promptTokens: number, maxTokens: number, maxBytes: number): NonNullable<ResearchCall['capture']> {
  let promptPositions: number[];
  try {
    promptPositions = [...new Set(selectPositions(spec.positions, promptTokens, 'safekeep.capture.positions'))];
  } catch (e) {
    if (e instanceof SafekeepError) throw badRequest(e.message);
    throw e;
  }
  const rows = promptPositions.length + (spec.generated ? maxTokens : 0);
  const floats = spec.hooks.reduce((a, h) => a + h.width, 0);
  const bytes = rows * floats * 4;
  if (bytes > maxBytes) {
    throw badRequest(`safekeep.capture: ${spec.hooks.length} hooks (${floats} floats a position) × ${rows} positions = ${bytes} bytes, above this server's ${maxBytes} bytes per response (fewer hooks, positions or max_tokens)`);
  }
  const graphHooks = spec.hooks.filter((h) => h.hidden === null).map((h) => h.name);
  // only the hidden-state rows the residual-stream hooks read are kept (not every layer of every position)
  const layers = [...new Set(spec.hooks.flatMap((h) => (h.hidden === null ? [] : [h.hidden])))].sort((a, b) => a - b);
  return { promptPositions, generated: spec.generated, layers, ...(graphHooks.length ? { hooks: graphHooks } : {}) };
}

/** little-endian float32 bytes as base64 (the engine's Float32Arrays are the platform's order: x86 and ARM are little-endian) */
function base64F32(a: Float32Array): string {
  const out = new Float32Array(a.length);
  const view = new DataView(out.buffer);
  for (let i = 0; i < a.length; i++) view.setFloat32(i * 4, a[i]!, true);
  return Buffer.from(out.buffer).toString('base64');
}

export interface CapturedActivation {
  /** [positions, d] */
  shape: number[];
  dtype: 'float32';
  /** base64 of the little-endian float32 values, row-major */
  data: string;
  /** the position (in the prompt followed by the generated tokens) of each row */
  positions: number[];
}

/**
 * The response's `safekeep.activations`: per hook, the captured prompt positions' rows then (with `generated`) each
 * fed-back generated token's, [n, d].
 */
export function activationsJson(spec: CaptureSpec, resolved: NonNullable<ResearchCall['capture']>, r: ResearchReply, d: number): Record<string, CapturedActivation> {
  const { promptPositions } = resolved;
  const layers = resolved.layers ?? [];
  const n = promptPositions.length;
  const gen = r.capturedGenerated ?? [];
  const K = layers.length;
  const out: Record<string, CapturedActivation> = {};
  /** the positions of `rows` rows: the prompt's, then the generated tokens' */
  const positionsOf = (rows: number) => [...promptPositions, ...Array.from({ length: Math.max(0, rows - n) }, (_, k) => r.promptIds.length + k)];
  for (const { name, hidden, width } of spec.hooks) {
    if (hidden === null) {
      const m = r.capturedHooks?.[name] ?? new Float32Array(0);
      const rows = m.length / width;
      out[name] = { shape: [rows, width], dtype: 'float32', data: base64F32(m), positions: positionsOf(rows) };
      continue;
    }
    const k = layers.indexOf(hidden);
    const rows = n + gen.length;
    const m = new Float32Array(rows * d);
    const p = r.capturedPrompt;
    if (p && p.length === K * n * d) for (let i = 0; i < n; i++) m.set(p.subarray((k * n + i) * d, (k * n + i + 1) * d), i * d);
    gen.forEach((h, j) => m.set(h.subarray(k * d, (k + 1) * d), (n + j) * d));
    out[name] = { shape: [rows, d], dtype: 'float32', data: base64F32(m), positions: positionsOf(rows) };
  }
  return out;
}
