/**
 * Small seeded random checkpoints in Hugging Face format, for tests and benchmarks (no weights can be downloaded).
 * Written like the fixtures in ../shared/fixtures/hf-reference: config.json as transformers (4.51) writes it for the
 * family, generation_config.json, model.safetensors (or shards + index). Weights: linear weights, biases and
 * embeddings N(0, std²) (std 0.1), every RMSNorm weight 1 + std·N(0, 1), drawn in sorted tensor-name order from
 * the one seeded generator (util/rng.ts).
 */
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { FAMILIES, parseModelConfig } from './config.ts';
import { expectedTensors, isNormTensor } from './tensors.ts';
import { f32ToBf16Bits, f32ToF16Bits } from './dtype.ts';
import { writeSafetensors, writeSafetensorsStreamed, type TensorToWrite } from './safetensors.ts';
import { writeJsonAtomic } from '../util/atomic.ts';
import { makeRng } from '../util/rng.ts';
import type { DType, Family } from './types.ts';

interface Llama3RopeScalingOptions {
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositionEmbeddings: number;
}

export interface RandomCheckpointOptions {
  seed?: number;
  /** storage dtype (default F32); BF16/F16 are round-to-nearest-even of the f32 draws */
  dtype?: DType;
  numLayers?: number;
  hiddenSize?: number;
  numHeads?: number;
  numKvHeads?: number;
  /** default hidden/heads */
  headDim?: number;
  intermediateSize?: number;
  vocabSize?: number;
  tieWordEmbeddings?: boolean;
  ropeTheta?: number;
  rmsNormEps?: number;
  /** llama3 RoPE scaling (llama only); null = none. Default for llama: factor 8, low 1, high 4, original 64 */
  ropeScaling?: Llama3RopeScalingOptions | null;
  maxPositionEmbeddings?: number;
  bosTokenId?: number;
  /** written to generation_config.json (and config.json) */
  eosTokenId?: number | number[];
  /** write N shards + model.safetensors.index.json instead of one model.safetensors (default 1) */
  shards?: number;
  /** standard deviation of the weights (default 0.1) */
  std?: number;
  /**
   * config.json keys to set on top of the family's (e.g. `rope_parameters`, `sliding_window`); a key set to null
   * is written as null, `undefined` removes the key
   */
  config?: Record<string, unknown>;
}

/** Family defaults, as in the fixture table (hf-reference README). */
const FAMILY_DEFAULTS: Record<Family, { ropeTheta: number; rmsNormEps: number; tie: boolean }> = {
  llama: { ropeTheta: 500000, rmsNormEps: 1e-5, tie: false },
  mistral: { ropeTheta: 1000000, rmsNormEps: 1e-6, tie: false },
  qwen2: { ropeTheta: 10000, rmsNormEps: 1e-6, tie: true },
  qwen3: { ropeTheta: 1000000, rmsNormEps: 1e-6, tie: true },
};

