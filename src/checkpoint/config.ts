/**
 * config.json (+ generation_config.json) → `ModelConfig`. The families differ only through this table and the
 * expected-tensor list derived from it; the forward pass is one.
 */
import { SafekeepError } from '../util/errors.ts';
import { quoteClipped } from '../util/quote.ts';
import { resolveRope } from './rope.ts';
import type { Family, ModelConfig } from './types.ts';

interface FamilySpec {
  /** transformers class written in `architectures` */
  architecture: string;
  /** q/k/v bias always present (Qwen2), independent of `attention_bias` */
  qkvBias: boolean;
  /** per-head RMSNorm on q, k (Qwen3) */
  qkNorm: boolean;
  /** head_dim when config.json has none: 'hidden/heads' (Llama, Mistral, Qwen2) or a fixed default (Qwen3Config: 128) */
  headDimDefault: 'hidden/heads' | number;
  /**
   * sliding-window keys the family's transformers class reads: 'all' (Mistral: `sliding_window` on every layer),
   * 'layer_types' (Qwen2/Qwen3: `use_sliding_window`, `max_window_layers`, `layer_types`), 'none' (Llama)
   */
  window: 'all' | 'layer_types' | 'none';
  /** transformers' config-class defaults for keys a config.json may omit */
  defaults: { ropeTheta: number; rmsNormEps: number; tieWordEmbeddings: boolean; maxPositionEmbeddings: number; slidingWindow: number | null; maxWindowLayers: number };
}

/** The config table. Defaults are those of the transformers config classes (v4.51, unchanged in 5.x). */
export const FAMILIES: Record<Family, FamilySpec> = {
  llama: {
    architecture: 'LlamaForCausalLM', qkvBias: false, qkNorm: false, headDimDefault: 'hidden/heads', window: 'none',
    defaults: { ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, maxPositionEmbeddings: 2048, slidingWindow: null, maxWindowLayers: 0 },
  },
  mistral: {
    architecture: 'MistralForCausalLM', qkvBias: false, qkNorm: false, headDimDefault: 'hidden/heads', window: 'all',
    defaults: { ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, maxPositionEmbeddings: 4096 * 32, slidingWindow: 4096, maxWindowLayers: 0 },
  },
  qwen2: {
    architecture: 'Qwen2ForCausalLM', qkvBias: true, qkNorm: false, headDimDefault: 'hidden/heads', window: 'layer_types',
    defaults: { ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, maxPositionEmbeddings: 32768, slidingWindow: 4096, maxWindowLayers: 28 },
  },
  qwen3: {
    architecture: 'Qwen3ForCausalLM', qkvBias: false, qkNorm: true, headDimDefault: 128, window: 'layer_types',
    defaults: { ropeTheta: 10000, rmsNormEps: 1e-6, tieWordEmbeddings: false, maxPositionEmbeddings: 32768, slidingWindow: 4096, maxWindowLayers: 28 },
  },
};

const SUPPORTED_MODEL_TYPES = Object.keys(FAMILIES) as Family[];

type Json = Record<string, unknown>;

/**
 * Upper bounds of the sizes a config.json sets, checked before anything is sized by them (a per-layer list, the
 * expected-tensor table, RoPE tables): each is far above any released model (405B: 126 layers, d 16384, vocab 128k;
 * contexts of 10M positions), so only a broken or hostile config reaches one.
 */
const SIZE_LIMITS: Record<string, number> = {
  num_hidden_layers: 4096,
  hidden_size: 1 << 18,
  intermediate_size: 1 << 21,
  num_attention_heads: 4096,
  num_key_value_heads: 4096,
  head_dim: 1 << 14,
  vocab_size: 1 << 24,
  max_position_embeddings: 1 << 30,
};

function posInt(cfg: Json, key: string, file: string, fallback?: number): number {
  const v = cfg[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new SafekeepError(`${file}: missing ${key}`);
  }
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) throw new SafekeepError(`${file}: ${key} must be a positive integer, got ${quoteClipped(v)}`);
  const max = SIZE_LIMITS[key];
  if (max !== undefined && v > max) throw new SafekeepError(`${file}: ${key} ${v} is beyond any real model (at most ${max}); refusing`);
  return v;
}

function posNum(cfg: Json, key: string, file: string, fallback: number): number {
  const v = cfg[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new SafekeepError(`${file}: ${key} must be a positive number, got ${quoteClipped(v)}`);
  return v;
}

function tokenId(v: unknown, key: string, file: string): number | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new SafekeepError(`${file}: ${key} must be a token id, got ${quoteClipped(v)}`);
  return v;
}

