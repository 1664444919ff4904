/**
 * The decoder as an ONNX graph, built from a checkpoint's config and tensor index. Reads top to bottom like
 * nanoGPT's model.py:
 *
 *   x = embed(ids)                                   hidden[0] (+ steer[0])
 *   for each block l:
 *     h = rmsnorm(x);  q, k, v = h Wqᵀ (+b), h Wkᵀ (+b), h Wvᵀ (+b)
 *     (qwen3) q, k = rmsnorm per head
 *     q, k = rope(q), rope(k)                        rotate_half form, positions and inv_freq per row from the
 *                                                    caller (dynamic NTK depends on the row's length), cos/sin
 *                                                    × yarn's attention factor
 *     k_new, v_new                                   → graph outputs new_key.l / new_value.l (T slots)
 *     x += o_proj(softmax([q Kbufᵀ, q k_newᵀ]/√hd + bias) [Vbuf; v_new])
 *                                                    Kbuf/Vbuf = the KV buffer fed as past (kv.ts), GQA by
 *                                                    KV head h // rep (no K/V repetition), softmax in f32;
 *                                                    bias = attn_bias, or attn_bias_window on sliding-window layers
 *     x += down(silu(gate(h')) * up(h')) + steer[l+1],  h' = rmsnorm(x)      steer row as the Gemm bias
 *                                                    → hidden[l+1] (pre final norm, also for l+1 = L)
 *   logits = rmsnorm(x[logits_index]) lm_headᵀ
 *
 * Tokens are flattened to 2-D [B*T, d] so every linear layer is one Gemm(transB=1) straight on the HF [out, in]
 * weight (no transposed copy). Weights are external data pointing into the .safetensors byte ranges; non-f32
 * storage (and `dtype: 'bf16'` rounding of f32 weights) is a Cast in the graph, which onnxruntime folds once at
 * session creation.
 */
import { basename } from 'node:path';
import { ropeAttentionScaling } from '../checkpoint/rope.ts';
import type { Checkpoint, DType, TensorEntry } from '../checkpoint/types.ts';
import { GraphBuilder } from './onnx/builder.ts';
import { DataType, type DataTypeId } from './onnx/proto.ts';
import { castStored, linearAs, linearType, type ComputeDType, type LinearType } from './precision.ts';
import type { QuantStore } from './quant-store.ts';

export type { ComputeDType } from './precision.ts';

export const isQuantized = (dtype: ComputeDType): dtype is 'q8' | 'q4' => dtype === 'q8' || dtype === 'q4';

/**
 * MatMulNBits accuracy level: 0 = f32 activations × dequantized weights, 4 = int8 activations (blockwise-quantized
 * activations, integer dot products: the fast kernels, and what llama.cpp's q4_0/q8_0 do). 4 for both widths, as
 * measured (SmolLM2 shape, 1 thread, A/B in one process): q4 decode 1.4–1.8× faster than level 0 (e.g. 79.9 vs 58.6
 * tok/s by CPU time under load 5.9) with the same hidden-state error vs f32 (worst layer, random llama/qwen2: rel
 * 0.2138 vs 0.2142, 0.2754 vs 0.2753 — the int8 activation rounding is far below the 4-bit weight error); 8-bit at
 * level 0 has no fast kernel here (decode 1.2 vs 57 tok/s). SAFEKEEP_QUANT_ACCURACY overrides.
 */
export function quantAccuracyLevel(bits: 4 | 8): number {
  const v = process.env.SAFEKEEP_QUANT_ACCURACY;
  if (v !== undefined && ['0', '1', '2', '3', '4'].includes(v)) return Number(v);
  void bits;
  return 4;
}

/** Names of the graph's inputs and outputs (the session contract). */
export const IO = {
  inputIds: 'input_ids', // int64 [B, T]
  positionIds: 'position_ids', // int64 [B, T]
  attnBias: 'attn_bias', // f32 [B, T, C + T], C = past buffer capacity; 0 = visible, large negative = masked (kv.ts capacityBias)
  attnBiasWindow: 'attn_bias_window', // f32 [B, T, C + T]: attn_bias with the sliding window too; only when a layer has one
  ropeInvFreq: 'rope_inv_freq', // f32 [B, hd/2]: RoPE inverse frequencies per row (rope.ts ropeInvFreq)
  steer: 'steer', // f32 [L+1, d]; row l is added to hidden[l]
  hiddenIndex: 'hidden_index', // int64 [N], flat indices into B*T
  logitsIndex: 'logits_index', // int64 [M]
  pastKey: (l: number) => `past_key.${l}`, // f32 [B, kvH, C, hd]: the KV buffer (slots beyond the filled ones masked)
  pastValue: (l: number) => `past_value.${l}`,
  hidden: 'hidden', // f32 [L+1, N, d]
  logits: 'logits', // f32 [M, V]
  newKey: (l: number) => `new_key.${l}`, // f32 [B, kvH, T, hd]: the new slots only (the engine writes them into the buffer)
  newValue: (l: number) => `new_value.${l}`,
} as const;