/** config.json as transformers' `save_pretrained` writes it for the family (v4.51 key set). */
function hfConfig(family: Family, o: Required<Omit<RandomCheckpointOptions, 'seed' | 'dtype' | 'shards' | 'std' | 'ropeScaling' | 'config'>> & { ropeScaling: Llama3RopeScalingOptions | null }, dtype: DType): Record<string, unknown> {
  const torchDtype = dtype === 'F32' ? 'float32' : dtype === 'BF16' ? 'bfloat16' : 'float16';
  const common: Record<string, unknown> = {
    architectures: [FAMILIES[family].architecture],
    attention_dropout: 0.0,
    bos_token_id: o.bosTokenId,
    eos_token_id: o.eosTokenId,
    hidden_act: 'silu',
    hidden_size: o.hiddenSize,
    initializer_range: 0.02,
    intermediate_size: o.intermediateSize,
    max_position_embeddings: o.maxPositionEmbeddings,
    model_type: family,
    num_attention_heads: o.numHeads,
    num_hidden_layers: o.numLayers,
    num_key_value_heads: o.numKvHeads,
    rms_norm_eps: o.rmsNormEps,
    rope_theta: o.ropeTheta,
    tie_word_embeddings: o.tieWordEmbeddings,
    torch_dtype: torchDtype,
    transformers_version: '4.51.0',
    use_cache: true,
    vocab_size: o.vocabSize,
  };
  const rope = o.ropeScaling === null ? null : {
    factor: o.ropeScaling.factor,
    high_freq_factor: o.ropeScaling.highFreqFactor,
    low_freq_factor: o.ropeScaling.lowFreqFactor,
    original_max_position_embeddings: o.ropeScaling.originalMaxPositionEmbeddings,
    rope_type: 'llama3',
  };
  let c: Record<string, unknown>;
  switch (family) {
    case 'llama':
      c = { ...common, attention_bias: false, head_dim: o.headDim, mlp_bias: false, pretraining_tp: 1, rope_scaling: rope };
      break;
    case 'mistral':
      c = { ...common, head_dim: o.headDim, sliding_window: null };
      break;
    case 'qwen2':
      c = { ...common, max_window_layers: 28, rope_scaling: null, sliding_window: 4096, use_sliding_window: false };
      break;
    case 'qwen3':
      c = { ...common, attention_bias: false, head_dim: o.headDim, max_window_layers: 28, rope_scaling: null, sliding_window: null, use_sliding_window: false };
      break;
  }
  return Object.fromEntries(Object.entries(c).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}


/**
 * Writes a random `family` checkpoint into `dir` (created if needed). Small defaults like the fixtures: hidden 64,
 * 4 heads, 2 KV heads, head_dim 16, intermediate 128, vocab 512, 4 layers, bos 1, eos 2. Returns the absolute folder.
 */
export async function writeRandomCheckpoint(dirIn: string, family: Family, opts: RandomCheckpointOptions = {}): Promise<string> {
  if (!(family in FAMILIES)) throw new SafekeepError(`unknown family ${String(family)} (supported: ${Object.keys(FAMILIES).join(', ')})`);
  const dir = resolve(dirIn);
  mkdirSync(dir, { recursive: true });
  const fam = FAMILY_DEFAULTS[family];
  const hiddenSize = opts.hiddenSize ?? 64;
  const numHeads = opts.numHeads ?? 4;
  const headDim = opts.headDim ?? hiddenSize / numHeads;
  if (!Number.isInteger(headDim)) throw new SafekeepError(`random checkpoint: hidden ${hiddenSize} not divisible by ${numHeads} heads; pass headDim`);
  if (family === 'qwen2' && headDim * numHeads !== hiddenSize) throw new SafekeepError('random checkpoint: qwen2 configs have no head_dim; headDim must be hidden/heads');
  const ropeScaling = opts.ropeScaling !== undefined ? opts.ropeScaling
    : family === 'llama' ? { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 } : null;
  if (ropeScaling !== null && family !== 'llama') throw new SafekeepError('random checkpoint: llama3 rope scaling only for llama');
  const dtype = opts.dtype ?? 'F32';
  const o = {
    numLayers: opts.numLayers ?? 4,
    hiddenSize,
    numHeads,
    numKvHeads: opts.numKvHeads ?? (opts.numHeads === undefined ? 2 : numHeads),
    headDim,
    intermediateSize: opts.intermediateSize ?? 128,
    vocabSize: opts.vocabSize ?? 512,
    tieWordEmbeddings: opts.tieWordEmbeddings ?? fam.tie,
    ropeTheta: opts.ropeTheta ?? fam.ropeTheta,
    rmsNormEps: opts.rmsNormEps ?? fam.rmsNormEps,
    ropeScaling,
    maxPositionEmbeddings: opts.maxPositionEmbeddings ?? 2048,
    bosTokenId: opts.bosTokenId ?? 1,
    eosTokenId: opts.eosTokenId ?? 2,
  };
  const config = hfConfig(family, o, dtype);
  for (const [k, v] of Object.entries(opts.config ?? {})) {
    if (v === undefined) delete config[k];
    else config[k] = v;
  }
  const gen = { _from_model_config: true, bos_token_id: o.bosTokenId, eos_token_id: o.eosTokenId, transformers_version: '4.51.0' };
  const parsed = parseModelConfig(config, gen);

  const rng = makeRng(opts.seed ?? 0);
  const std = opts.std ?? 0.1;
  const expected = expectedTensors(parsed);
  const names = [...expected.keys()].sort();
  /** the next tensor of the sorted-name sequence, drawn from the one RNG stream */
  const draw = (name: string): TensorToWrite => {
    const shape = expected.get(name)!;
    const n = shape.reduce((a, b) => a * b, 1);
    const v = new Float32Array(n);
    if (isNormTensor(name)) for (let i = 0; i < n; i++) v[i] = 1 + std * rng.normal();
    else for (let i = 0; i < n; i++) v[i] = std * rng.normal();
    const data = dtype === 'F32' ? v : dtype === 'BF16' ? f32ToBf16Bits(v) : f32ToF16Bits(v);
    return { dtype, shape, data };
  };

  const shards = Math.max(1, Math.floor(opts.shards ?? 1));
  if (shards === 1) {
    // streamed: one tensor in memory at a time (an 8B-shaped checkpoint is 16 GB at BF16)
    const specs = Object.fromEntries(names.map((name) => [name, { dtype, shape: expected.get(name)! }]));
    writeSafetensorsStreamed(join(dir, 'model.safetensors'), specs, (name) => draw(name).data, { format: 'pt' });
  } else {
    const tensors: Record<string, TensorToWrite> = {};
    for (const name of names) tensors[name] = draw(name);
    const weightMap: Record<string, string> = {};
    let total = 0;
    for (let s = 0; s < shards; s++) {
      const file = `model-${String(s + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
      const part: Record<string, TensorToWrite> = {};
      names.forEach((name, i) => {
        if (i % shards !== s) return;
        part[name] = tensors[name]!;
        weightMap[name] = file;
        total += tensors[name]!.data.byteLength;
      });
      writeSafetensors(join(dir, file), part, { format: 'pt' });
    }
    writeJsonAtomic(join(dir, 'model.safetensors.index.json'), { metadata: { total_size: total }, weight_map: weightMap });
  }
  writeJsonAtomic(join(dir, 'generation_config.json'), gen);
  writeJsonAtomic(join(dir, 'config.json'), config);
  return dir;
}
