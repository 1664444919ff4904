/**
 * Compute precision of the linear layers. The residual stream, norms, RoPE, attention/softmax, steering and every
 * graph output stay f32 (conventions unchanged); only what a linear layer reads can be 16-bit:
 *
 *   f32 / bf16   weights f32 in the graph (bf16: rounded to bf16 first), Gemm in f32
 *   f16          weights f16 in the graph; y = f32( f16(x) · Wᵀ ), bias and steering added after, in f32
 *   bf16w        the same with bf16 (MatMul on a folded transposed copy: onnxruntime's CUDA provider has bf16
 *                MatMul; its CPU provider has no bf16 MatMul at all, so bf16w needs --device cuda)
 *
 * Storage → graph element type is a chain of Casts on the initializer (upcasts exact, downcasts round to nearest
 * even, like torch `.to()`), folded once at session creation, so the GPU holds 2 bytes per weight for f16/bf16w.
 *
 * On the CPU provider (ORT 1.30, x64) there is no f16 Gemm kernel: onnxruntime's InsertCastTransformer runs the
 * f16 Gemm in f32 and drops the f32→f16→f32 activation casts it considers precision-free. Measured: the CPU result
 * of the f16 graph equals f32 math on f16-rounded weights with f32 activations (|Δ| ≈ 1e-5 at K = 2048), i.e. CPU
 * f16 = "f16 weights, f32 activations". The f16 activation rounding itself only happens on CUDA (check:gpu).
 */
import type { DType } from '../checkpoint/types.ts';
import type { GraphBuilder } from './onnx/builder.ts';
import { DataType, type DataTypeId } from './onnx/proto.ts';

/** f32 / bf16 (f32 weights rounded to bf16) run Gemm in f32; f16 / bf16w keep 16-bit weights and linears; q8 / q4 run MatMulNBits (quant.ts) */
export type ComputeDType = 'f32' | 'bf16' | 'f16' | 'bf16w' | 'q8' | 'q4';

export const COMPUTE_DTYPES: readonly ComputeDType[] = ['f32', 'bf16', 'f16', 'bf16w', 'q8', 'q4'];

/** Element type of linear-layer weights (and of their inputs) in the graph. */
export type LinearType = 'f32' | 'f16' | 'bf16';

export function linearType(dtype: ComputeDType): LinearType {
  return dtype === 'f16' ? 'f16' : dtype === 'bf16w' ? 'bf16' : 'f32';
}

/** The default dtype of a device: f16 weights on the GPU (half the memory of f32), f32 on the CPU. */
export function defaultDType(device: 'cpu' | 'cuda'): ComputeDType {
  return device === 'cuda' ? 'f16' : 'f32';
}

export const ONNX_TYPE: Record<LinearType, DataTypeId> = { f32: DataType.FLOAT, f16: DataType.FLOAT16, bf16: DataType.BFLOAT16 };
const STORAGE_TYPE: Record<DType, LinearType> = { F32: 'f32', F16: 'f16', BF16: 'bf16' };

/**
 * Casts taking a stored tensor `x` (storage dtype) to element type `target`. Every step is exact or one
 * round-to-nearest-even: 16-bit → 16-bit goes through f32 (exact upcast, then one rounding). `roundBf16` (target
 * f32 only): round through bf16 first (`--dtype bf16`; a no-op for BF16 storage).
 */
export function castStored(g: GraphBuilder, x: string, storage: DType, target: LinearType, name: string, roundBf16 = false): string {
  const from = STORAGE_TYPE[storage];
  let w = x;
  if (from !== target) {
    if (from !== 'f32') w = g.op('Cast', [w], { to: DataType.FLOAT }, { name: `${name}.f32` });
    if (target !== 'f32') w = g.op('Cast', [w], { to: ONNX_TYPE[target] }, { name: `${name}.${target}` });
  }
  if (roundBf16 && target === 'f32' && from !== 'bf16') {
    w = g.op('Cast', [g.op('Cast', [w], { to: DataType.BFLOAT16 }, { name: `${name}.bf16` })], { to: DataType.FLOAT }, { name: `${name}.f32` });
  }
  return w;
}

/**
 * y = x · Wᵀ (+ bias) with x f32 [M, K] and W [N, K] (HF layout) of element type `t` → f32 [M, N].
 * f32: one Gemm(transB), the bias (f32, [N] or broadcastable) as its C input.
 * f16: Cast x → f16, Gemm(transB), Cast → f32, then the bias added in f32.
 * bf16: Cast x → bf16, MatMul on Transpose(W) (folded once), Cast → f32, bias in f32.
 */
export function linearAs(g: GraphBuilder, x: string, w: string, t: LinearType, name: string, bias?: string): string {
  if (t === 'f32') return g.op('Gemm', bias ? [x, w, bias] : [x, w], { transB: 1 }, { name });
  const x16 = g.op('Cast', [x], { to: ONNX_TYPE[t] }, { name: `${name}.in_${t}` });
  const y16 = t === 'f16'
    ? g.op('Gemm', [x16, w], { transB: 1 }, { name })
    : g.op('MatMul', [x16, g.op('Transpose', [w], { perm: [1, 0] }, { name: `${name}.wT` })], {}, { name });
  const y = g.op('Cast', [y16], { to: DataType.FLOAT }, { name: `${name}.f32` });
  return bias ? g.op('Add', [y, bias], {}, { name: `${name}.bias` }) : y;
}
