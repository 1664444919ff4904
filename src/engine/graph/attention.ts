/**
 * Attention of T new slots on the KV buffer (kv.ts) plus themselves, grouped-query (query head h reads KV head
 * h // rep). A decode step (T = 1) runs standard ops on the buffer in place. A multi-token step (prefill, a prefix's
 * suffix, a chunk) runs one fused kernel instead, chosen in the graph by an If on T > 1: with `AttentionImpl` 'onnx'
 * (the CPU default) the ONNX Attention op (opset 23: grouped-query heads read in place, the buffer as its past, the
 * bias folded into the score GEMM); with 'mha' onnxruntime's MultiHeadAttention on the buffer and the new slots
 * concatenated, K/V repeated per query head. 'matmul' runs the standard ops always.
 */
import type { ModelConfig } from '../../checkpoint/types.ts';
import type { AttentionImpl } from './config.ts';
import type { GraphBuilder } from './onnx/builder.ts';
import { DataType } from './onnx/proto.ts';

/** q [B, H, T, hd]; kNew/vNew [B, kvH, T, hd]; kBuf/vBuf [B, kvH, C, hd]; bias [B, T, C + T] → [BT, H·hd] */
export type Attend = (q: string, kNew: string, vNew: string, kBuf: string, vBuf: string, bias: string) => string;

/** `Attend` that also returns the attention probabilities [B, H, T, C + T] (the standard ops, which form them). */
export type AttendWithPattern = (q: string, kNew: string, vNew: string, kBuf: string, vBuf: string, bias: string) => { out: string; pattern: string };

/**
 * The attention of every layer (bias helpers shared across layers). `firstPastKey`: layer 0's buffer, for C = 0.
 * `withPattern`: the standard ops with their probabilities, for a layer whose pattern hook is read.
 * `joinValues` (webgpu): the value product as one MatMul on [Vbuf; v_new] instead of two on the split probabilities.
 * onnxruntime 1.30's WebGPU MatMul crashes the process (SIGSEGV) on an empty reduction axis, which the buffer product
 * is whenever the buffer is empty (C = 0: a first step, a pattern read on a prompt); the joined values are never
 * empty (T ≥ 1), at the cost of one device-side copy of the buffer per layer per step.
 */