/** Additive mask value for hidden keys (finite, so fully masked pad rows stay finite). */
export const MASKED = -1e9;

/**
 * Attention kernel. Steps on a past KV buffer (decode, prefix suffixes, chunked prefill) always run standard ops on
 * the buffer (`bufferedAttention`: no K/V concatenation or per-head repetition). A step from an empty cache (prefill)
 * runs onnxruntime's fused MultiHeadAttention with 'mha' (default; measured ~1.2× prefill over standard ops on the
 * SmolLM2 shape) or the same standard ops with 'matmul'. Both are tested against HF and the oracle;
 * SAFEKEEP_ATTENTION=matmul|mha overrides.
 */
export function attentionImpl(explicit?: AttentionImpl): AttentionImpl {
  if (explicit) return explicit;
  return process.env.SAFEKEEP_ATTENTION === 'matmul' ? 'matmul' : 'mha';
}

const STORAGE: Record<DType, DataTypeId> = { F32: DataType.FLOAT, BF16: DataType.BFLOAT16, F16: DataType.FLOAT16 };

export interface BuiltGraph {
  bytes: Uint8Array;
  /** folder that the external-data locations are relative to */
  weightsDir: string;
}

export type AttentionImpl = 'matmul' | 'mha';

/**
 * Build the graph. `weightsDir` is the one folder that holds every (real, symlink-resolved) weight file; each
 * entry's location is its basename there. `fuseLinears`: q/k/v and gate/up as one Gemm each (see `linears`).
 */
