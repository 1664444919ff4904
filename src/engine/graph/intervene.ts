/**
 * Interventions on the residual stream hidden[l], in this order: row l of the `steer` input [L+1, d] is added
 * (blocks fold it into the down projection's Gemm bias, so an unused zero row costs nothing extra), then the
 * projection on the unit direction dir[l] is set to value[l] (ablate: 0, clamp: alpha; a zero row leaves x as is).
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

/** x + (value[l] − x·r̂) r̂ with r̂ = dir[l]: x [BT, d], dir [L+1, d], value [L+1] → [BT, d] */
export function projectTo(g: GraphBuilder, x: string, dir: string, value: string, l: number): string {
  const r = g.op('Gather', [dir, g.i64([l])], { axis: 0 }, { name: 'intervene_dir_row' }); // [1, d]
  const along = g.op('MatMul', [x, g.op('Transpose', [r], { perm: [1, 0] })], {}, { name: 'along' }); // [BT, 1]
  const delta = g.op('Sub', [g.op('Gather', [value, g.i64([l])], { axis: 0 }), along], {}, { name: 'to_value' }); // [BT, 1]
  return g.op('Add', [x, g.op('Mul', [delta, r])], {}, { name: 'projected' });
}
