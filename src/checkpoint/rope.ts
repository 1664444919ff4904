/**
 * RoPE settings from config.json, both generations of keys, resolved to the values transformers (5.x) computes with:
 *
 *   transformers ≥ 5: `rope_parameters` = {rope_type, rope_theta, factor, ...} (flat, or one dict per attention type)
 *   transformers 4.x: top-level `rope_theta` + `rope_scaling` = {rope_type | type, factor, ...} or null
 *
 * Resolution follows `RotaryEmbeddingConfigMixin.convert_rope_params_to_dict` / `standardize_rope_params`: a non-null
 * `rope_scaling` wins over `rope_parameters`; top-level `rope_theta` and `partial_rotary_factor` fill keys the dict
 * lacks; for llama3/yarn a top-level `original_max_position_embeddings` overrides the dict's, and the dict's falls
 * back to `max_position_embeddings`.
 *
 * Inverse frequencies (`ropeInvFreq`) follow `modeling_rope_utils.py` (`_compute_*_parameters`): default, linear,
 * llama3, yarn (incl. its attention factor, which multiplies cos and sin), dynamic NTK (a function of the sequence
 * length being run: transformers recomputes it when a forward's max position + 1 exceeds max_position_embeddings).
 * Everything else (longrope, su, proportional, unknown) is refused by name.
 */
import { SafekeepError } from '../util/errors.ts';
import { quoteClipped } from '../util/quote.ts';
import type { RopeScaling } from './types.ts';

type Json = Record<string, unknown>;

/** RoPE types implemented HF-exact. */
const ROPE_TYPES = ['default', 'linear', 'llama3', 'yarn', 'dynamic'] as const;

/** attention-type names transformers 5 may nest `rope_parameters` under */
const ATTENTION_TYPES = ['full_attention', 'sliding_attention', 'chunked_attention', 'linear_attention'];

interface ResolvedRope {
  theta: number;
  rope: RopeScaling;
  /** config.json keys (dotted inside dicts) that were read */
  keys: string[];
}

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The RoPE settings of a parsed config.json. `headDim` is the resolved head dimension; `maxPositionEmbeddings` the
 * resolved max_position_embeddings (family default when absent).
 */
export function resolveRope(cfg: Json, file: string, defaults: { theta: number }, headDim: number, maxPositionEmbeddings: number): ResolvedRope {
  const keys: string[] = [];
  const { where, raw } = ropeDict(cfg, file);
  if (cfg.rope_scaling !== undefined) keys.push('rope_scaling');
  if (cfg.rope_parameters !== undefined) keys.push('rope_parameters');
  const own = new Set(Object.keys(raw)); // the dict's own keys (before top-level keys fill it)
  fillThetaAndPartial(cfg, raw, defaults.theta, keys);
  const type = raw.rope_type ?? raw.type ?? 'default';
  if (!isRopeType(type)) {
    throw new SafekeepError(`${file}: RoPE type ${quoteClipped(type)} (${where}) is not supported (supported: ${ROPE_TYPES.join(', ')})`);
  }
  fillOriginalMax(cfg, raw, type, maxPositionEmbeddings, keys);

  const r = ropeReader(raw, own, keys, file, where, type);
  const theta = r.num('rope_theta');
  const prf = r.num('partial_rotary_factor', { optional: 1 });
  if (prf > 1) throw new SafekeepError(`${file}: partial_rotary_factor ${prf} must be at most 1`);
  // transformers' default RoPE of these classes always rotates the whole head (the factor is not read there); the
  // scaled types size inv_freq by int(head_dim · factor), which these classes' apply_rotary_pos_emb cannot
  // broadcast against a whole head (transformers itself fails), so that case is refused
  if (type !== 'default' && Math.trunc(headDim * prf) !== headDim) {
    throw new SafekeepError(`${file}: partial_rotary_factor ${prf} with RoPE type ${type} rotates ${Math.trunc(headDim * prf)} of ${headDim} head dims, which transformers' Llama/Mistral/Qwen classes cannot run; not supported`);
  }
  r.read(['rope_type', 'type', 'rope_theta', 'partial_rotary_factor']);
  const rope = scalingOfType(type, r, maxPositionEmbeddings);
  // keys of the dict that this type does not read change nothing in transformers either (it warns), except ones that
  // belong to a type we refuse
  for (const k of ['short_factor', 'long_factor', 'mrope_section', 'mrope_interleaved']) {
    if (raw[k] !== undefined && raw[k] !== null) throw new SafekeepError(`${file}: ${where}.${k} is not supported (RoPE type ${type})`);
  }
  return { theta, rope, keys: [...new Set(keys)] };
}

