/** RMSNorm: w ⊙ x / sqrt(mean(x²) + eps) over the last axis, statistics in f32. */
import type { GraphBuilder } from './onnx/builder.ts';

/** x [..., n], w [n] (f32) → [..., n] */
export function rmsnorm(g: GraphBuilder, x: string, w: string, eps: number): string {
  return g.op('SimplifiedLayerNormalization', [x, w], { axis: -1, epsilon: { float: eps }, stash_type: 1 }, { name: 'rmsnorm' });
}

/**
 * A residual add and the RMSNorm of its sum as one node (onnxruntime's SkipSimplifiedLayerNormalization; it does not
 * fuse the pair itself when the sum has other readers, as the residual stream does): x, skip [BT, n], w [n] (f32) →
 * sum = x + skip and rmsnorm(sum), both [BT, n]
 */
export function addRmsnorm(g: GraphBuilder, x: string, skip: string, w: string, eps: number): { sum: string; normed: string } {
  const [normed, , , sum] = g.opN('SkipSimplifiedLayerNormalization', [x, skip, w], { epsilon: { float: eps } },
    { outputs: 4, domain: 'com.microsoft', name: 'resid_rmsnorm' });
  return { sum: sum!, normed: normed! };
}
