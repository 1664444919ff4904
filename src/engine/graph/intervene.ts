/**
 * Interventions on the residual stream: row l of the `steer` input [L+1, d] is added to hidden[l] (zeros = none).
 * Blocks fold the row into the down projection's Gemm bias, so an unused (zero) steer costs nothing extra.
 */
import type { GraphBuilder } from './onnx/builder.ts';

/** steer[l] as a [d] value */
export function steerRow(g: GraphBuilder, steer: string, l: number): string {
  return g.op('Gather', [steer, g.i64([l], [])], { axis: 0 }, { name: 'steer_row' });
}

/** x + steer[l], x [BT, d] */
export function addSteer(g: GraphBuilder, x: string, steer: string, l: number): string {
  return g.op('Add', [x, steerRow(g, steer, l)], {}, { name: 'steered' });
}
