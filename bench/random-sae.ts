/**
 * A standard SAE of width m at blocks.1.resid_post for the benches: W_dec rows random with norm ≈ 1, W_enc = W_decᵀ,
 * b_enc slightly negative so about half the features fire. Costs depend on the shapes, not on these values.
 */
import type { Sae } from '../src/sae/types.ts';
import { makeRng } from '../src/util/rng.ts';

export function randomSae(d: number, m: number, seed: number): Sae {
  const rng = makeRng(seed);
  const W_dec = Float32Array.from({ length: m * d }, () => rng.normal() / Math.sqrt(d));
  const W_enc = new Float32Array(d * m);
  for (let j = 0; j < m; j++) for (let i = 0; i < d; i++) W_enc[i * m + j] = W_dec[j * d + i]!;
  return {
    config: { architecture: 'standard', dIn: d, dSae: m, k: null, rescaleActsByDecoderNorm: false, applyBDecToInput: true, normalizeActivations: 'none', hookName: 'blocks.1.hook_resid_post', dtype: 'F32', layout: 'saelens', source: 'bench' },
    W_enc: { dtype: 'F32', rows: d, cols: m, data: W_enc }, W_dec: { dtype: 'F32', rows: m, cols: d, data: W_dec },
    b_enc: Float32Array.from({ length: m }, () => -0.5 + 0.1 * rng.normal()), b_dec: new Float32Array(d), threshold: null, bytes: 2 * m * d * 4,
  };
}
