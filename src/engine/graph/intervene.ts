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

/**
 * `x` cut along axis 1 into pieces of `widths`, with at most `maxOutputs` outputs per Split node: WebGPU binds each
 * output as a storage buffer of one shader, and a Split into a real model's L+1 layer rows (33 for an 8B Llama)
 * exceeds the adapter's limit; the pieces are then cut in a tree of Splits (same values, a few more nodes).
 */
export function splitWidths(g: GraphBuilder, x: string, widths: readonly number[], name: string, maxOutputs = Infinity): string[] {
  // split sizes as an input: valid at every opset (from 18 a Split without them needs num_outputs)
  if (widths.length <= maxOutputs) return g.opN('Split', [x, g.i64([...widths])], { axis: 1 }, { outputs: widths.length, name });
  const per = Math.ceil(widths.length / maxOutputs);
  const groups: number[][] = [];
  for (let i = 0; i < widths.length; i += per) groups.push(widths.slice(i, i + per));
  const parts = splitWidths(g, x, groups.map((w) => w.reduce((a, b) => a + b, 0)), `${name}_groups`, maxOutputs);
  return groups.flatMap((w, i) => (w.length === 1 ? [parts[i]!] : splitWidths(g, parts[i]!, w, `${name}_${i}`, maxOutputs)));
}

/**
 * every layer's rows of the steer, dir and value inputs ([S, (L+1)·d], [S', (L+1)·d], [S', L+1]); `maxSplitOutputs`
 * bounds each Split node's outputs (WebGPU: see splitWidths)
 */
export function interventionRows(g: GraphBuilder, io: GraphInputs, layers: number, d: number, maxSplitOutputs = Infinity): InterventionRows {
  const rows = (x: string, width: number, name: string) => splitWidths(g, x, new Array<number>(layers + 1).fill(width), name, maxSplitOutputs);
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
