/**
 * The graph's I/O contract: the names of the session's inputs and outputs and their shapes, shared by the graph
 * builder (decoder.ts declares them here) and everything that feeds or reads a session (engine.ts, batch.ts, kv.ts).
 */
import type { ModelConfig } from '../../checkpoint/types.ts';
import type { GraphBuilder } from './onnx/builder.ts';
import { DataType, type DataTypeId } from './onnx/proto.ts';

/** Names of the graph's inputs and outputs (the session contract). */
export const IO = {
  inputIds: 'input_ids', // int64 [B, T]
  inputsEmbeds: 'inputs_embeds', // f32 [B, T, d]: the ids' embedding rows, only when the host looks them up (EngineConfig.embeddings)
  positionIds: 'position_ids', // int64 [B, T]
  attnBias: 'attn_bias', // f32 [B, T, C + T], C = past buffer capacity; 0 = visible, large negative = masked (kv.ts capacityBias)
  attnBiasWindow: 'attn_bias_window', // f32 [B, T, C + T]: attn_bias with the sliding window too; only when a layer has one
  ropeInvFreq: 'rope_inv_freq', // f32 [B, hd/2]: RoPE inverse frequencies per row (rope.ts ropeInvFreq)
  // S row sets, S = 1 (broadcast to every token) or B·T (one per token row; intervene.ts): a set is [L+1, d] row-major
  steer: 'steer', // f32 [S, (L+1)·d]; columns l·d..(l+1)·d−1 are added to hidden[l]
  interveneDir: 'intervene_dir', // f32 [S', (L+1)·d]: unit direction r̂ per layer (zeros = none)
  interveneValue: 'intervene_value', // f32 [S', L+1]: hidden[l]·r̂ is set to value[l] after the steer row is added
  hiddenIndex: 'hidden_index', // int64 [N], flat indices into B*T
  logitsIndex: 'logits_index', // int64 [M]
  pastKey: (l: number) => `past_key.${l}`, // f32 or f16 (kvDType) [B, kvH, C, hd]: the KV buffer (slots beyond the filled ones masked)
  pastValue: (l: number) => `past_value.${l}`,
  hidden: 'hidden', // f32 [L+1, N, d]
  logits: 'logits', // f32 [M, V]
  // f32 or f16 (kvDType) [L·2·B, kvH, T, hd]: every layer's new slots only (the engine writes them into the buffer), stacked in one
  // output (one binding per step instead of 2L): layer l's keys are rows 2l·B .. (2l+1)·B, its values the next B rows
  newKv: 'new_kv',
} as const;

/** Additive mask value for hidden keys (finite, so fully masked pad rows stay finite). */
export const MASKED = -1e9;

/** The graph's input values, declared in `IO` order (shapes as in `IO`). */
export interface GraphInputs {
  ids: string;
  /** the ids' embedding rows fed by the host, or null: the graph gathers them from the table */
  embeds: string | null;
  positions: string;
  attnBias: string;
  /** only when a layer has a sliding window */
  attnBiasWindow: string | null;
  invFreq: string;
  steer: string;
  interveneDir: string;
  interveneValue: string;
  hiddenIndex: string;
  logitsIndex: string;
  /** per layer: the KV buffer */
  past: { k: string; v: string }[];
}

/** `kvType`: the KV buffer's element type (FLOAT, or FLOAT16 for an f16 KV cache); `hostEmbeddings`: declare `inputs_embeds` */
export function declareInputs(g: GraphBuilder, c: ModelConfig, kvType: DataTypeId = DataType.FLOAT, hostEmbeddings = false): GraphInputs {
  const F = DataType.FLOAT;
  const { numLayers: L, hiddenSize: d, numKvHeads: kvH, headDim: hd } = c;
  // one window size for every windowed layer (the config keys give one); the engine feeds its bias when there is one
  const windows = [...new Set(c.attentionWindows.filter((w): w is number => w !== null))];
  if (windows.length > 1) throw new Error(`graph: several sliding-window sizes (${windows.join(', ')})`);
  const bt = ['batch', 'seq'];
  return {
    ids: g.input(IO.inputIds, DataType.INT64, bt),
    embeds: hostEmbeddings ? g.input(IO.inputsEmbeds, F, [...bt, d]) : null,
    positions: g.input(IO.positionIds, DataType.INT64, bt),
    attnBias: g.input(IO.attnBias, F, [...bt, 'total']),
    attnBiasWindow: windows.length ? g.input(IO.attnBiasWindow, F, [...bt, 'total']) : null,
    invFreq: g.input(IO.ropeInvFreq, F, ['batch', hd / 2]),
    steer: g.input(IO.steer, F, ['steer_sets', (L + 1) * d]),
    interveneDir: g.input(IO.interveneDir, F, ['projection_sets', (L + 1) * d]),
    interveneValue: g.input(IO.interveneValue, F, ['projection_sets', L + 1]),
    hiddenIndex: g.input(IO.hiddenIndex, DataType.INT64, ['n_hidden']),
    logitsIndex: g.input(IO.logitsIndex, DataType.INT64, ['n_logits']),
    past: Array.from({ length: L }, (_, l) => ({
      k: g.input(IO.pastKey(l), kvType, ['batch', kvH, 'capacity', hd]),
      v: g.input(IO.pastValue(l), kvType, ['batch', kvH, 'capacity', hd]),
    })),
  };
}

/** Every layer's new K/V slots ([B, kvH, T, hd] each, in layer order: k0, v0, k1, v1, …) as the one `new_kv` output. */
export function outputKv(g: GraphBuilder, c: ModelConfig, kv: string[], kvType: DataTypeId = DataType.FLOAT): void {
  g.output(IO.newKv, g.op('Concat', kv, { axis: 0 }, { name: 'stack_new_kv' }), kvType, ['kv_rows', c.numKvHeads, 'seq', c.headDim]);
}

/** Layer l's keys and values in a step's `new_kv` data (views, no copy); n = B·kvH·T·hd elements per tensor */
export function newKvOf<A extends Float32Array | Uint16Array>(data: A, l: number, n: number): { k: A; v: A } {
  return { k: data.subarray(2 * l * n, (2 * l + 1) * n) as A, v: data.subarray((2 * l + 1) * n, (2 * l + 2) * n) as A };
}

/** The captured hidden states [L+1, N, d] and the logits [M, V]. */
export function outputResults(g: GraphBuilder, c: ModelConfig, hidden: string, logits: string): void {
  g.output(IO.hidden, hidden, DataType.FLOAT, [c.numLayers + 1, 'n_hidden', c.hiddenSize]);
  g.output(IO.logits, logits, DataType.FLOAT, ['n_logits', c.vocabSize]);
}