type RopeType = (typeof ROPE_TYPES)[number];
const isRopeType = (t: unknown): t is RopeType => typeof t === 'string' && (ROPE_TYPES as readonly string[]).includes(t);

/**
 * The dict the settings come from (a copy, filled in later), and where it is (named in errors and in the keys read):
 * a non-null `rope_scaling` wins over `rope_parameters`, as in transformers' convert_rope_params_to_dict.
 */
function ropeDict(cfg: Json, file: string): { where: string; raw: Json } {
  const scaling = cfg.rope_scaling;
  const params = cfg.rope_parameters;
  if (scaling !== undefined && scaling !== null) {
    if (!isObject(scaling)) throw new SafekeepError(`${file}: rope_scaling must be an object or null`);
    return { where: 'rope_scaling', raw: { ...scaling } };
  }
  if (params === undefined || params === null) return { where: 'rope_parameters', raw: {} };
  if (!isObject(params)) throw new SafekeepError(`${file}: rope_parameters must be an object or null`);
  const nested = Object.keys(params).filter((k) => ATTENTION_TYPES.includes(k));
  if (!nested.length) return { where: 'rope_parameters', raw: { ...params } };
  // one dict per attention type: these families run one rotary embedding for every layer, so the variants must agree
  const variants = nested.map((k) => params[k]);
  const first = JSON.stringify(variants[0]);
  if (variants.some((v) => JSON.stringify(v) !== first) || nested.length !== Object.keys(params).length) {
    throw new SafekeepError(`${file}: rope_parameters has different settings per attention type (${nested.join(', ')}); these model classes use one RoPE for every layer`);
  }
  if (!isObject(variants[0])) throw new SafekeepError(`${file}: rope_parameters.${nested[0]} must be an object`);
  return { where: `rope_parameters.${nested[0]}`, raw: { ...variants[0] } };
}

/** Top-level `rope_theta` and `partial_rotary_factor` fill what the dict lacks (standardize_rope_params' setdefault). */
function fillThetaAndPartial(cfg: Json, raw: Json, defaultTheta: number, keys: string[]): void {
  if (raw.rope_theta === undefined || raw.rope_theta === null) {
    if (cfg.rope_theta !== undefined && cfg.rope_theta !== null) { raw.rope_theta = cfg.rope_theta; keys.push('rope_theta'); }
    else raw.rope_theta = defaultTheta;
  } else if (cfg.rope_theta !== undefined) keys.push('rope_theta');
  if (raw.partial_rotary_factor === undefined && cfg.partial_rotary_factor !== undefined && cfg.partial_rotary_factor !== null) {
    raw.partial_rotary_factor = cfg.partial_rotary_factor;
  }
  if (cfg.partial_rotary_factor !== undefined) keys.push('partial_rotary_factor');
}

/**
 * llama3/yarn: a top-level `original_max_position_embeddings` overrides the dict's (transformers reads the top-level
 * one first), and without either it is `max_position_embeddings`.
 */
function fillOriginalMax(cfg: Json, raw: Json, type: RopeType, maxPositionEmbeddings: number, keys: string[]): void {
  if (type === 'llama3' || type === 'yarn') {
    if (cfg.original_max_position_embeddings !== undefined && cfg.original_max_position_embeddings !== null) {
      raw.original_max_position_embeddings = cfg.original_max_position_embeddings;
      keys.push('original_max_position_embeddings');
    } else if (raw.original_max_position_embeddings === undefined || raw.original_max_position_embeddings === null) {
      raw.original_max_position_embeddings = maxPositionEmbeddings;
    }
  } else if (cfg.original_max_position_embeddings !== undefined) keys.push('original_max_position_embeddings');
}

/** The filled dict, read value by value: numbers checked with the dict named, and the dict's own keys recorded as read. */
interface RopeReader {
  raw: Json;
  file: string;
  where: string;
  /** a positive (or > min) finite number; `optional` when absent or null */
  num(k: string, opts?: { optional?: number; min?: number }): number;
  /** records `where.k` for each k the dict itself has */
  read(ks: string[]): void;
}

