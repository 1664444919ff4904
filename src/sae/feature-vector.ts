/**
 * The feature a steering sweep by feature runs along: the feature whose decoder row has the largest cosine with the
 * sweep's direction R̂, and that row scaled to unit norm — normalized as R̂ is, so α moves the residual stream by the
 * same distance in both sweeps and the two curves share their α axis.
 */
import { SafekeepError } from '../util/errors.ts';
import { decoderCosines } from './features.ts';
import { rowInto } from './matrix.ts';
import type { Sae } from './types.ts';

export interface FeatureVector {
  index: number;
  /** cos(W_dec[j], R̂) */
  cosine: number;
  /** W_dec[j] / ‖W_dec[j]‖. [d_in] */
  unit: Float32Array;
}

/** The top feature of `direction` by decoder cosine, with its unit decoder row. */
export function topFeatureVector(sae: Sae, direction: ArrayLike<number>): FeatureVector {
  const best = decoderCosines(sae, direction)[0]!;
  const row = rowInto(sae.W_dec, best.index, new Float32Array(sae.config.dIn));
  let n = 0;
  for (const x of row) n += x * x;
  if (!(n > 0)) throw new SafekeepError(`SAE feature ${best.index}: its decoder row is zero (no feature of this dictionary has a direction)`);
  n = Math.sqrt(n);
  return { index: best.index, cosine: best.cosine, unit: Float32Array.from(row, (x) => x / n) };
}
