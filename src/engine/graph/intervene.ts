/**
 * Interventions on the residual stream hidden[l], in this order: row l of the `steer` input [L+1, d] is added
 * (blocks fold it into the down projection's bias, so an unused zero row costs nothing extra), then the projection on
 * the unit direction dir[l] is set to value[l] (ablate: 0, clamp: alpha; a zero row leaves x as is).
 *
 * The per-layer rows are cut from the inputs once per step (one Split per input rather than a Gather per layer), and
 * the projection is two Gemms — every node counts in a decode step, where each costs its dispatch.
 */
import type { GraphBuilder } from './onnx/builder.ts';
import type { GraphInputs } from './io.ts';

export interface InterventionRows {
  /** steer[l] as [1, d] */
  steer: string[];
  /** dir[l] as [1, d] */
  dir: string[];
  /** value[l] as [1] */
  value: string[];
}

/** every layer's rows of the steer, dir and value inputs ([L+1, d], [L+1, d], [L+1]) */
export function interventionRows(g: GraphBuilder, io: GraphInputs, layers: number): InterventionRows {
  // split sizes as an input: valid at every opset (from 18 a Split without them needs num_outputs)
  const ones = g.i64(new Array<number>(layers + 1).fill(1));
  const rows = (x: string, name: string) => g.opN('Split', [x, ones], { axis: 0 }, { outputs: layers + 1, name });
  return { steer: rows(io.steer, 'steer_rows'), dir: rows(io.interveneDir, 'intervene_dir_rows'), value: rows(io.interveneValue, 'intervene_value_rows') };
}

/** x + steer[l], x [BT, d] */
export function addSteer(g: GraphBuilder, x: string, rows: InterventionRows, l: number): string {
  return g.op('Add', [x, rows.steer[l]!], {}, { name: 'steered' });
}

/** x + (value[l] − x·r̂) r̂ with r̂ = dir[l]: x [BT, d] → [BT, d] */
export function projectTo(g: GraphBuilder, x: string, rows: InterventionRows, l: number): string {
  const r = rows.dir[l]!;
  const delta = g.op('Gemm', [x, r, rows.value[l]!], { transB: 1, alpha: { float: -1 } }, { name: 'to_value' }); // value − x·r̂ [BT, 1]
  return g.op('Gemm', [delta, r, x], {}, { name: 'projected' }); // delta·r̂ + x
}
