/**
 * Rotary position embedding, transformers' rotate_half form (x·cos + rotate_half(x)·sin), run by onnxruntime's
 * fused RotaryEmbedding (com.microsoft, non-interleaved): one node per q/k instead of six (split, neg, concat, two
 * muls, add), which counts in a decode step where every node costs its dispatch. Positions and inv_freq per row come
 * from the caller (dynamic NTK depends on the row's length), so the tables are made per step for exactly the step's
 * B·T tokens: cos/sin [B·T, hd/2] (× the RoPE type's attention factor, yarn) and the op's position ids are the flat
 * token indices b·T + t into them. f32 throughout.
 */
import type { GraphBuilder } from './onnx/builder.ts';
import { DataType } from './onnx/proto.ts';

export interface RopeTables {
  /** [B·T, hd/2] */
  cos: string;
  sin: string;
  /** int64 [B, T]: b·T + t, the row of each token in cos/sin */
  rows: string;
}

/** positions [B, T] int64, invFreq [B, hd/2], shapeBT = Shape(ids) → the step's tables */
export function ropeTables(g: GraphBuilder, positions: string, invFreq: string, attentionScaling: number, shapeBT: string, hd: number): RopeTables {
  return g.scope('rope', () => {
    const pos = g.op('Unsqueeze', [g.op('Cast', [positions], { to: DataType.FLOAT }), g.i64([-1])]); // [B, T, 1]
    const freqs = g.op('Reshape', [g.op('Mul', [pos, g.op('Unsqueeze', [invFreq, g.i64([1])])]), g.i64([-1, hd / 2])]); // [B·T, hd/2]
    const n = g.op('ReduceProd', [shapeBT], { keepdims: 0 }); // B·T (scalar)
    const rows = g.op('Reshape', [g.op('Range', [g.i64([0], []), n, g.i64([1], [])]), shapeBT], {}, { name: 'rope_rows' });
    if (attentionScaling === 1) return { cos: g.op('Cos', [freqs]), sin: g.op('Sin', [freqs]), rows };
    // transformers: cos = emb.cos() * attention_scaling (likewise sin), in f32
    const s = g.f32([attentionScaling], []);
    return { cos: g.op('Mul', [g.op('Cos', [freqs]), s]), sin: g.op('Mul', [g.op('Sin', [freqs]), s]), rows };
  });
}

/** x [B, heads, T, hd] (rotated over all of hd) → the same shape, rotated */
export function rope(g: GraphBuilder, x: string, t: RopeTables): string {
  return g.op('RotaryEmbedding', [x, t.rows, t.cos, t.sin], { interleaved: 0 }, { domain: 'com.microsoft', name: 'rope' });
}
