/**
 * The decoder as an ONNX graph, built from a checkpoint's config and tensor index. Reads top to bottom like
 * nanoGPT's model.py:
 *
 *   x = embed(ids)                                   hidden[0] (+ steer[0]); the rows fed as inputs_embeds when
 *                                                    the host looks them up (EngineConfig.embeddings)
 *   for each block l:
 *     h = rmsnorm(x);  q, k, v = h Wqᵀ (+b), h Wkᵀ (+b), h Wvᵀ (+b)
 *     (qwen3) q, k = rmsnorm per head
 *     q, k = rope(q), rope(k)                        rotate_half form, positions and inv_freq per row from the
 *                                                    caller (dynamic NTK depends on the row's length), cos/sin
 *                                                    × yarn's attention factor
 *     k_new, v_new                                   → graph output new_kv (every layer's T new slots)
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
import { ropeAttentionScaling } from '../../checkpoint/rope.ts';
import { layerWeights, tensorName } from '../../checkpoint/tensors.ts';
import type { Checkpoint, ModelConfig } from '../../checkpoint/types.ts';
import type { EngineConfig } from './config.ts';
import type { QuantStore } from './quant-index.ts';
import { attention, type Attend, type AttendWithPattern } from './attention.ts';
import { hiddenCapture } from './capture.ts';
import { hookPoints, type HookPoints } from './hook-edit.ts';
import { NO_HOOKS, type HookSelection } from './hooks.ts';
import { addSteer, interventionRows, projectTo, type InterventionRows } from './intervene.ts';
import { declareInputs, outputKv, outputResults, type GraphInputs } from './io.ts';
import { swigluMlp } from './mlp.ts';
import { addRmsnorm, rmsnorm } from './norm.ts';
import { GraphBuilder } from './onnx/builder.ts';
import { DataType } from './onnx/proto.ts';
import { isQuantized } from './precision.ts';
import { rope, ropeTables, type RopeTables } from './rope.ts';
import { checkpointWeights, quantStoreWeights, type WeightSource } from './weights.ts';

/**
 * Build the graph for `cfg` (dtype, attention kernel, fusing, quantization). `realFiles`: each weight file's real
 * path, all in one folder; with `quant` every weight comes from the quantized store instead. `hooks`: the hook
 * points captured / edited (hooks.ts; none by default, and then no node differs). → ONNX ModelProto bytes
 */
/**
 * The most outputs one Split may have on WebGPU: each output is a storage buffer of its shader, and the adapter bounds
 * them per stage (on lavapipe a Split into 25 or 31 layer rows fails, 13 runs; WebGPU's guaranteed minimum is 8, the
 * input counted), so a real model's L+1 rows are cut in a tree of Splits of at most this many.
 */
export const WEBGPU_MAX_SPLIT_OUTPUTS = 6;

