/** Refusal scores: projection of hidden[ℓ] on the unit direction r̂(ℓ), s = h · r / ‖r‖. */
import { SafekeepError } from '../util/errors.ts';
import { type Activations, allRows } from './activations.ts';
import { type Directions, directionAt } from './direction.ts';
import { mean, sd } from './stats.ts';
import { unit } from './vector.ts';

function checkShapes(acts: Activations, dir: Directions): void {
  if (acts.layers !== dir.layers || acts.d !== dir.d) {
    throw new SafekeepError(
      `direction [${dir.layers}, ${dir.d}] does not fit activations [${acts.n}, ${acts.layers}, ${acts.d}] (different model?)`,
    );
  }
}

/** h_row(ℓ) · r̂(ℓ) for `rows` at one layer. [rows.length] */
export function projections(acts: Activations, dir: Directions, layer: number, rows: readonly number[] = allRows(acts.n)): Float64Array {
  checkShapes(acts, dir);
  const r = unit(directionAt(dir, layer));
  const out = new Float64Array(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const off = (rows[i]! * acts.layers + layer) * acts.d;
    let s = 0;
    for (let j = 0; j < acts.d; j++) s += acts.data[off + j]! * r[j]!;
    out[i] = s;
  }
  return out;
}

/** Projections at every layer, layer-major. [layers, rows.length] */
export function projectionsAllLayers(acts: Activations, dir: Directions, rows: readonly number[] = allRows(acts.n)): Float64Array[] {
  checkShapes(acts, dir);
  const out: Float64Array[] = [];
  for (let l = 0; l < acts.layers; l++) out.push(projections(acts, dir, l, rows));
  return out;
}

export interface ProjectionStats {
  n: number;
  /** [layers] */
  mean: number[];
  /** [layers] sample sd */
  sd: number[];
}

/** Per layer mean ± sd of the projection on r̂(ℓ) (Figure 4: first-token projections). */
export function projectionStats(acts: Activations, dir: Directions, rows: readonly number[] = allRows(acts.n)): ProjectionStats {
  const per = projectionsAllLayers(acts, dir, rows);
  return { n: rows.length, mean: per.map((p) => mean(p)), sd: per.map((p) => sd(p)) };
}
