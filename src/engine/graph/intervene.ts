/**
 * Interventions on the residual stream hidden[l], in this order: the steer row for layer l is added (blocks fold it
 * into the down projection's bias, so an unused zero row costs nothing extra), then the projection on the unit
 * direction dir[l] is set to value[l] (ablate: 0, clamp: alpha; a zero row leaves x as is).
 *
 * Row sets: each input holds S sets, S = 1 (one set broadcast to every token: forward, prefill) or S = B·T (one set
 * per token row: a decode step whose sequences carry different interventions). The steer and the projection inputs
 * choose their S independently (a steering sweep feeds per-row steer rows and one zero projection).
 *   steer [S, (L+1)·d]: layer l's rows are columns l·d..(l+1)·d−1, so one sequence's set is its [L+1, d] matrix
 *   intervene_dir [S', (L+1)·d], intervene_value [S', L+1]
 * A per-row projection needs each token's own dot product x_b·r̂_b: the Gemm x r̂ᵀ gives [BT, S'] and the identity
 * mask [S', S'] keeps its diagonal (for S' = 1 the mask is [[1]], a no-op), so the projection stays two Gemms plus
 * one Mul whatever S' is.
 *
 * The per-layer rows are cut from the inputs once per step (one Split per input rather than a Gather per layer) —
 * every node counts in a decode step, where each costs its dispatch.
 */
import type { GraphBuilder } from './onnx/builder.ts';
import type { GraphInputs } from './io.ts';

export interface InterventionRows {
  /** steer[l] as [S, d] */
  steer: string[];
  /** dir[l] as [S', d] */
  dir: string[];
  /** value[l] as [S', 1] */
  value: string[];
  /** [S', S'] identity: a token sees only its own projection row */
  own: string;
}

/** every layer's rows of the steer, dir and value inputs ([S, (L+1)·d], [S', (L+1)·d], [S', L+1]) */
export function interventionRows(g: GraphBuilder, io: GraphInputs, layers: number, d: number): InterventionRows {
  // split sizes as an input: valid at every opset (from 18 a Split without them needs num_outputs)
  const rows = (x: string, width: number, name: string) =>
    g.opN('Split', [x, g.i64(new Array<number>(layers + 1).fill(width))], { axis: 1 }, { outputs: layers + 1, name });
  const s = g.op('Shape', [io.interveneValue], { start: 0, end: 1 }, { name: 'projection_sets' }); // [S']
  const zeros = g.op('Expand', [g.f32([0], [1, 1]), g.op('Concat', [s, s], { axis: 0 })], {}, { name: 'projection_square' });
  return {
    steer: rows(io.steer, d, 'steer_rows'),
    dir: rows(io.interveneDir, d, 'intervene_dir_rows'),
    value: rows(io.interveneValue, 1, 'intervene_value_rows'),
    own: g.op('EyeLike', [zeros], {}, { name: 'projection_own' }),
  };
}

/** x + steer[l], x [BT, d] */
export function addSteer(g: GraphBuilder, x: string, rows: InterventionRows, l: number): string {
  return g.op('Add', [x, rows.steer[l]!], {}, { name: 'steered' });
}

/** x + (value[l] − x·r̂) r̂ with r̂ = dir[l] (each token its own row when S' = BT): x [BT, d] → [BT, d] */
export function projectTo(g: GraphBuilder, x: string, rows: InterventionRows, l: number): string {
  const r = rows.dir[l]!;
  const all = g.op('Gemm', [x, r, rows.value[l]!], { transB: 1, alpha: { float: -1 } }, { name: 'to_value' }); // value_s − x_b·r̂_s [BT, S']
  const delta = g.op('Mul', [all, rows.own], {}, { name: 'to_value_own' }); // only s = b (S' = 1: every row)
  return g.op('Gemm', [delta, r, x], {}, { name: 'projected' }); // delta·r̂ + x
}