export function buildModelGraph(ckpt: Checkpoint, cfg: Pick<EngineConfig, 'dtype' | 'attention' | 'fuse' | 'quant'> & Partial<Pick<EngineConfig, 'device' | 'kvDType' | 'embeddings'>>,
  realFiles: ReadonlyMap<string, string>, quant?: QuantStore, hooks: HookSelection = NO_HOOKS): Uint8Array {
  if (isQuantized(cfg.dtype) && !quant) throw new Error(`graph: dtype ${cfg.dtype} needs the quantized weights`);
  const c = ckpt.config;
  const g = new GraphBuilder();
  // an f16 KV cache: the buffer is fed and the new slots returned as f16, the attention math stays f32
  const kvF16 = cfg.kvDType === 'f16';
  const kvType = kvF16 ? DataType.FLOAT16 : DataType.FLOAT;
  const io = declareInputs(g, c, kvType, cfg.embeddings === 'host');
  const w = quant
    ? quantStoreWeights(g, ckpt, cfg.dtype, quant, cfg.quant?.accuracyLevel ?? 0)
    : checkpointWeights(g, ckpt, cfg.dtype, realFiles, cfg.fuse);
  const shapeBT = g.op('Shape', [io.ids], {}, { name: 'shape_bt' }); // [B, T]
  const heads = (n: number) => g.op('Concat', [shapeBT, g.i64([n, c.headDim])], { axis: 0 }, { name: `shape_bt_${n}_hd` });
  const attend = attention(g, c, cfg.attention, io.past[0]!.k, cfg.device === 'webgpu');
  const ctx: Layers = {
    g, c, w, io, kvF16, headsQ: heads(c.numHeads), headsKV: heads(c.numKvHeads),
    tables: ropeTables(g, io.positions, io.invFreq, ropeAttentionScaling(c.rope), shapeBT, c.headDim),
    attend, attendWithPattern: attend.withPattern,
    hooks: hookPoints(g, hooks, { numLayers: c.numLayers, hiddenSize: c.hiddenSize, numHeads: c.numHeads, headDim: c.headDim }),
  };
  const hidden = hiddenCapture(g, io.hiddenIndex);
  const kv: string[] = []; // every layer's new keys and values, one output

  const rows = interventionRows(g, io, c.numLayers, c.hiddenSize, cfg.device === 'webgpu' ? WEBGPU_MAX_SPLIT_OUTPUTS : Infinity);
  const intervene = (v: string, l: number) => projectTo(g, v, rows, l);
  let x = g.scope('embed', () => intervene(addSteer(g, g.op('Reshape', [io.embeds ?? w.embedRows(io.ids), g.i64([-1, c.hiddenSize])]), rows, 0), 0)); // [BT, d]
  hidden.add(x);
  for (let l = 0; l < c.numLayers; l++) {
    // hidden[l+1] = resid_post of block l: its edits come after the steering row and the projection
    x = g.scope(`layers.${l}`, () => ctx.hooks.at(l, 'resid_post', intervene(decoderLayer(ctx, rows, l, ctx.hooks.at(l, 'resid_pre', x), kv), l + 1)));
    hidden.add(x);
  }
  const logits = g.scope('head', () => w.lmHead(rmsnorm(g, g.op('Gather', [x, io.logitsIndex], { axis: 0 }), w.f32(tensorName('finalNorm')), c.rmsNormEps)));
  outputResults(g, c, hidden.stacked(), logits);
  outputKv(g, c, kv, kvType);
  // the ONNX Attention op is opset 23; the other attention kernels keep the graph at 17
  return g.encode('safekeep-decoder', { '': cfg.attention === 'onnx' ? 23 : 17, 'com.microsoft': 1 });
}

/** What every layer shares: the graph, weights, inputs, RoPE tables, attention kernel, [B, T, heads, hd] shapes. */
interface Layers {
  g: GraphBuilder;
  c: ModelConfig;
  w: WeightSource;
  io: GraphInputs;
  /** the KV buffer and new_kv are f16 */
  kvF16: boolean;
  tables: RopeTables;
  attend: Attend;
  attendWithPattern: AttendWithPattern;
  hooks: HookPoints;
  headsQ: string;
  headsKV: string;
}

/** `t` reshaped to its own shape through a dependency on `x` (0 · x's first dim added), so nothing reading it runs before x */
function afterInput(g: GraphBuilder, t: string, x: string): string {
  const zero = g.op('Mul', [g.op('Slice', [g.op('Shape', [x]), g.i64([0]), g.i64([1])]), g.i64([0])]);
  return g.op('Reshape', [t, g.op('Add', [g.op('Shape', [t]), zero])], {}, { name: 'past_after_input' });
}

