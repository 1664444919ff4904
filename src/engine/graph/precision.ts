/**
 * Compute precision of the linear layers. The residual stream, norms, RoPE, attention/softmax, steering and every
 * graph output stay f32 (conventions unchanged); only what a linear layer reads can be 16-bit:
 *
 *   f32 / bf16   weights f32 in the graph (bf16: rounded to bf16 first), Gemm in f32
 *   f16          weights f16 in the graph; y = f32( f16(x) · Wᵀ ), bias and steering added after, in f32
 *   bf16w        the same with bf16 (MatMul on a folded transposed copy: onnxruntime's CUDA provider has bf16
 *                MatMul; its CPU provider has no bf16 MatMul at all, so bf16w needs --device cuda)
 *   f16sim       (API only, not a CLI dtype) the numbers of f16 on a GPU, computed on the CPU: f32 weights holding the
 *                f16-rounded values, x rounded to f16, f32 Gemm, result rounded to f16 — what cuBLAS does with f16
 *                operands and f32 accumulation, up to summation order. check:gpu and the tests use it as the
 *                expected size of the f16 error.
 *
 * Storage → graph element type is a chain of Casts on the initializer (upcasts exact, downcasts round to nearest
 * even, like torch `.to()`), folded once at session creation, so the GPU holds 2 bytes per weight for f16/bf16w.
 *
 * On the CPU provider (ORT 1.30, x64) there is no f16 Gemm kernel: onnxruntime's InsertCastTransformer runs the
 * f16 Gemm in f32 and drops the f32→f16→f32 activation casts it considers precision-free. Measured: the CPU result
 * of the f16 graph equals f32 math on f16-rounded weights with f32 activations (|Δ| ≈ 1e-5 at K = 2048), i.e. CPU
 * f16 = "f16 weights, f32 activations". The f16 activation rounding itself happens on CUDA (check:gpu) and in f16sim.
 */
import type { DType } from '../../checkpoint/types.ts';
import type { GraphBuilder } from './onnx/builder.ts';
import { DataType, type DataTypeId } from './onnx/proto.ts';

/**
 * f32 / bf16 (f32 weights rounded to bf16) run Gemm in f32; f16 / bf16w keep 16-bit weights and linears; f16sim
 * emulates f16 numerics in f32 (tests, check:gpu); q8 / q4 run MatMulNBits (quant.ts)
 */
export type ComputeDType = 'f32' | 'bf16' | 'f16' | 'bf16w' | 'f16sim' | 'q8' | 'q4';

export const isQuantized = (dtype: ComputeDType): dtype is 'q8' | 'q4' => dtype === 'q8' || dtype === 'q4';

/** the dtypes a user picks with --dtype */
export const COMPUTE_DTYPES: readonly ComputeDType[] = ['f32', 'bf16', 'f16', 'bf16w', 'q8', 'q4'];

/** Element type of linear-layer weights (and of their inputs) in the graph; f16sim: f32 holding f16 values. */
export type LinearType = 'f32' | 'f16' | 'bf16' | 'f16sim';

export function linearType(dtype: ComputeDType): LinearType {
  return dtype === 'f16' ? 'f16' : dtype === 'bf16w' ? 'bf16' : dtype === 'f16sim' ? 'f16sim' : 'f32';
}

/** The default dtype of a device: f16 weights on a GPU (cuda, webgpu: half the memory of f32), f32 on the CPU. */
export function defaultDType(device: 'cpu' | 'cuda' | 'webgpu'): ComputeDType {
  return device === 'cpu' ? 'f32' : 'f16';
}

const ONNX_TYPE: Record<LinearType, DataTypeId> = { f32: DataType.FLOAT, f16: DataType.FLOAT16, bf16: DataType.BFLOAT16, f16sim: DataType.FLOAT };
const STORAGE_TYPE: Record<DType, LinearType> = { F32: 'f32', F16: 'f16', BF16: 'bf16' };

/** x rounded to f16 and back (round to nearest even; beyond ±65504 → ±inf, as on the GPU) */
const roundF16 = (g: GraphBuilder, x: string, name: string): string =>
  g.op('Cast', [g.op('Cast', [x], { to: DataType.FLOAT16 }, { name: `${name}.f16` })], { to: DataType.FLOAT }, { name: `${name}.f32` });

/**
 * Casts taking a stored tensor `x` (storage dtype) to element type `target`. Every step is exact or one
 * round-to-nearest-even: 16-bit → 16-bit goes through f32 (exact upcast, then one rounding). `roundBf16` (target
 * f32 only): round through bf16 first (`--dtype bf16`; a no-op for BF16 storage).
 */
export function castStored(g: GraphBuilder, x: string, storage: DType, target: LinearType, name: string, roundBf16 = false): string {
  if (target === 'f16sim') return g.op('Cast', [castStored(g, x, storage, 'f16', name)], { to: DataType.FLOAT }, { name: `${name}.f32` });
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
 * f16sim: round16(round16(x) · Wᵀ) in f32 (W holds f16 values), bias in f32.
 */
export function linearAs(g: GraphBuilder, x: string, w: string, t: LinearType, name: string, bias?: string): string {
  if (t === 'f32') return g.op('Gemm', bias ? [x, w, bias] : [x, w], { transB: 1 }, { name });
  if (t === 'f16sim') {
    const y = roundF16(g, g.op('Gemm', [roundF16(g, x, `${name}.in`), w], { transB: 1 }, { name }), `${name}.out`);
    return bias ? g.op('Add', [y, bias], {}, { name: `${name}.bias` }) : y;
  }
  const x16 = g.op('Cast', [x], { to: ONNX_TYPE[t] }, { name: `${name}.in_${t}` });
  const y16 = t === 'f16'
    ? g.op('Gemm', [x16, w], { transB: 1 }, { name })
    : g.op('MatMul', [x16, g.op('Transpose', [w], { perm: [1, 0] }, { name: `${name}.wT` })], {}, { name });
  const y = g.op('Cast', [y16], { to: DataType.FLOAT }, { name: `${name}.f32` });
  return bias ? g.op('Add', [y, bias], {}, { name: `${name}.bias` }) : y;
}