export function buildModelGraph(ckpt: Checkpoint, dtype: ComputeDType, realFiles: Map<string, string>, weightsDir: string,
  attention: AttentionImpl = attentionImpl(), fuseLinears = false, quant?: QuantStore): BuiltGraph {
  if (isQuantized(dtype) && !quant) throw new Error(`graph: dtype ${dtype} needs the quantized weights`);
  const c = ckpt.config;
  const L = c.numLayers;
  const d = c.hiddenSize;
  const H = c.numHeads;
  const kvH = c.numKvHeads;
  const hd = c.headDim;
  const rep = H / kvH;
  const g = new GraphBuilder();
  const F = DataType.FLOAT;

  // ---- inputs
  const ids = g.input(IO.inputIds, DataType.INT64, ['batch', 'seq']);
  const positions = g.input(IO.positionIds, DataType.INT64, ['batch', 'seq']);
  const attnBias = g.input(IO.attnBias, F, ['batch', 'seq', 'total']);
  // one window size for every windowed layer (the config keys give one); the engine feeds its bias when there is one
  const windows = [...new Set(c.attentionWindows.filter((w): w is number => w !== null))];
  if (windows.length > 1) throw new Error(`graph: several sliding-window sizes (${windows.join(', ')})`);
  const attnBiasWindow = windows.length ? g.input(IO.attnBiasWindow, F, ['batch', 'seq', 'total']) : null;
  const invFreqIn = g.input(IO.ropeInvFreq, F, ['batch', hd / 2]);
  const steer = g.input(IO.steer, F, [L + 1, d]);
  const hiddenIndex = g.input(IO.hiddenIndex, DataType.INT64, ['n_hidden']);
  const logitsIndex = g.input(IO.logitsIndex, DataType.INT64, ['n_logits']);
  const past: { k: string; v: string }[] = [];
  for (let l = 0; l < L; l++) {
    past.push({
      k: g.input(IO.pastKey(l), F, ['batch', kvH, 'capacity', hd]),
      v: g.input(IO.pastValue(l), F, ['batch', kvH, 'capacity', hd]),
    });
  }

  // ---- weights: external data into the safetensors files; f32 in the graph
  /** the stored tensor as an external initializer (a fresh one per call: distinct consumers can map the same bytes) */
  const stored = (name: string): { init: string; entry: TensorEntry } => {
    const e: TensorEntry | undefined = ckpt.tensors.get(name);
    if (!e) throw new Error(`graph: checkpoint has no tensor ${name}`);
    if (quant) {
      // every tensor the graph reads is in the quantized store's one file
      const t = quant.index.tensors[name];
      if (!t) throw new Error(`graph: quantized store has no tensor ${name}`);
      const init = g.initializer({ dataType: STORAGE[e.dtype], dims: e.shape, external: { location: basename(quant.file), offset: t.offset, length: t.length } }, name);
      return { init, entry: e };
    }
    const real = realFiles.get(e.file);
    if (!real) throw new Error(`graph: no resolved path for ${e.file}`);
    const init = g.initializer(
      { dataType: STORAGE[e.dtype], dims: e.shape, external: { location: basename(real), offset: e.offset, length: e.byteLength } },
      name,
    );
    return { init, entry: e };
  };
  /** storage → f32 as the compute dtype asks (BF16/F16 upcast exactly; --dtype bf16 rounds f32/f16 to bf16) */
  const toF32 = (x: string, storage: DType, name: string): string => castStored(g, x, storage, 'f32', name, dtype === 'bf16');
  /** element type of linear weights and their inputs (precision.ts): f32, or 16-bit for f16 / bf16w */
  const lt: LinearType = quant ? 'f32' : linearType(dtype);
  const weightCache = new Map<string, string>();
  /**
   * a weight as f32 (norms, biases) or, `linear`, in the linear type; the Casts on initializers are folded once by
   * onnxruntime
   */
  const weight = (name: string, linear = false): string => {
    const t: LinearType = linear ? lt : 'f32';
    const key = `${t}:${name}`;
    const hit = weightCache.get(key);
    if (hit) return hit;
    const { init, entry } = stored(name);
    const w = t === 'f32' ? toF32(init, entry.dtype, name) : castStored(g, init, entry.dtype, t, name);
    weightCache.set(key, w);
    return w;
  };

  const rmsnorm = (x: string, w: string): string =>
    g.op('SimplifiedLayerNormalization', [x, weight(w)], { axis: -1, epsilon: { float: c.rmsNormEps }, stash_type: 1 }, { name: 'rmsnorm' });
  /** x [M, K] · Wᵀ for a quantized weight `name` of the store (quant-store.ts) → [M, N] */
  const qmatmul = (x: string, name: string): string => {
    const q = quant!;
    const ext = (suffix: string, dataType: DataTypeId): string => {
      const t = q.index.tensors[`${name}.${suffix}`];
      if (!t) throw new Error(`graph: quantized store has no ${name}.${suffix}`);
      return g.initializer({ dataType, dims: t.shape, external: { location: basename(q.file), offset: t.offset, length: t.length } }, `${name}.${suffix}`);
    };
    const [N, K] = q.index.linears[name] ?? [0, 0];
    const inputs = [x, ext('codes', DataType.UINT8), ext('scales', F)];
    if (q.index.scheme === 'asym') inputs.push(ext('zp', DataType.UINT8));
    return g.op('MatMulNBits', inputs, { K, N, bits: q.index.bits, block_size: q.index.block, accuracy_level: quantAccuracyLevel(q.index.bits) },
      { domain: 'com.microsoft', name: name.split('.').slice(-2, -1)[0] ?? 'qlinear' });
  };
  const linear = (x: string, w: string, bias?: string): string => {
    if (quant) {
      const y = qmatmul(x, w);
      return bias ? g.op('Add', [y, weight(bias)]) : y;
    }
    return linearAs(g, x, weight(w, true), lt, w.split('.').slice(-2, -1)[0] ?? 'linear', bias ? weight(bias) : undefined);
  };
  /**
   * Several linear layers on the same input. With `fuseLinears` their weights are concatenated in the graph (folded
   * by onnxruntime into one pre-packed weight) and run as one wider Gemm, then split.
   */
  const linears = (x: string, ws: string[], biases: string[] | undefined, widths: number[], quantName: string): string[] => {
    if (quant) {
      // the store holds the row-concatenated weight: one MatMulNBits, then split
      let y = qmatmul(x, quantName);
      if (biases) y = g.op('Add', [y, g.op('Concat', biases.map((n) => weight(n)), { axis: 0 }, { name: 'fused_bias' })]);
      return g.opN('Split', [y, g.i64(widths)], { axis: 1 }, { outputs: ws.length, name: 'split' });
    }
    if (!fuseLinears) return ws.map((w, i) => linear(x, w, biases?.[i]));
    const W = g.op('Concat', ws.map((w) => weight(w, true)), { axis: 0 }, { name: 'fused_weight' });
    const b = biases ? g.op('Concat', biases.map((n) => weight(n)), { axis: 0 }, { name: 'fused_bias' }) : undefined;
    const y = linearAs(g, x, W, lt, 'fused_linear', b);
    return g.opN('Split', [y, g.i64(widths)], { axis: 1 }, { outputs: ws.length, name: 'split' });
  };

  // ---- shapes
  const shapeBT = g.op('Shape', [ids], {}, { name: 'shape_bt' }); // [B, T]
  const heads4 = (n: number) => g.op('Concat', [shapeBT, g.i64([n, hd])], { axis: 0 }, { name: `shape_bt_${n}_hd` });
  const shapeQ = heads4(H);
  const shapeKV = heads4(kvH);

  // ---- RoPE tables: cos/sin [B, T, 1, hd]
  const attentionScaling = ropeAttentionScaling(c.rope);
  const [cos, sin] = g.scope('rope', () => {
    const pos = g.op('Unsqueeze', [g.op('Cast', [positions], { to: F }), g.i64([-1])]); // [B, T, 1]
    const freqs = g.op('Mul', [pos, g.op('Unsqueeze', [invFreqIn, g.i64([1])])]); // [B, T, hd/2]
    const emb = g.op('Unsqueeze', [g.op('Concat', [freqs, freqs], { axis: -1 }), g.i64([2])]); // [B, T, 1, hd]
    if (attentionScaling === 1) return [g.op('Cos', [emb]), g.op('Sin', [emb])] as const;
    // transformers: cos = emb.cos() * attention_scaling (likewise sin), in f32
    const s = g.f32([attentionScaling], []);
    return [g.op('Mul', [g.op('Cos', [emb]), s]), g.op('Mul', [g.op('Sin', [emb]), s])] as const;
  });
  /** x·cos + rotate_half(x)·sin, x: [B, T, heads, hd] */
  const rope = (x: string): string => {
    const [x1, x2] = g.opN('Split', [x], { axis: -1 }, { outputs: 2 });
    const rotated = g.op('Concat', [g.op('Neg', [x2!]), x1!], { axis: -1 }, { name: 'rotate_half' });
    return g.op('Add', [g.op('Mul', [x, cos]), g.op('Mul', [rotated, sin])], {}, { name: 'rope' });
  };

  // the bias repeated for the rep query heads of a KV head and expanded once to the score shape [B, kvH, rep·T, S]
  // (a broadcasting Add per layer measured ~20 % of a 512-token prefill; the same-shape Add is a plain streaming add)
  const biasRepNames = new Map<string, string>();
  const biasRep = (bias: string): string => {
    const hit = biasRepNames.get(bias);
    if (hit) return hit;
    const tiled = g.op('Unsqueeze', [g.op('Tile', [bias, g.i64([1, rep, 1])]), g.i64([1])]); // [B, 1, rep·T, S]
    const out = g.op('Expand', [tiled, g.i64([1, kvH, 1, 1])], {}, { name: 'attn_bias_rep' });
    biasRepNames.set(bias, out);
    return out;
  };
  const bias4Names = new Map<string, string>();
  const bias4 = (bias: string): string => { // [B, 1, T, S]
    const hit = bias4Names.get(bias);
    if (hit) return hit;
    const out = g.op('Unsqueeze', [bias, g.i64([1])], {}, { name: 'attn_bias4' });
    bias4Names.set(bias, out);
    return out;
  };
  const scale = (): string => g.f32([1 / Math.sqrt(hd)], []);

  const captured: string[] = [];
  const capture = (x: string): void => {
    captured.push(g.op('Unsqueeze', [g.op('Gather', [x, hiddenIndex], { axis: 0 }), g.i64([0])], {}, { name: 'capture' }));
  };
  const steerRow = (l: number): string => g.op('Gather', [steer, g.i64([l], [])], { axis: 0 }, { name: 'steer_row' }); // [d]
  const addSteer = (x: string, l: number): string => g.op('Add', [x, steerRow(l)], {}, { name: 'steered' });

  /** GQA with onnxruntime's fused MultiHeadAttention: K/V repeated per query head, the bias added inside. → [BT, H·hd] */
  const mhaAttention = (q: string, K: string, V: string, bias: string): string => {
    const perHead = (t: string) => (rep === 1 ? t : g.op('Reshape', [
      g.op('Expand', [g.op('Unsqueeze', [t, g.i64([2])]), g.i64([1, 1, rep, 1, 1])]), g.i64([0, H, -1, hd])]));
    const attn = g.op('MultiHeadAttention', [g.op('Reshape', [q, g.i64([0, 0, H * hd])]), perHead(K), perHead(V), '', '', bias4(bias)],
      { num_heads: H, scale: { float: 1 / Math.sqrt(hd) } }, { domain: 'com.microsoft', name: 'mha' }); // [B, T, H·hd]
    return g.op('Reshape', [attn, g.i64([-1, H * hd])]);
  };
  /**
   * Attention on the KV buffer plus the T new slots, without concatenating them (kv.ts): q as [B, kvH, rep·T, hd]
   * (query head h = kv·rep + r uses KV head kv; K/V never repeated) scored against the buffer [B, kvH, C, hd] and
   * the new keys [B, kvH, T, hd]; one f32 softmax over the C + T scores (bias masks unused capacity, padding and the
   * future); probabilities split back at C for the two value products. → [BT, H·hd]
   */
  const bufferedAttention = (q: string, kNew: string, vNew: string, kBuf: string, vBuf: string, bias: string): string => {
    const q4 = g.op('Reshape', [g.op('Transpose', [g.op('Mul', [q, scale()], {}, { name: 'q_scaled' })], { perm: [0, 2, 1, 3] }), g.i64([0, kvH, -1, hd])]);
    const keysT = (k: string) => g.op('Transpose', [k], { perm: [0, 1, 3, 2] });
    const sBuf = g.op('MatMul', [q4, keysT(kBuf)], {}, { name: 'scores_buffer' }); // [B, kvH, rep·T, C]
    const sNew = g.op('MatMul', [q4, keysT(kNew)], {}, { name: 'scores_new' }); // [B, kvH, rep·T, T]
    const scores = g.op('Add', [g.op('Concat', [sBuf, sNew], { axis: -1 }), biasRep(bias)], {}, { name: 'scores' });
    const probs = g.op('Softmax', [scores], { axis: -1 }, { name: 'probs' }); // [B, kvH, rep·T, C + T]
    const C = g.op('Slice', [g.op('Shape', [kBuf]), g.i64([2]), g.i64([3])], {}, { name: 'capacity' }); // [1]
    const pBuf = g.op('Slice', [probs, g.i64([0]), C, g.i64([3])], {}, { name: 'probs_buffer' });
    const pNew = g.op('Slice', [probs, C, g.i64([Number.MAX_SAFE_INTEGER]), g.i64([3])], {}, { name: 'probs_new' });
    const o = g.op('Add', [g.op('MatMul', [pBuf, vBuf]), g.op('MatMul', [pNew, vNew])], {}, { name: 'attn' }); // [B, kvH, rep·T, hd]
    return g.op('Reshape', [
      g.op('Transpose', [g.op('Reshape', [o, g.i64([0, H, -1, hd])])], { perm: [0, 2, 1, 3] }),
      g.i64([-1, H * hd]),
    ]);
  };

  /**
   * 'matmul': always `bufferedAttention`. 'mha': an If on the buffer capacity — empty (a prefill from no cache) runs
   * the fused MultiHeadAttention on the new slots (fastest for long T), otherwise `bufferedAttention` (decode and
   * steps on a past). The bias helpers are made in the main graph first (both branches and every layer read them).
   */
  let noPast: string | null = null;
  const attend = (q: string, kNew: string, vNew: string, kBuf: string, vBuf: string, bias: string): string => {
    if (attention === 'matmul') return bufferedAttention(q, kNew, vNew, kBuf, vBuf, bias);
    biasRep(bias);
    bias4(bias);
    noPast ??= g.op('Equal', [g.op('Slice', [g.op('Shape', [past[0]!.k]), g.i64([2]), g.i64([3])]), g.i64([0])], {}, { name: 'no_past' }); // [1] bool
    const out = (v: string) => [{ name: v, elemType: F, dims: ['bt', H * hd] }];
    const prefill = g.subgraph('prefill_attention', () => out(mhaAttention(q, kNew, vNew, bias)));
    const buffered = g.subgraph('buffered_attention', () => out(bufferedAttention(q, kNew, vNew, kBuf, vBuf, bias)));
    return g.op('If', [noPast], { then_branch: { graph: prefill }, else_branch: { graph: buffered } }, { name: 'attention' });
  };

  // ---- embeddings
  let x = g.scope('embed', () => {
    // rows gathered from their own mapping of the stored bytes, converted after the gather: only the rows used are
    // read, and a tied lm_head's folded/pre-packed copy does not keep a second full copy resident
    const { init, entry } = stored('model.embed_tokens.weight');
    const e = toF32(g.op('Gather', [init, ids], { axis: 0 }), entry.dtype, 'embed_rows'); // [B, T, d]
    return addSteer(g.op('Reshape', [e, g.i64([-1, d])]), 0); // [BT, d]
  });
  capture(x);

  // ---- decoder blocks
  for (let l = 0; l < L; l++) {
    const p = `model.layers.${l}.`;
    x = g.scope(`layers.${l}`, () => {
      // attention
      const h = rmsnorm(x, `${p}input_layernorm.weight`);
      const bias = (n: string) => (c.qkvBias ? `${p}self_attn.${n}_proj.bias` : undefined);
      const [qf, kf, vf] = linears(h, ['q', 'k', 'v'].map((n) => `${p}self_attn.${n}_proj.weight`), c.qkvBias ? ['q', 'k', 'v'].map((n) => bias(n)!) : undefined,
        [H * hd, kvH * hd, kvH * hd], `${p}self_attn.qkv_proj.weight`);
      let q = g.op('Reshape', [qf!, shapeQ]); // [B, T, H, hd]
      let k = g.op('Reshape', [kf!, shapeKV]); // [B, T, kvH, hd]
      const v = g.op('Reshape', [vf!, shapeKV]);
      if (c.qkNorm) {
        q = rmsnorm(q, `${p}self_attn.q_norm.weight`);
        k = rmsnorm(k, `${p}self_attn.k_norm.weight`);
      }
      q = rope(q);
      k = rope(k);
      const toHeads = (t: string) => g.op('Transpose', [t], { perm: [0, 2, 1, 3] }); // [B, heads, T, hd]
      const kNew = toHeads(k); // [B, kvH, T, hd]
      const vNew = toHeads(v);
      g.output(IO.newKey(l), kNew, F, ['batch', kvH, 'seq', hd]);
      g.output(IO.newValue(l), vNew, F, ['batch', kvH, 'seq', hd]);
      const layerBias = c.attentionWindows[l] !== null ? attnBiasWindow! : attnBias;
      const merged = attend(q, kNew, vNew, past[l]!.k, past[l]!.v, layerBias); // [BT, H·hd]
      let r = g.op('Add', [x, linear(merged, `${p}self_attn.o_proj.weight`)], {}, { name: 'resid_attn' });
      // MLP
      const h2 = rmsnorm(r, `${p}post_attention_layernorm.weight`);
      const [gate, up] = linears(h2, [`${p}mlp.gate_proj.weight`, `${p}mlp.up_proj.weight`], undefined, [c.intermediateSize, c.intermediateSize], `${p}mlp.gate_up_proj.weight`);
      const act = g.op('Mul', [g.op('Mul', [gate!, g.op('Sigmoid', [gate!])], {}, { name: 'silu' }), up!]);
      // steering row l+1 rides in the down projection's Gemm bias (C), so an unused (zero) steer costs nothing extra:
      // hidden[l+1] = r + (down(act) + steer[l+1])
      const down = quant
        ? g.op('Add', [qmatmul(act, `${p}mlp.down_proj.weight`), steerRow(l + 1)], {}, { name: 'down_proj_steered' })
        : linearAs(g, act, weight(`${p}mlp.down_proj.weight`, true), lt, 'down_proj_steered', steerRow(l + 1));
      return g.op('Add', [r, down], {}, { name: 'resid_mlp' });
    });
    capture(x);
  }

  // ---- outputs
  g.output(IO.hidden, g.op('Concat', captured, { axis: 0 }, { name: 'hidden_all' }), F, [L + 1, 'n_hidden', d]);
  const logits = g.scope('head', () => {
    const sel = rmsnorm(g.op('Gather', [x, logitsIndex], { axis: 0 }), 'model.norm.weight'); // [M, d]
    if (quant) return qmatmul(sel, 'lm_head.weight');
    return linearAs(g, sel, weight(c.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight', true), lt, 'lm_head');
  });
  g.output(IO.logits, logits, F, ['n_logits', c.vocabSize]);
  return { bytes: g.encode('safekeep-decoder'), weightsDir };
}