/** Decoder block l: x [BT, d] → hidden[l+1] = x + attn(norm(x)) + mlp(norm(·)) + steer[l+1] */
function decoderLayer({ g, c, w, io, kvF16, tables, attend, attendWithPattern, hooks, headsQ, headsKV }: Layers, rows: InterventionRows, l: number, x: string, kv: string[]): string {
  const { numHeads: H, numKvHeads: kvH, headDim: hd } = c;
  const lw = layerWeights(c, l);
  const norm = (v: string, name: string) => rmsnorm(g, v, w.f32(name), c.rmsNormEps);
  const [qf, kf, vf] = w.linears(norm(x, lw.attnNorm), [lw.q, lw.k, lw.v], lw.bias ? [lw.bias.q, lw.bias.k, lw.bias.v].map(w.f32) : undefined,
    [H * hd, kvH * hd, kvH * hd], tensorName('qkv', l));
  // [B, heads, T, hd]; (qwen3) q, k normed per head first; RoPE on q and the new keys
  const toHeads = (t: string, shape: string, normName?: string) => {
    const r = g.op('Reshape', [t, shape]); // [B, T, heads, hd]
    return g.op('Transpose', [normName ? norm(r, normName) : r], { perm: [0, 2, 1, 3] });
  };
  const q = rope(g, toHeads(qf!, headsQ, lw.qkNorm?.q), tables);
  let kNew = rope(g, toHeads(kf!, headsKV, lw.qkNorm?.k), tables);
  let vNew = toHeads(vf!, headsKV);
  let past = io.past[l]!;
  if (kvF16) {
    // the new slots are stored as f16 and this step attends to those same rounded values, so a sequence's results do
    // not depend on how its tokens were split into steps (prefill chunks, decode); the buffer is widened to f32
    const k16 = g.op('Cast', [kNew], { to: DataType.FLOAT16 }, { name: 'k_f16' });
    const v16 = g.op('Cast', [vNew], { to: DataType.FLOAT16 }, { name: 'v_f16' });
    kv.push(k16, v16);
    const f32 = (t: string, name: string) => g.op('Cast', [t], { to: DataType.FLOAT }, { name });
    kNew = f32(k16, 'k_new');
    vNew = f32(v16, 'v_new');
    // the widened buffer only once this layer's input exists: a Cast that reads graph inputs alone was scheduled early
    // by onnxruntime (layer l+1's before layer l's attention), so several layers' f32 copies of the cache were alive
    // at once and an f16 KV peaked above an f32 one (measured: bench:generate's peak RSS); `afterInput` adds a shape
    // dependency on x (int64 arithmetic on Shape, a Reshape to the same shape: no data copied)
    past = { k: f32(afterInput(g, past.k, x), 'past_k'), v: f32(afterInput(g, past.v, x), 'past_v') };
  } else kv.push(kNew, vNew);
  const bias = c.attentionWindows[l] !== null ? io.attnBiasWindow! : io.attnBias;
  let z: string; // [BT, H·hd]
  if (hooks.wantsPattern(l)) {
    const a = attendWithPattern(q, kNew, vNew, past.k, past.v, bias);
    hooks.pattern(l, a.pattern);
    z = a.out;
  } else z = attend(q, kNew, vNew, past.k, past.v, bias);
  const attnOut = hooks.at(l, 'attn_out', w.linear(hooks.at(l, 'z', z), lw.o));
  // resid_mid neither read nor edited: the residual add and the MLP's norm are one node
  let r: string, h: string; // [BT, d]: hidden after attention, its norm
  if (hooks.touches(l, 'resid_mid')) {
    r = hooks.at(l, 'resid_mid', g.op('Add', [x, attnOut], {}, { name: 'resid_attn' }));
    h = norm(r, lw.mlpNorm);
  } else ({ sum: r, normed: h } = addRmsnorm(g, x, attnOut, w.f32(lw.mlpNorm), c.rmsNormEps));
  if (!hooks.touches(l, 'mlp_out')) {
    // steering row l+1 rides in the down projection's bias: hidden[l+1] = r + (down(act) + steer[l+1])
    const mlp = swigluMlp(g, w, lw, h, c.intermediateSize, tensorName('gateUp', l), rows.steer[l + 1]!);
    return g.op('Add', [r, mlp], {}, { name: 'resid_mlp' });
  }
  // mlp_out read or edited: the MLP's own output, the steering row added after it
  const mlpOut = hooks.at(l, 'mlp_out', swigluMlp(g, w, lw, h, c.intermediateSize, tensorName('gateUp', l)));
  return addSteer(g, g.op('Add', [r, mlpOut], {}, { name: 'resid_mlp' }), rows, l + 1);
}
