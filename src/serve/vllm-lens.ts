/**
 * vllm-lens's request fields on `serve --model --allow-interventions` (UKGovernmentBEIS/vllm-lens: its
 * `VLLMLensClient` and Inspect provider send them in `vllm_xargs` to /v1/completions and /v1/chat/completions), with
 * its conventions:
 * - `output_residual_stream`: a list of layer indices (a JSON string of one, as vLLM passes xargs, or the list; `true`
 *   = every layer). Layer i is the output of decoder layer i — our hidden[i+1], i = 0..L−1. The response carries a
 *   top-level `activations.residual_stream` [n_layers, positions, d] (layers ascending, each once; positions: every
 *   prompt token from 0, then every generated token fed back — all but the last), in vllm-lens's tensor encoding
 *   (lens-tensor.ts).
 * - `apply_steering_vectors`: a JSON string of a list of SteeringVector objects `{activations [n_layers, d],
 *   layer_indices, scale, norm_match, position_indices}`: h_i += scale·v at the output of decoder layer i, every
 *   prompt and generated position, v as given (not normalised). As our edit: an 'add' at hidden[i+1] of v̂ with
 *   α = scale·|v| (the engine normalises). Position-specific (3-D) activations, `position_indices` and `norm_match`
 *   (which scale by each token's own norm) are refused by name: this engine's edits are one vector for every
 *   position.
 * - `apply_hooks` (cloudpickled Python functions: code the server would run) is refused, saying so.
 * Any other key is a 400 naming it. A request sends this or the `safekeep` field, not both.
 */
import { SafekeepError } from '../util/errors.ts';
import { badRequest } from '../http/errors.ts';
import { parseJsonBounded } from '../util/json-bounded.ts';
import { interventionInputs } from '../engine/run/batch.ts';
import type { Intervention } from '../engine/types.ts';
import { isF32, isObject, shown } from '../engine/run/intervention-json.ts';
import type { CaptureSpec, ResearchOptions, ResearchRequest } from './research.ts';
import type { ResearchCall, ResearchReply } from '../chat/types.ts';
import { decodeLensTensor, encodeLensTensor, type LensTensor } from './lens-tensor.ts';

/** steering vectors per request */
export const MAX_LENS_VECTORS = 64;

const AT = 'vllm_xargs';

/** a value vLLM may pass as a JSON string (xargs are strings) or as itself */
function jsonValue(v: unknown, at: string): unknown {
  if (typeof v !== 'string') return v;
  try {
    return parseJsonBounded(v, at);
  } catch (e) {
    throw badRequest(`${at}: not JSON: ${(e as Error).message}`);
  }
}

/** `output_residual_stream` → vllm-lens layer indices 0..L−1, ascending, each once */
function captureLayers(v: unknown, numLayers: number): number[] {
  const at = `${AT}.output_residual_stream`;
  const x = jsonValue(v, at);
  if (x === true) return Array.from({ length: numLayers }, (_, i) => i);
  if (!Array.isArray(x) || x.length === 0) throw badRequest(`${at} must be a non-empty list of layer indices (0..${numLayers - 1}) or true, got ${shown(x)}`);
  for (const i of x) if (!Number.isInteger(i) || i < 0 || i >= numLayers) throw badRequest(`${at}: layer ${shown(i)} is not a decoder layer of this model (0..${numLayers - 1}; layer i is the output of decoder layer i)`);
  return [...new Set(x as number[])].sort((a, b) => a - b);
}