function ropeReader(raw: Json, own: ReadonlySet<string>, keys: string[], file: string, where: string, type: RopeType): RopeReader {
  return {
    raw, file, where,
    num: (k, opts = {}) => {
      const v = raw[k];
      if ((v === undefined || v === null) && opts.optional !== undefined) return opts.optional;
      if (typeof v !== 'number' || !Number.isFinite(v) || v <= (opts.min ?? 0)) {
        throw new SafekeepError(`${file}: ${where}.${k} must be a positive number for RoPE type ${type}, got ${quoteClipped(v ?? null)}`);
      }
      return v;
    },
    read: (ks) => { for (const k of ks) if (own.has(k)) keys.push(`${where}.${k}`); },
  };
}

/** The type's parameters as `_compute_<type>_parameters` reads them. */
function scalingOfType(type: RopeType, r: RopeReader, maxPositionEmbeddings: number): RopeScaling {
  switch (type) {
    case 'default':
      return { type: 'default' };
    case 'linear': {
      const rope: RopeScaling = { type: 'linear', factor: r.num('factor') };
      r.read(['factor']);
      return rope;
    }
    case 'llama3': {
      const rope: RopeScaling = {
        type: 'llama3', factor: r.num('factor'), lowFreqFactor: r.num('low_freq_factor'), highFreqFactor: r.num('high_freq_factor'),
        originalMaxPositionEmbeddings: r.num('original_max_position_embeddings'),
      };
      if (rope.highFreqFactor <= rope.lowFreqFactor) throw new SafekeepError(`${r.file}: ${r.where}.high_freq_factor must exceed low_freq_factor`);
      r.read(['factor', 'low_freq_factor', 'high_freq_factor', 'original_max_position_embeddings']);
      return rope;
    }
    case 'yarn':
      return yarnScaling(r, maxPositionEmbeddings);
    case 'dynamic': {
      const rope: RopeScaling = { type: 'dynamic', factor: r.num('factor'), maxPositionEmbeddings };
      r.read(['factor']);
      return rope;
    }
  }
}

/** yarn (`_compute_yarn_parameters`): factor, the attention factor on cos and sin (mscale), β bounds, truncation. */
function yarnScaling(r: RopeReader, maxPositionEmbeddings: number): RopeScaling {
  const { raw, file, where } = r;
  const original = r.num('original_max_position_embeddings');
  // `factor: null` → max_position_embeddings / original (the DeepSeek-V3 convention transformers keeps)
  const factor = raw.factor === null || raw.factor === undefined ? maxPositionEmbeddings / original : r.num('factor');
  const mscale = raw.mscale === undefined || raw.mscale === null ? null : r.num('mscale', { min: -Infinity });
  const mscaleAllDim = raw.mscale_all_dim === undefined || raw.mscale_all_dim === null ? null : r.num('mscale_all_dim', { min: -Infinity });
  const getMscale = (scale: number, m = 1): number => (scale <= 1 ? 1 : 0.1 * m * Math.log(scale) + 1);
  let attentionFactor: number;
  if (raw.attention_factor !== undefined && raw.attention_factor !== null) attentionFactor = r.num('attention_factor');
  else if (mscale && mscaleAllDim) attentionFactor = getMscale(factor, mscale) / getMscale(factor, mscaleAllDim);
  else attentionFactor = getMscale(factor);
  // `beta_fast or 32`: 0 and null both fall back, as in Python
  const beta = (k: string, dflt: number): number => {
    const v = raw[k];
    if (v === undefined || v === null || v === 0) return dflt;
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new SafekeepError(`${file}: ${where}.${k} must be a number, got ${quoteClipped(v)}`);
    return v;
  };
  const truncate = raw.truncate === undefined || raw.truncate === null ? true : raw.truncate;
  if (typeof truncate !== 'boolean') throw new SafekeepError(`${file}: ${where}.truncate must be true or false`);
  const rope: RopeScaling = { type: 'yarn', factor, originalMaxPositionEmbeddings: original, attentionFactor, betaFast: beta('beta_fast', 32), betaSlow: beta('beta_slow', 1), truncate };
  r.read(['factor', 'original_max_position_embeddings', 'attention_factor', 'beta_fast', 'beta_slow', 'mscale', 'mscale_all_dim', 'truncate']);
  return rope;
}

