/** RMSNorm: w ⊙ x / sqrt(mean(x²) + eps) over the last axis, statistics in f32. */
import type { GraphBuilder } from './onnx/builder.ts';

/** x [..., n], w [n] (f32) → [..., n] */
export function rmsnorm(g: GraphBuilder, x: string, w: string, eps: number): string {
  return g.op('SimplifiedLayerNormalization', [x, w], { axis: -1, epsilon: { float: eps }, stash_type: 1 }, { name: 'rmsnorm' });
}
