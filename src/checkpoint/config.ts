/**
 * config.json (+ generation_config.json) → `ModelConfig`. The families differ only through this table and the
 * expected-tensor list derived from it; the forward pass is one.
 */
import { SafekeepError } from '../util/errors.ts';
import type { Family, ModelConfig, RopeScaling } from './types.ts';

interface FamilySpec {
  /** transformers class written in `architectures` */
  architecture: string;
  /** q/k/v bias always present (Qwen2), independent of `attention_bias` */
  qkvBias: boolean;
  /** per-head RMSNorm on q, k (Qwen3) */
  qkNorm: boolean;
  /** head_dim when config.json has none: 'hidden/heads' (Llama, Mistral, Qwen2) or a fixed default (Qwen3Config: 128) */
  headDimDefault: 'hidden/heads' | number;
  /** transformers' config-class defaults for keys a config.json may omit */
  defaults: { ropeTheta: number; rmsNormEps: number; tieWordEmbeddings: boolean; maxPositionEmbeddings: number };
}

/** The config table. Defaults are those of the transformers config classes (v4.51). */
export const FAMILIES: Record<Family, FamilySpec> = {
  llama: {
    architecture: 'LlamaForCausalLM', qkvBias: false, qkNorm: false, headDimDefault: 'hidden/heads',
    defaults: { ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, maxPositionEmbeddings: 2048 },
  },
  mistral: {
    architecture: 'MistralForCausalLM', qkvBias: false, qkNorm: false, headDimDefault: 'hidden/heads',
    defaults: { ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, maxPositionEmbeddings: 4096 * 32 },
  },
  qwen2: {
    architecture: 'Qwen2ForCausalLM', qkvBias: true, qkNorm: false, headDimDefault: 'hidden/heads',
    defaults: { ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, maxPositionEmbeddings: 32768 },
  },
  qwen3: {
    architecture: 'Qwen3ForCausalLM', qkvBias: false, qkNorm: true, headDimDefault: 128,
    defaults: { ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, maxPositionEmbeddings: 32768 },
  },
};

export const SUPPORTED_MODEL_TYPES = Object.keys(FAMILIES) as Family[];

type Json = Record<string, unknown>;

function posInt(cfg: Json, key: string, file: string, fallback?: number): number {
  const v = cfg[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new SafekeepError(`${file}: missing ${key}`);
  }
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) throw new SafekeepError(`${file}: ${key} must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

function posNum(cfg: Json, key: string, file: string, fallback: number): number {
  const v = cfg[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new SafekeepError(`${file}: ${key} must be a positive number, got ${JSON.stringify(v)}`);
  return v;
}

function tokenId(v: unknown, key: string, file: string): number | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new SafekeepError(`${file}: ${key} must be a token id, got ${JSON.stringify(v)}`);
  return v;
}

/** eos_token_id as int or list → list (null/absent → null). */
function tokenIds(v: unknown, key: string, file: string): number[] | null {
  if (v === undefined || v === null) return null;
  const list = Array.isArray(v) ? v : [v];
  return list.map((x, i) => tokenId(x, `${key}[${i}]`, file)!);
}

function parseRope(raw: unknown, file: string): RopeScaling {
  if (raw === undefined || raw === null) return { type: 'default' };
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new SafekeepError(`${file}: rope_scaling must be an object or null`);
  const r = raw as Json;
  const type = r.rope_type ?? r.type ?? 'default';
  if (type === 'default') return { type: 'default' };
  if (type === 'llama3') {
    const num = (k: string): number => {
      const v = r[k];
      if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new SafekeepError(`${file}: rope_scaling.${k} must be a positive number for rope_type llama3, got ${JSON.stringify(v)}`);
      return v;
    };
    const s: RopeScaling = {
      type: 'llama3',
      factor: num('factor'),
      lowFreqFactor: num('low_freq_factor'),
      highFreqFactor: num('high_freq_factor'),
      originalMaxPositionEmbeddings: num('original_max_position_embeddings'),
    };
    if (s.highFreqFactor <= s.lowFreqFactor) throw new SafekeepError(`${file}: rope_scaling.high_freq_factor must exceed low_freq_factor`);
    return s;
  }
  throw new SafekeepError(`${file}: rope_scaling type ${JSON.stringify(type)} is not supported (supported: default, llama3)`);
}

/**
 * Normalises a parsed config.json (and generation_config.json, if any).
 * `file` names config.json in error messages.
 */
export function parseModelConfig(config: unknown, generationConfig: unknown | null, file = 'config.json', genFile = 'generation_config.json'): ModelConfig {
  if (config === null || typeof config !== 'object' || Array.isArray(config)) throw new SafekeepError(`${file}: not a JSON object`);
  const cfg = config as Json;
  const mt = cfg.model_type;
  if (typeof mt !== 'string' || !(SUPPORTED_MODEL_TYPES as string[]).includes(mt)) {
    throw new SafekeepError(`${file}: model_type ${JSON.stringify(mt ?? null)} is not supported (supported: ${SUPPORTED_MODEL_TYPES.join(', ')})`);
  }
  const family = mt as Family;
  const spec = FAMILIES[family];
  const act = cfg.hidden_act ?? 'silu';
  if (act !== 'silu') throw new SafekeepError(`${file}: hidden_act ${JSON.stringify(act)} is not supported (only silu)`);
  if (cfg.attention_bias === true) throw new SafekeepError(`${file}: attention_bias true (bias on q/k/v/o) is not supported for ${family}`);
  if (cfg.mlp_bias === true) throw new SafekeepError(`${file}: mlp_bias true is not supported`);

  const hiddenSize = posInt(cfg, 'hidden_size', file);
  const numHeads = posInt(cfg, 'num_attention_heads', file);
  const numKvHeads = posInt(cfg, 'num_key_value_heads', file, numHeads);
  if (numHeads % numKvHeads !== 0) throw new SafekeepError(`${file}: num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);
  let headDim: number;
  if (cfg.head_dim !== undefined && cfg.head_dim !== null) headDim = posInt(cfg, 'head_dim', file);
  else if (spec.headDimDefault === 'hidden/heads') {
    if (hiddenSize % numHeads !== 0) throw new SafekeepError(`${file}: hidden_size ${hiddenSize} is not divisible by num_attention_heads ${numHeads} and there is no head_dim`);
    headDim = hiddenSize / numHeads;
  } else headDim = spec.headDimDefault;
  if (headDim % 2 !== 0) throw new SafekeepError(`${file}: head_dim ${headDim} must be even for RoPE`);

  const tie = cfg.tie_word_embeddings ?? spec.defaults.tieWordEmbeddings;
  if (typeof tie !== 'boolean') throw new SafekeepError(`${file}: tie_word_embeddings must be true or false`);

  const gen = generationConfig === null || generationConfig === undefined ? null : generationConfig;
  if (gen !== null && (typeof gen !== 'object' || Array.isArray(gen))) throw new SafekeepError(`${genFile}: not a JSON object`);
  const g = (gen ?? {}) as Json;
  const eos = tokenIds(g.eos_token_id, 'eos_token_id', genFile) ?? tokenIds(cfg.eos_token_id, 'eos_token_id', file) ?? [];
  const bos = tokenId(g.bos_token_id, 'bos_token_id', genFile) ?? tokenId(cfg.bos_token_id, 'bos_token_id', file);
  const pad = tokenId(g.pad_token_id, 'pad_token_id', genFile) ?? tokenId(cfg.pad_token_id, 'pad_token_id', file);

  return {
    family,
    numLayers: posInt(cfg, 'num_hidden_layers', file),
    hiddenSize,
    intermediateSize: posInt(cfg, 'intermediate_size', file),
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: posInt(cfg, 'vocab_size', file),
    rmsNormEps: posNum(cfg, 'rms_norm_eps', file, spec.defaults.rmsNormEps),
    ropeTheta: posNum(cfg, 'rope_theta', file, spec.defaults.ropeTheta),
    rope: parseRope(cfg.rope_scaling, file),
    maxPositionEmbeddings: posInt(cfg, 'max_position_embeddings', file, spec.defaults.maxPositionEmbeddings),
    tieWordEmbeddings: tie,
    qkvBias: spec.qkvBias,
    qkNorm: spec.qkNorm,
    bosTokenId: bos,
    eosTokenIds: eos,
    padTokenId: pad,
  };
}

