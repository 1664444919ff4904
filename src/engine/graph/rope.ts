/**
 * Rotary position embedding, transformers' rotate_half form: positions and inv_freq per row come from the caller
 * (dynamic NTK depends on the row's length); cos/sin × the RoPE type's attention factor (yarn), in f32.
 */
import type { GraphBuilder } from './onnx/builder.ts';
import { DataType } from './onnx/proto.ts';

export interface RopeTables {
  /** [B, T, 1, hd] */
  cos: string;
  sin: string;
}

/** positions [B, T] int64, invFreq [B, hd/2] → cos/sin [B, T, 1, hd] */
export function ropeTables(g: GraphBuilder, positions: string, invFreq: string, attentionScaling: number): RopeTables {
  return g.scope('rope', () => {
    const pos = g.op('Unsqueeze', [g.op('Cast', [positions], { to: DataType.FLOAT }), g.i64([-1])]); // [B, T, 1]
    const freqs = g.op('Mul', [pos, g.op('Unsqueeze', [invFreq, g.i64([1])])]); // [B, T, hd/2]
    const emb = g.op('Unsqueeze', [g.op('Concat', [freqs, freqs], { axis: -1 }), g.i64([2])]); // [B, T, 1, hd]
    if (attentionScaling === 1) return { cos: g.op('Cos', [emb]), sin: g.op('Sin', [emb]) };
    // transformers: cos = emb.cos() * attention_scaling (likewise sin), in f32
    const s = g.f32([attentionScaling], []);
    return { cos: g.op('Mul', [g.op('Cos', [emb]), s]), sin: g.op('Mul', [g.op('Sin', [emb]), s]) };
  });
}

/** x·cos + rotate_half(x)·sin, x: [B, T, heads, hd] */
export function rope(g: GraphBuilder, x: string, t: RopeTables): string {
  const [x1, x2] = g.opN('Split', [x], { axis: -1 }, { outputs: 2 });
  const rotated = g.op('Concat', [g.op('Neg', [x2!]), x1!], { axis: -1 }, { name: 'rotate_half' });
  return g.op('Add', [g.op('Mul', [x, t.cos]), g.op('Mul', [rotated, t.sin])], {}, { name: 'rope' });
}