export function attention(g: GraphBuilder, c: ModelConfig, impl: AttentionImpl, firstPastKey: string, joinValues = false): Attend & { withPattern: AttendWithPattern } {
  const { numHeads: H, numKvHeads: kvH, headDim: hd } = c;
  const rep = H / kvH;
  const once = <T>(make: (bias: string) => T) => {
    const made = new Map<string, T>();
    return (bias: string): T => { if (!made.has(bias)) made.set(bias, make(bias)); return made.get(bias)!; };
  };
  // the bias repeated for the rep query heads of a KV head and expanded once to the score shape [B, kvH, rep·T, S]
  // (a broadcasting Add per layer measured ~20 % of a 512-token prefill; the same-shape Add is a plain streaming add)
  const biasRep = once((bias) => {
    const tiled = g.op('Unsqueeze', [g.op('Tile', [bias, g.i64([1, rep, 1])]), g.i64([1])]); // [B, 1, rep·T, S]
    return g.op('Expand', [tiled, g.i64([1, kvH, 1, 1])], {}, { name: 'attn_bias_rep' });
  });
  /** [C, T]: the score columns on the buffer and on the new slots (one for all layers: their buffers have one capacity) */
  let splitCT: string | null = null;
  const bufferAndNew = (bias: string) => (splitCT ??= g.op('Concat', [
    g.op('Slice', [g.op('Shape', [firstPastKey]), g.i64([2]), g.i64([3])]), // C
    g.op('Slice', [g.op('Shape', [bias]), g.i64([1]), g.i64([2])]), // T
  ], { axis: 0 }, { name: 'split_buffer_new' }));
  const bias4 = once((bias) => g.op('Unsqueeze', [bias, g.i64([1])], {}, { name: 'attn_bias4' })); // [B, 1, T, S]

  /** fused MultiHeadAttention: K/V repeated per query head, the bias added inside */
  const fused = (q: string, K: string, V: string, bias: string): string => {
    const perHead = (t: string) => (rep === 1 ? t : g.op('Reshape', [
      g.op('Expand', [g.op('Unsqueeze', [t, g.i64([2])]), g.i64([1, 1, rep, 1, 1])]), g.i64([0, H, -1, hd])]));
    const qBsh = g.op('Reshape', [g.op('Transpose', [q], { perm: [0, 2, 1, 3] }), g.i64([0, 0, H * hd])]); // [B, T, H·hd]
    const attn = g.op('MultiHeadAttention', [qBsh, perHead(K), perHead(V), '', '', bias4(bias)],
      { num_heads: H, scale: { float: 1 / Math.sqrt(hd) } }, { domain: 'com.microsoft', name: 'mha' }); // [B, T, H·hd]
    return g.op('Reshape', [attn, g.i64([-1, H * hd])]);
  };
  /**
   * On the buffer plus the new slots without concatenating them: q as [B, kvH, rep·T, hd] scored against the buffer
   * and the new keys; one f32 softmax over the C + T scores (bias masks unused capacity, padding and the future);
   * probabilities split back at C for the two value products.
   */
  const onBufferAnd = (q: string, kNew: string, vNew: string, kBuf: string, vBuf: string, bias: string, oneSlot: boolean) => {
    const q4 = g.op('Reshape', [q, g.i64([0, kvH, -1, hd])]); // [B, kvH, rep·T, hd]: the rep query heads of a KV head
    // Transpose and the scale on the product are folded by onnxruntime into one FusedMatMul (transB, alpha)
    const scale = g.f32([1 / Math.sqrt(hd)], []);
    const scored = (k: string, name: string) => g.op('Mul', [g.op('MatMul', [q4, g.op('Transpose', [k], { perm: [0, 1, 3, 2] })]), scale], {}, { name });
    const sBuf = scored(kBuf, 'scores_buffer'); // [B, kvH, rep·T, C]
    const sNew = scored(kNew, 'scores_new'); // [B, kvH, rep·T, T]
    const scores = g.op('Add', [g.op('Concat', [sBuf, sNew], { axis: -1 }), biasRep(bias)], {}, { name: 'scores' });
    const probs = g.op('Softmax', [scores], { axis: -1 }, { name: 'probs' }); // [B, kvH, rep·T, C + T]
    let o: string; // [B, kvH, rep·T, hd]
    if (joinValues) o = g.op('MatMul', [probs, g.op('Concat', [vBuf, vNew], { axis: 2 }, { name: 'values_joined' })], {}, { name: 'attn' });
    else {
      const [pBuf, pNew] = g.opN('Split', [probs, bufferAndNew(bias)], { axis: 3 }, { outputs: 2, name: 'probs_split' });
      o = g.op('Add', [g.op('MatMul', [pBuf!, vBuf]), g.op('MatMul', [pNew!, vNew])], {}, { name: 'attn' });
    }
    // [B, kvH, rep·T, hd] → [BT, H·hd]; with one new slot (T = 1) the rows are already b, then head h = kvH-head·rep + r:
    // one Reshape instead of Reshape, Transpose, Reshape (a decode step's nodes each cost their dispatch)
    const out = oneSlot ? g.op('Reshape', [o, g.i64([-1, H * hd])], {}, { name: 'attn_heads' })
      : g.op('Reshape', [g.op('Transpose', [g.op('Reshape', [o, g.i64([0, H, -1, hd])])], { perm: [0, 2, 1, 3] }), g.i64([-1, H * hd])]);
    // [B, kvH, rep·T, S] → [B, H, T, S]: query head h = kvH-head h // rep, row (h % rep)·T + t
    return { out, get pattern() { return g.op('Reshape', [probs, g.i64([0, H, -1, 0])], {}, { name: 'pattern' }); } };
  };
  const withPattern: AttendWithPattern = (...a) => onBufferAnd(...a, false);
  const buffered: Attend = (...a) => withPattern(...a).out;
  /** `buffered` for a step of one new slot per row (the If's decode branch) */
  const bufferedOneSlot: Attend = (...a) => onBufferAnd(...a, true).out;
  /**
   * ONNX Attention (opset 23) on the buffer as past: K/V heads shared by their rep query heads without a copy, the
   * bias preloaded into the score GEMM. Its present outputs (buffer + new slots) are required with a past and unused.
   */
  const onnxAttention = (q: string, kNew: string, vNew: string, kBuf: string, vBuf: string, bias: string): string => {
    const [y] = g.opN('Attention', [q, kNew, vNew, bias4(bias), kBuf, vBuf], { scale: { float: 1 / Math.sqrt(hd) } }, { outputs: 3, name: 'attention' }); // [B, H, T, hd]
    return g.op('Reshape', [g.op('Transpose', [y!], { perm: [0, 2, 1, 3] }), g.i64([-1, H * hd])]);
  };
  if (impl === 'matmul') return Object.assign(buffered, { withPattern });

  let multi: string | null = null;
  return Object.assign((q: string, kNew: string, vNew: string, kBuf: string, vBuf: string, bias: string) => {
    // the bias helpers are made in the main graph first (both branches and every layer read them)
    biasRep(bias);
    bias4(bias);
    if (!joinValues) bufferAndNew(bias);
    // T > 1 (a prefill, a prefix's suffix, a chunk): the fused kernel (its copy of the buffer is small next to T·S
    // scores); T = 1 (decode): standard ops on the buffer in place, no copy
    multi ??= g.op('Greater', [g.op('Slice', [g.op('Shape', [bias]), g.i64([1]), g.i64([2])]), g.i64([1])], {}, { name: 'multi_token' }); // [1] bool
    const out = (v: string) => [{ name: v, elemType: DataType.FLOAT, dims: ['bt', H * hd] }];
    const joined = (buf: string, fresh: string) => g.op('Concat', [buf, fresh], { axis: 2 }); // [B, kvH, C + T, hd]
    const fusedBranch = g.subgraph('fused_attention', () => out(impl === 'onnx'
      ? onnxAttention(q, kNew, vNew, kBuf, vBuf, bias)
      : fused(q, joined(kBuf, kNew), joined(vBuf, vNew), bias)));
    const onBuffer = g.subgraph('buffered_attention', () => out(bufferedOneSlot(q, kNew, vNew, kBuf, vBuf, bias)));
    return g.op('If', [multi], { then_branch: { graph: fusedBranch }, else_branch: { graph: onBuffer } }, { name: 'attention' });
  }, { withPattern });
}
