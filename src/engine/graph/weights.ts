/**
 * Where the graph's weights come from, behind one interface: the checkpoint's .safetensors byte ranges as external
 * data (each linear its own Gemm, or `fuse`: q/k/v and gate/up concatenated in the graph, folded and pre-packed by
 * onnxruntime into one wider Gemm), or the quantized store (MatMulNBits on block-quantized weights, quant-store.ts).
 * Non-f32 storage (and `dtype: 'bf16'` rounding of f32 weights) is a Cast, folded once at session creation.
 */
import { basename } from 'node:path';
import { lmHeadName, tensorName } from '../../checkpoint/tensors.ts';
import type { Checkpoint, DType, TensorEntry } from '../../checkpoint/types.ts';
import type { QuantStore } from './quant-index.ts';
import type { GraphBuilder } from './onnx/builder.ts';
import { DataType, type DataTypeId } from './onnx/proto.ts';
import { castStored, linearAs, linearType, type ComputeDType, type LinearType } from './precision.ts';

export interface WeightSource {
  /** a norm weight or bias as f32 [n] */
  f32(name: string): string;
  /** embedding rows of ids [B, T] as f32 [B, T, d] (only the rows used are read) */
  embedRows(ids: string): string;
  /** x [M, K] · Wᵀ (+ bias, an f32 value) → f32 [M, N]; W = the HF [N, K] weight `name` */
  linear(x: string, name: string, bias?: string, node?: string): string;
  /** several linears of one input (q/k/v; gate/up) → their outputs; `fused` names the concatenated weight */
  linears(x: string, names: string[], biases: string[] | undefined, widths: number[], fused: string): string[];
  /** logits of x [M, d] (lm_head, or the embedding when tied) */
  lmHead(x: string): string;
}

const STORAGE: Record<DType, DataTypeId> = { F32: DataType.FLOAT, BF16: DataType.BFLOAT16, F16: DataType.FLOAT16 };

/** External-data initializers and the f32 views shared by both sources. */
function storedWeights(g: GraphBuilder, ckpt: Checkpoint, dtype: ComputeDType, where: (e: TensorEntry) => { location: string; offset: number; length: number }) {
  /** the stored tensor as an external initializer (a fresh one per call: distinct consumers can map the same bytes) */
  const stored = (name: string): { init: string; entry: TensorEntry } => {
    const e = ckpt.tensors.get(name);
    if (!e) throw new Error(`graph: checkpoint has no tensor ${name}`);
    return { init: g.initializer({ dataType: STORAGE[e.dtype], dims: e.shape, external: where(e) }, name), entry: e };
  };
  /** storage → f32 as the compute dtype asks (BF16/F16 upcast exactly; --dtype bf16 rounds f32/f16 to bf16) */
  const toF32 = (x: string, storage: DType, name: string): string => castStored(g, x, storage, 'f32', name, dtype === 'bf16');
  const cache = new Map<string, string>();
  /** a weight in element type t; the Casts on initializers are folded once by onnxruntime */
  const weight = (name: string, t: LinearType): string => {
    const key = `${t}:${name}`;
    const hit = cache.get(key);
    if (hit) return hit;
    const { init, entry } = stored(name);
    const w = t === 'f32' ? toF32(init, entry.dtype, name) : castStored(g, init, entry.dtype, t, name);
    cache.set(key, w);
    return w;
  };
  const embedRows = (ids: string): string => {
    // rows gathered from their own mapping of the stored bytes, converted after the gather: a tied lm_head's
    // folded/pre-packed copy does not keep a second full copy resident
    const { init, entry } = stored(tensorName('embed'));
    return toF32(g.op('Gather', [init, ids], { axis: 0 }), entry.dtype, 'embed_rows');
  };
  return { weight, embedRows };
}

const nodeName = (name: string): string => name.split('.').slice(-2, -1)[0] ?? 'linear';