/** one SteeringVector → 'add' edits at hidden[i+1] */
function steeringEdits(v: unknown, k: number, opts: ResearchOptions): Intervention[] {
  const at = `${AT}.apply_steering_vectors[${k}]`;
  if (!isObject(v)) throw badRequest(`${at} must be a SteeringVector {"activations", "layer_indices", "scale", "norm_match", "position_indices"}`);
  for (const key of Object.keys(v)) if (!['activations', 'layer_indices', 'scale', 'norm_match', 'position_indices'].includes(key)) throw badRequest(`${at}.${key}: unknown field`);
  const L = opts.numLayers;
  const d = opts.hiddenSize;
  const layers = v.layer_indices;
  if (!Array.isArray(layers) || layers.length === 0 || layers.length > L) throw badRequest(`${at}.layer_indices must be a non-empty list of decoder layers (0..${L - 1})`);
  layers.forEach((i, j) => {
    if (!Number.isInteger(i) || i < 0 || i >= L) throw badRequest(`${at}.layer_indices[${j}]: ${shown(i)} is not a decoder layer of this model (0..${L - 1})`);
  });
  if (new Set(layers).size !== layers.length) throw badRequest(`${at}.layer_indices: a layer appears twice`);
  const scale = v.scale ?? 1;
  if (!isF32(scale)) throw badRequest(`${at}.scale must be a finite float32 number, got ${shown(v.scale)}`);
  if (v.norm_match !== undefined && v.norm_match !== false) {
    throw badRequest(`${at}.norm_match: not supported: it scales the vector by each token's own residual norm, and this engine adds one vector at every position; send norm_match false with the vector at the scale you want`);
  }
  if (v.position_indices !== undefined && v.position_indices !== null) {
    throw badRequest(`${at}.position_indices: position-specific steering is not supported (this engine adds one vector at every prompt and generated position)`);
  }
  const { values } = decodeLensTensor(v.activations, `${at}.activations`, (shape) => {
    if (shape.length === 3) return 'position-specific (3-D) steering is not supported; send [n_layers, d] (every position)';
    if (shape.length !== 2) return 'must be [n_layers, d]';
    if (shape[0] !== layers.length) return `its first axis must match layer_indices (${layers.length})`;
    return shape[1] === d ? null : `this model's d_model is ${d}`;
  });
  const edits: Intervention[] = [];
  (layers as number[]).forEach((i, j) => {
    const vector = values.subarray(j * d, (j + 1) * d);
    let sq = 0;
    for (const x of vector) sq += x * x;
    // adding a zero vector (or at scale 0) changes nothing: no edit
    if (sq === 0 || scale === 0) return;
    const alpha = scale * Math.sqrt(sq);
    if (!isF32(alpha)) throw badRequest(`${at}: scale × |activations[${j}]| = ${alpha} is not a finite float32 number`);
    edits.push({ layer: i + 1, kind: 'add', vector: Float32Array.from(vector), alpha });
  });
  return edits;
}

/**
 * `vllm_xargs` → the generation's edits (GenerationEdits: adds of scale·v) and a residual-stream capture
 * of every prompt position and generated token. `zstdReady()` first.
 */
export function parseLensXargs(field: unknown, opts: ResearchOptions): ResearchRequest {
  if (!isObject(field)) throw badRequest(`"${AT}" must be an object: {"output_residual_stream", "apply_steering_vectors"}`);
  for (const k of Object.keys(field)) {
    if (k === 'apply_hooks') throw badRequest(`${AT}.apply_hooks: not accepted: its hooks are pickled Python functions (cloudpickle), code this server would run; use apply_steering_vectors, output_residual_stream, or the safekeep field's interventions and hook edits (docs/serve-research.md)`);
    if (k !== 'output_residual_stream' && k !== 'apply_steering_vectors') throw badRequest(`${AT}.${k}: unknown field; this server reads output_residual_stream and apply_steering_vectors`);
  }
  const edits: ResearchRequest['edits'] = {};
  if (field.apply_steering_vectors !== undefined) {
    const at = `${AT}.apply_steering_vectors`;
    const list = jsonValue(field.apply_steering_vectors, at);
    if (!Array.isArray(list)) throw badRequest(`${at} must be a list of SteeringVector objects (a JSON string of one)`);
    if (list.length > MAX_LENS_VECTORS) throw badRequest(`${at}: at most ${MAX_LENS_VECTORS} steering vectors, got ${list.length}`);
    const adds = list.flatMap((v, k) => steeringEdits(v, k, opts));
    try {
      interventionInputs(opts.numLayers, opts.hiddenSize, adds);
    } catch (e) {
      if (e instanceof SafekeepError) throw badRequest(`${at}: ${e.message}`);
      throw e;
    }
    if (adds.length) edits.interventions = adds;
  }
  const capture: CaptureSpec | null = field.output_residual_stream === undefined || field.output_residual_stream === null ? null : {
    hooks: captureLayers(field.output_residual_stream, opts.numLayers).map((i) => ({ name: `blocks.${i}.resid_post`, hidden: i + 1, width: opts.hiddenSize })),
    positions: 'all',
    generated: true,
  };
  return { edits, capture };
}

/**
 * The response's `activations`: `{residual_stream}` [K, positions, d] from a capture of every prompt position and
 * the generated tokens fed back (K = the capture's layers, ascending).
 */
export function lensActivations(resolved: NonNullable<ResearchCall['capture']>, r: ResearchReply, d: number): { residual_stream: LensTensor } {
  const K = resolved.layers?.length ?? 0;
  const n = resolved.promptPositions.length;
  const gen = r.capturedGenerated ?? [];
  const P = n + gen.length;
  const out = new Float32Array(K * P * d);
  const p = r.capturedPrompt;
  for (let k = 0; k < K; k++) {
    if (p && p.length === K * n * d) out.set(p.subarray(k * n * d, (k + 1) * n * d), k * P * d);
    gen.forEach((h, j) => out.set(h.subarray(k * d, (k + 1) * d), (k * P + n + j) * d));
  }
  return { residual_stream: encodeLensTensor(out, [K, P, d]) };
}