/**
 * RoPE inverse frequencies [head_dim/2] as transformers computes them for the type. `seqLength` (dynamic only): the
 * length being run, i.e. the largest position of the forward + 1; at or below max_position_embeddings the unscaled
 * frequencies.
 */
export function ropeInvFreq(c: { headDim: number; ropeTheta: number; rope: RopeScaling }, seqLength = 0): Float64Array {
  const dim = c.headDim;
  const half = dim / 2;
  const r = c.rope;
  let base = c.ropeTheta;
  if (r.type === 'dynamic') {
    const len = Math.max(seqLength, r.maxPositionEmbeddings);
    base = base * ((r.factor * len) / r.maxPositionEmbeddings - (r.factor - 1)) ** (dim / (dim - 2));
  }
  const inv = new Float64Array(half);
  for (let j = 0; j < half; j++) inv[j] = 1 / base ** ((2 * j) / dim);
  if (r.type === 'linear') for (let j = 0; j < half; j++) inv[j] = inv[j]! / r.factor;
  if (r.type === 'llama3') {
    const { factor, lowFreqFactor, highFreqFactor, originalMaxPositionEmbeddings: old } = r;
    const lowWavelen = old / lowFreqFactor;
    const highWavelen = old / highFreqFactor;
    for (let j = 0; j < half; j++) {
      const f = inv[j]!;
      const wavelen = (2 * Math.PI) / f;
      if (wavelen < highWavelen) continue;
      if (wavelen > lowWavelen) { inv[j] = f / factor; continue; }
      const s = (old / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
      inv[j] = (1 - s) * (f / factor) + s * f;
    }
  }
  if (r.type === 'yarn') {
    const { low, high } = yarnCorrectionRange(r.betaFast, r.betaSlow, dim, c.ropeTheta, r.originalMaxPositionEmbeddings, r.truncate);
    const span = low === high ? high + 0.001 - low : high - low;
    for (let j = 0; j < half; j++) {
      const extrapolation = 1 - Math.min(1, Math.max(0, (j - low) / span));
      inv[j] = (inv[j]! / r.factor) * (1 - extrapolation) + inv[j]! * extrapolation;
    }
  }
  return inv;
}

/** yarn: the dimension range [low, high] between pure extrapolation and pure interpolation (transformers' find_correction_range) */
function yarnCorrectionRange(betaFast: number, betaSlow: number, dim: number, base: number, original: number, truncate: boolean): { low: number; high: number } {
  const correctionDim = (rotations: number) => (dim * Math.log(original / (rotations * 2 * Math.PI))) / (2 * Math.log(base));
  let low = correctionDim(betaFast);
  let high = correctionDim(betaSlow);
  if (truncate) { low = Math.floor(low); high = Math.ceil(high); }
  return { low: Math.max(low, 0), high: Math.min(high, dim - 1) };
}

/** factor on cos and sin (yarn's attention factor; 1 for the other types) */
export function ropeAttentionScaling(rope: RopeScaling): number {
  return rope.type === 'yarn' ? rope.attentionFactor : 1;
}

/** One line: type, θ and the factors, e.g. `yarn (theta 1000000, factor 4, original 32768, attention 1.1386)`. */
export function describeRope(theta: number, r: RopeScaling): string {
  switch (r.type) {
    case 'default': return `default (theta ${theta})`;
    case 'linear': return `linear (theta ${theta}, factor ${r.factor})`;
    case 'llama3': return `llama3 (theta ${theta}, factor ${r.factor}, low ${r.lowFreqFactor}, high ${r.highFreqFactor}, original ${r.originalMaxPositionEmbeddings})`;
    case 'yarn': return `yarn (theta ${theta}, factor ${r.factor}, original ${r.originalMaxPositionEmbeddings}, beta_fast ${r.betaFast}, beta_slow ${r.betaSlow}, truncate ${r.truncate}, attention factor ${+r.attentionFactor.toFixed(6)})`;
    case 'dynamic': return `dynamic NTK (theta ${theta}, factor ${r.factor}, scaled beyond ${r.maxPositionEmbeddings} tokens, recomputed for the length run)`;
  }
}