/** Weights read straight from the checkpoint's files (each real file's basename in the one weights folder). */
export function checkpointWeights(g: GraphBuilder, ckpt: Checkpoint, dtype: ComputeDType, realFiles: ReadonlyMap<string, string>, fuse: boolean): WeightSource {
  const { weight, embedRows } = storedWeights(g, ckpt, dtype, (e) => {
    const real = realFiles.get(e.file);
    if (!real) throw new Error(`graph: no resolved path for ${e.file}`);
    return { location: basename(real), offset: e.offset, length: e.byteLength };
  });
  /** element type of linear weights and their inputs (precision.ts): f32, or 16-bit for f16 / bf16w */
  const lt = linearType(dtype);
  const linear = (x: string, name: string, bias?: string, node = nodeName(name)): string => linearAs(g, x, weight(name, lt), lt, node, bias);
  return {
    f32: (name) => weight(name, 'f32'),
    embedRows,
    linear,
    linears: (x, names, biases, widths) => {
      if (!fuse) return names.map((w, i) => linear(x, w, biases?.[i]));
      const W = g.op('Concat', names.map((w) => weight(w, lt)), { axis: 0 }, { name: 'fused_weight' });
      const b = biases ? g.op('Concat', biases, { axis: 0 }, { name: 'fused_bias' }) : undefined;
      return g.opN('Split', [linearAs(g, x, W, lt, 'fused_linear', b), g.i64(widths)], { axis: 1 }, { outputs: names.length, name: 'split' });
    },
    lmHead: (x) => linear(x, lmHeadName(ckpt.config), undefined, 'lm_head'),
  };
}

/** Weights from the quantized store: every linear a MatMulNBits, everything else copied bytes in the store's file. */
export function quantStoreWeights(g: GraphBuilder, ckpt: Checkpoint, dtype: ComputeDType, quant: QuantStore, accuracyLevel: number): WeightSource {
  const location = basename(quant.file);
  const at = (name: string) => {
    const t = quant.index.tensors[name];
    if (!t) throw new Error(`graph: quantized store has no tensor ${name}`);
    return { location, offset: t.offset, length: t.length };
  };
  const { weight, embedRows } = storedWeights(g, ckpt, dtype, (e) => at(e.name));
  /** x [M, K] · Wᵀ for the store's quantized weight `name` → [M, N] */
  const qmatmul = (x: string, name: string): string => {
    const ext = (suffix: string, dataType: DataTypeId): string => {
      const t = quant.index.tensors[`${name}.${suffix}`];
      if (!t) throw new Error(`graph: quantized store has no ${name}.${suffix}`);
      return g.initializer({ dataType, dims: t.shape, external: { location, offset: t.offset, length: t.length } }, `${name}.${suffix}`);
    };
    const [N, K] = quant.index.linears[name] ?? [0, 0];
    const inputs = [x, ext('codes', DataType.UINT8), ext('scales', DataType.FLOAT)];
    if (quant.index.scheme === 'asym') inputs.push(ext('zp', DataType.UINT8));
    return g.op('MatMulNBits', inputs, { K, N, bits: quant.index.bits, block_size: quant.index.block, accuracy_level: accuracyLevel },
      { domain: 'com.microsoft', name: nodeName(name) });
  };
  const withBias = (y: string, bias?: string) => (bias ? g.op('Add', [y, bias]) : y);
  return {
    f32: (name) => weight(name, 'f32'),
    embedRows,
    linear: (x, name, bias) => withBias(qmatmul(x, name), bias),
    // the store holds the row-concatenated weight: one MatMulNBits, then split
    linears: (x, names, biases, widths, fused) => {
      const y = withBias(qmatmul(x, fused), biases ? g.op('Concat', biases, { axis: 0 }, { name: 'fused_bias' }) : undefined);
      return g.opN('Split', [y, g.i64(widths)], { axis: 1 }, { outputs: names.length, name: 'split' });
    },
    lmHead: (x) => qmatmul(x, tensorName('lmHead')),
  };
}