/**
 * Every tensor the forward pass needs, with its HF shape (linear weights are [out, in]).
 * `lm_head.weight` only when untied.
 */
export function expectedTensors(c: ModelConfig): Map<string, number[]> {
  const m = new Map<string, number[]>();
  const d = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  m.set('model.embed_tokens.weight', [c.vocabSize, d]);
  for (let i = 0; i < c.numLayers; i++) {
    const p = `model.layers.${i}.`;
    m.set(`${p}input_layernorm.weight`, [d]);
    m.set(`${p}self_attn.q_proj.weight`, [q, d]);
    m.set(`${p}self_attn.k_proj.weight`, [kv, d]);
    m.set(`${p}self_attn.v_proj.weight`, [kv, d]);
    if (c.qkvBias) {
      m.set(`${p}self_attn.q_proj.bias`, [q]);
      m.set(`${p}self_attn.k_proj.bias`, [kv]);
      m.set(`${p}self_attn.v_proj.bias`, [kv]);
    }
    if (c.qkNorm) {
      m.set(`${p}self_attn.q_norm.weight`, [c.headDim]);
      m.set(`${p}self_attn.k_norm.weight`, [c.headDim]);
    }
    m.set(`${p}self_attn.o_proj.weight`, [d, q]);
    m.set(`${p}post_attention_layernorm.weight`, [d]);
    m.set(`${p}mlp.gate_proj.weight`, [c.intermediateSize, d]);
    m.set(`${p}mlp.up_proj.weight`, [c.intermediateSize, d]);
    m.set(`${p}mlp.down_proj.weight`, [d, c.intermediateSize]);
  }
  m.set('model.norm.weight', [d]);
  if (!c.tieWordEmbeddings) m.set('lm_head.weight', [c.vocabSize, d]);
  return m;
}

/** RoPE inverse frequencies [headDim/2], incl. llama3 scaling (transformers `_compute_llama3_parameters`). */
export function ropeInvFreq(c: ModelConfig): Float64Array {
  const half = c.headDim / 2;
  const inv = new Float64Array(half);
  for (let j = 0; j < half; j++) inv[j] = 1 / c.ropeTheta ** ((2 * j) / c.headDim);
  if (c.rope.type === 'llama3') {
    const { factor, lowFreqFactor, highFreqFactor, originalMaxPositionEmbeddings: old } = c.rope;
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
  return inv;
}