/** eos_token_id as int or list → list (null/absent → null). */
function tokenIds(v: unknown, key: string, file: string): number[] | null {
  if (v === undefined || v === null) return null;
  const list = Array.isArray(v) ? v : [v];
  return list.map((x, i) => tokenId(x, `${key}[${i}]`, file)!);
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
    throw new SafekeepError(`${file}: model_type ${quoteClipped(mt ?? null)} is not supported (supported: ${SUPPORTED_MODEL_TYPES.join(', ')})`);
  }
  const family = mt as Family;
  const spec = FAMILIES[family];
  checkKeys(cfg, family, file);
  const act = cfg.hidden_act ?? 'silu';
  if (act !== 'silu') throw new SafekeepError(`${file}: hidden_act ${quoteClipped(act)} is not supported (only silu)`);

  const hiddenSize = posInt(cfg, 'hidden_size', file);
  const numHeads = posInt(cfg, 'num_attention_heads', file);
  const numKvHeads = posInt(cfg, 'num_key_value_heads', file, numHeads);
  const numLayers = posInt(cfg, 'num_hidden_layers', file);
  if (numHeads % numKvHeads !== 0) throw new SafekeepError(`${file}: num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);
  let headDim: number;
  if (cfg.head_dim !== undefined && cfg.head_dim !== null) headDim = posInt(cfg, 'head_dim', file);
  else if (spec.headDimDefault === 'hidden/heads') {
    if (hiddenSize % numHeads !== 0) throw new SafekeepError(`${file}: hidden_size ${hiddenSize} is not divisible by num_attention_heads ${numHeads} and there is no head_dim`);
    headDim = hiddenSize / numHeads;
  } else headDim = spec.headDimDefault;
  if (headDim % 2 !== 0) throw new SafekeepError(`${file}: head_dim ${headDim} must be even for RoPE`);
  const maxPositionEmbeddings = posInt(cfg, 'max_position_embeddings', file, spec.defaults.maxPositionEmbeddings);
  const rope = resolveRope(cfg, file, { theta: spec.defaults.ropeTheta }, headDim, maxPositionEmbeddings);

  const tie = cfg.tie_word_embeddings ?? spec.defaults.tieWordEmbeddings;
  if (typeof tie !== 'boolean') throw new SafekeepError(`${file}: tie_word_embeddings must be true or false`);

  const gen = generationConfig === null || generationConfig === undefined ? null : generationConfig;
  if (gen !== null && (typeof gen !== 'object' || Array.isArray(gen))) throw new SafekeepError(`${genFile}: not a JSON object`);
  const g = (gen ?? {}) as Json;
  const eos = tokenIds(g.eos_token_id, 'eos_token_id', genFile) ?? tokenIds(cfg.eos_token_id, 'eos_token_id', file) ?? [];
  const bos = tokenId(g.bos_token_id, 'bos_token_id', genFile) ?? tokenId(cfg.bos_token_id, 'bos_token_id', file);
  const pad = tokenId(g.pad_token_id, 'pad_token_id', genFile) ?? tokenId(cfg.pad_token_id, 'pad_token_id', file);

  const present = Object.keys(cfg);
  const read = new Set([...present.filter((k) => READ_KEYS.has(k)), ...rope.keys]);
  return {
    family,
    numLayers,
    hiddenSize,
    intermediateSize: posInt(cfg, 'intermediate_size', file),
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: posInt(cfg, 'vocab_size', file),
    rmsNormEps: posNum(cfg, 'rms_norm_eps', file, spec.defaults.rmsNormEps),
    ropeTheta: rope.theta,
    rope: rope.rope,
    maxPositionEmbeddings,
    attentionWindows: attentionWindows(cfg, family, numLayers, file),
    tieWordEmbeddings: tie,
    qkvBias: spec.qkvBias,
    qkNorm: spec.qkNorm,
    bosTokenId: bos,
    eosTokenIds: eos,
    padTokenId: pad,
    configKeys: { read: [...read].sort(), ignored: present.filter((k) => !read.has(k) && IGNORED_KEYS.has(k)).sort() },
  };
}

/**
 * Per layer, the sliding window or null, as the family's transformers class decides it:
 * - Mistral: `sliding_window` (default 4096 when the key is absent; null = full attention) on every layer;
 * - Qwen2/Qwen3: `sliding_window` only when `use_sliding_window` is true, on the layers `layer_types` marks
 *   "sliding_attention" (when config.json has no `layer_types`: layers i ≥ `max_window_layers`);
 * - Llama: none (a non-null `sliding_window` is refused by `checkKeys`: LlamaForCausalLM would ignore it).
 */
function attentionWindows(cfg: Json, family: Family, L: number, file: string): (number | null)[] {
  const spec = FAMILIES[family];
  const window = (): number | null => {
    const v = cfg.sliding_window === undefined ? spec.defaults.slidingWindow : cfg.sliding_window;
    if (v === null) return null;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) throw new SafekeepError(`${file}: sliding_window must be a positive integer or null, got ${quoteClipped(v)}`);
    return v;
  };
  if (spec.window === 'none') return new Array<null>(L).fill(null);
  if (spec.window === 'all') return new Array<number | null>(L).fill(window());
  const use = cfg.use_sliding_window ?? false;
  if (typeof use !== 'boolean') throw new SafekeepError(`${file}: use_sliding_window must be true or false`);
  const w = use ? window() : null;
  let types: string[];
  if (cfg.layer_types !== undefined && cfg.layer_types !== null) {
    const lt = cfg.layer_types;
    if (!Array.isArray(lt) || lt.length !== L) throw new SafekeepError(`${file}: layer_types must be a list of ${L} attention types (one per layer)`);
    types = lt.map((t, i) => {
      if (t !== 'full_attention' && t !== 'sliding_attention') throw new SafekeepError(`${file}: layer_types[${i}] ${quoteClipped(t)} is not supported (full_attention, sliding_attention)`);
      return t;
    });
  } else {
    const mwl = cfg.max_window_layers ?? spec.defaults.maxWindowLayers;
    if (typeof mwl !== 'number' || !Number.isSafeInteger(mwl) || mwl < 0) throw new SafekeepError(`${file}: max_window_layers must be a non-negative integer, got ${quoteClipped(mwl)}`);
    types = Array.from({ length: L }, (_, i) => (w !== null && i >= mwl ? 'sliding_attention' : 'full_attention'));
  }
  if (w === null && types.includes('sliding_attention')) {
    // transformers would build a sliding mask without a window size: nothing sensible to match
    throw new SafekeepError(`${file}: layer_types marks sliding_attention layers but there is no window (use_sliding_window ${use}, sliding_window ${quoteClipped(cfg.sliding_window ?? null)}); not supported`);
  }
  return types.map((t) => (t === 'sliding_attention' ? w : null));
}

/** config.json keys that decide the forward pass (or the stop ids) and are implemented HF-exact */
const READ_KEYS = new Set([
  'model_type', 'hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads',
  'head_dim', 'hidden_act', 'rms_norm_eps', 'vocab_size', 'tie_word_embeddings', 'max_position_embeddings',
  'rope_parameters', 'rope_theta', 'rope_scaling', 'partial_rotary_factor', 'original_max_position_embeddings',
  'sliding_window', 'use_sliding_window', 'max_window_layers', 'layer_types',
  'attention_bias', 'mlp_bias', 'bos_token_id', 'eos_token_id', 'pad_token_id',
]);

/** keys that do not change an inference forward pass (metadata, training-only, generic PretrainedConfig fields) */
const IGNORED_KEYS = new Set([
  'architectures', 'transformers_version', 'dtype', 'torch_dtype', '_name_or_path', '_attn_implementation_autoset',
  '_attn_implementation', 'attn_implementation', 'use_cache', 'initializer_range', 'attention_dropout', 'pretraining_tp',
  'output_attentions', 'output_hidden_states', 'return_dict', 'use_return_dict', 'torchscript', 'use_bfloat16',
  'tf_legacy_loss', 'pruned_heads', 'chunk_size_feed_forward', 'is_encoder_decoder', 'is_decoder',
  'add_cross_attention', 'cross_attention_hidden_size', 'tie_encoder_decoder', 'id2label', 'label2id', 'num_labels',
  'problem_type', 'finetuning_task', 'tokenizer_class', 'prefix', 'task_specific_params', 'sep_token_id',
  'decoder_start_token_id', 'model_name', 'name_or_path', 'keys_to_ignore_at_inference', 'initializer_factor',
  // metadata other tools write (SmolLM2: is_llama_config, transformers.js_config; Unsloth); auto_map names custom
  // modeling code, which transformers itself does not run without trust_remote_code (it uses the class above)
  'is_llama_config', 'transformers.js_config', 'auto_map', 'unsloth_version', 'unsloth_fixed',
  // lengths some Llama-2-era configs carry; these transformers classes never read them
  'max_sequence_length', 'seq_length',
  // dropout: inactive at inference
  'embd_pdrop', 'resid_pdrop', 'attn_pdrop', 'hidden_dropout', 'classifier_dropout', 'mlp_dropout',
  // generation settings old configs carry (greedy decoding here is explicit; stop ids come from eos_token_id)
  'max_length', 'min_length', 'do_sample', 'early_stopping', 'num_beams', 'num_beam_groups', 'diversity_penalty',
  'temperature', 'top_k', 'top_p', 'typical_p', 'repetition_penalty', 'length_penalty', 'no_repeat_ngram_size',
  'encoder_no_repeat_ngram_size', 'bad_words_ids', 'num_return_sequences', 'output_scores', 'return_dict_in_generate',
  'forced_bos_token_id', 'forced_eos_token_id', 'remove_invalid_values', 'exponential_decay_length_penalty',
  'suppress_tokens', 'begin_suppress_tokens',
]);

/**
 * Keys that change the forward pass in some transformers model and are not implemented here: refused by name when
 * set to anything but their no-op value (null / false / 0, or 1 for the multipliers), listed here for the message.
 */
const REFUSED_KEYS: Record<string, string> = {
  attn_logit_softcapping: 'tanh soft-capping of attention scores',
  final_logit_softcapping: 'tanh soft-capping of the logits',
  use_qk_norm: 'RMSNorm on q and k',
  query_pre_attn_scalar: 'a different attention scale',
  logits_scaling: 'scaled logits', embedding_multiplier: 'scaled embeddings', residual_multiplier: 'scaled residuals',
  attention_multiplier: 'a different attention scale', logit_scale: 'scaled logits',
  quantization_config: 'quantized weights', rope_interleave: 'interleaved RoPE', rope_interleaved: 'interleaved RoPE',
  use_mrope: 'multimodal RoPE',
  no_rope_layers: 'layers without RoPE', no_rope_layer_interval: 'layers without RoPE', attention_chunk_size: 'chunked attention',
  sliding_window_pattern: 'alternating sliding-window layers', num_experts: 'mixture of experts',
  num_local_experts: 'mixture of experts', n_routed_experts: 'mixture of experts', moe_intermediate_size: 'mixture of experts',
  hidden_activation: 'a different MLP activation', use_parallel_residual: 'parallel residual blocks',
  layer_norm_eps: 'LayerNorm instead of RMSNorm', norm_eps: 'a different norm', head_dim_scale: 'a different attention scale',
};

/** no-op values of the REFUSED_KEYS (a config may carry them) */
function isNoOp(key: string, v: unknown): boolean {
  if (v === null || v === false || v === 0) return true;
  if ((key.endsWith('_multiplier') || key === 'logits_scaling' || key === 'logit_scale') && v === 1) return true;
  return false;
}

/**
 * Every key of config.json is read, ignored as harmless, or refused: one clear error naming the first key that
 * would change the forward pass in a way not implemented here (or that safekeep does not know).
 */
function checkKeys(cfg: Json, family: Family, file: string): void {
  const refuse = (k: string, why: string): never => {
    throw new SafekeepError(`${file}: ${k} ${quoteClipped(cfg[k])} is not supported (${why}); refusing rather than computing a different model`);
  };
  for (const k of Object.keys(cfg)) {
    const v = cfg[k];
    if (k === 'attention_bias' && v === true) refuse(k, `bias on the q/k/v/o projections of ${family}`);
    if (k === 'mlp_bias' && v === true) refuse(k, 'bias on the MLP projections');
    if (k === 'layer_types' && FAMILIES[family].window !== 'layer_types' && v !== null) {
      refuse(k, `transformers' ${FAMILIES[family].architecture} does not read per-layer attention types; the checkpoint expects another architecture`);
    }
    if ((k === 'sliding_window' && v !== null || k === 'use_sliding_window' && v === true) && FAMILIES[family].window === 'none') {
      refuse(k, `transformers' ${FAMILIES[family].architecture} has no sliding window; the checkpoint expects another architecture`);
    }
    if (READ_KEYS.has(k) || IGNORED_KEYS.has(k)) continue;
    if (k in REFUSED_KEYS) {
      if (!isNoOp(k, v)) refuse(k, REFUSED_KEYS[k]!);
      continue;
    }
    throw new SafekeepError(`${file}: config key ${quoteClipped(k)} is not known to safekeep for ${family} and may change the forward pass; refusing (src/engine/README.md lists the keys read, ignored and refused)`);
  }
}
