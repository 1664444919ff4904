/**
 * The one table of Hugging Face tensor names. Every family safekeep runs (llama, mistral, qwen2, qwen3) stores its
 * decoder under the same names; they differ only in which optional tensors exist (q/k/v biases: qwen2; per-head q/k
 * norms: qwen3), which the config's flags select. Shapes are HF's ([out, in] for linear weights).
 *
 * `qkv` and `gateUp` are not checkpoint tensors: they name the row-concatenated q/k/v and gate/up weights that the
 * quantized store (engine/runtime/quant-store.ts) writes, in the same naming scheme.
 */
import type { ModelConfig } from './types.ts';

/** Tensors outside the decoder layers. */
type ModelTensor = 'embed' | 'finalNorm' | 'lmHead';
/** Tensors of one decoder layer, by role. */
type LayerTensor =
  | 'attnNorm' | 'q' | 'k' | 'v' | 'qBias' | 'kBias' | 'vBias' | 'qNorm' | 'kNorm' | 'o'
  | 'mlpNorm' | 'gate' | 'up' | 'down'
  | 'qkv' | 'gateUp';

const MODEL_NAMES: Record<ModelTensor, string> = {
  embed: 'model.embed_tokens.weight',
  finalNorm: 'model.norm.weight',
  lmHead: 'lm_head.weight',
};

const LAYER_NAMES: Record<LayerTensor, string> = {
  attnNorm: 'input_layernorm.weight',
  q: 'self_attn.q_proj.weight',
  k: 'self_attn.k_proj.weight',
  v: 'self_attn.v_proj.weight',
  qBias: 'self_attn.q_proj.bias',
  kBias: 'self_attn.k_proj.bias',
  vBias: 'self_attn.v_proj.bias',
  qNorm: 'self_attn.q_norm.weight',
  kNorm: 'self_attn.k_norm.weight',
  o: 'self_attn.o_proj.weight',
  mlpNorm: 'post_attention_layernorm.weight',
  gate: 'mlp.gate_proj.weight',
  up: 'mlp.up_proj.weight',
  down: 'mlp.down_proj.weight',
  qkv: 'self_attn.qkv_proj.weight',
  gateUp: 'mlp.gate_up_proj.weight',
};

/** The HF name of a model-level tensor, or of a layer's tensor at decoder layer `layer` (0-based). */
export function tensorName(kind: ModelTensor): string;
export function tensorName(kind: LayerTensor, layer: number): string;
export function tensorName(kind: ModelTensor | LayerTensor, layer?: number): string {
  if (kind in MODEL_NAMES) return MODEL_NAMES[kind as ModelTensor];
  if (layer === undefined || !Number.isInteger(layer) || layer < 0) throw new Error(`tensorName: ${kind} needs a layer index`);
  return `model.layers.${layer}.${LAYER_NAMES[kind as LayerTensor]}`;
}

/** The tensor that lm_head reads: its own, or the embedding when tied. */
export function lmHeadName(c: Pick<ModelConfig, 'tieWordEmbeddings'>): string {
  return tensorName(c.tieWordEmbeddings ? 'embed' : 'lmHead');
}

/** One decoder layer's checkpoint tensors by role, with the optional ones only when the config has them. */
export interface LayerWeights {
  attnNorm: string;
  q: string;
  k: string;
  v: string;
  /** q/k/v biases (qwen2) */
  bias: { q: string; k: string; v: string } | null;
  /** per-head RMSNorm of q and k (qwen3) */
  qkNorm: { q: string; k: string } | null;
  o: string;
  mlpNorm: string;
  gate: string;
  up: string;
  down: string;
}

export function layerWeights(c: Pick<ModelConfig, 'qkvBias' | 'qkNorm'>, l: number): LayerWeights {
  const n = (kind: LayerTensor) => tensorName(kind, l);
  return {
    attnNorm: n('attnNorm'), q: n('q'), k: n('k'), v: n('v'),
    bias: c.qkvBias ? { q: n('qBias'), k: n('kBias'), v: n('vBias') } : null,
    qkNorm: c.qkNorm ? { q: n('qNorm'), k: n('kNorm') } : null,
    o: n('o'), mlpNorm: n('mlpNorm'), gate: n('gate'), up: n('up'), down: n('down'),
  };
}

/** Whether a checkpoint tensor is an RMSNorm weight (initialised near 1 rather than near 0 by the random writers). */
export function isNormTensor(name: string): boolean {
  if (name === MODEL_NAMES.finalNorm) return true;
  const m = /^model\.layers\.\d+\.(.+)$/.exec(name);
  return !!m && [LAYER_NAMES.attnNorm, LAYER_NAMES.mlpNorm, LAYER_NAMES.qNorm, LAYER_NAMES.kNorm].includes(m[1]!);
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
  m.set(tensorName('embed'), [c.vocabSize, d]);
  for (let i = 0; i < c.numLayers; i++) {
    const w = layerWeights(c, i);
    m.set(w.attnNorm, [d]);
    m.set(w.q, [q, d]);
    m.set(w.k, [kv, d]);
    m.set(w.v, [kv, d]);
    if (w.bias) {
      m.set(w.bias.q, [q]);
      m.set(w.bias.k, [kv]);
      m.set(w.bias.v, [kv]);
    }
    if (w.qkNorm) {
      m.set(w.qkNorm.q, [c.headDim]);
      m.set(w.qkNorm.k, [c.headDim]);
    }
    m.set(w.o, [d, q]);
    m.set(w.mlpNorm, [d]);
    m.set(w.gate, [c.intermediateSize, d]);
    m.set(w.up, [c.intermediateSize, d]);
    m.set(w.down, [d, c.intermediateSize]);
  }
  m.set(tensorName('finalNorm'), [d]);
  if (!c.tieWordEmbeddings) m.set(tensorName('lmHead'), [c.vocabSize, d]);
  return m;
}
