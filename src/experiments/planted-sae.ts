/**
 * The planted model's dictionary (`safekeep make-model planted --sae`): a SAELens folder (cfg.json +
 * sae_weights.safetensors, standard architecture) at blocks.1.hook_resid_post = hidden[2], the first layer the
 * planted model writes r to (hidden[2] = hidden[3] = hidden[4]: the later blocks are the identity). Its features,
 * with Q the planted model's orthonormal basis (planted.ts: Q0 = r, Q1 = u, Q2 = f, Q3 = the noise coordinate block 0
 * reads, Q4 = the coordinate block 0 writes):
 *   feature 2k   decoder row +Q_k,   feature 2k+1   decoder row −Q_k   (k = 0..d−1; W_enc = W_decᵀ, b_enc = b_dec = 0)
 *   features 2d..4d−1: dead (encoder column 0, b_enc −1, decoder row 0: no cosine with anything, so rankings show the
 *   live features)
 * So relu(x·Q_k)·Q_k + relu(−x·Q_k)·(−Q_k) = (x·Q_k)·Q_k: the reconstruction is x itself (FVU 0, CE increase 0), a
 * token's L0 is the number of its nonzero coordinates in Q (d), at least half the features are dead, and the known
 * answers are: the refusal direction r is feature 0 (cosine 1); a Schema Direction lies in span(r, Q4) exactly (the
 * last prompt token is the same template token in both representations, so the difference is what blocks 0 and 1
 * wrote), so its features are ±r (0 / 1) and ±Q4 (8 / 9) and their squared cosines sum to 1.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { writeSafetensors } from '../checkpoint/safetensors.ts';
import { writeJsonAtomic } from '../util/atomic.ts';

/** the planted SAE's hook and the hidden row it reads */
export const PLANTED_SAE = { hookName: 'blocks.1.hook_resid_post', hiddenRow: 2, refusalFeature: 0, antiRefusalFeature: 1, q4Features: [8, 9] } as const;

/** Writes the dictionary for basis Q ([d] rows) into `dir`. */
export function writePlantedSae(dir: string, Q: readonly Float64Array[]): void {
  const d = Q.length;
  const m = 4 * d;
  const W_dec = new Float32Array(m * d);
  const W_enc = new Float32Array(d * m);
  const b_enc = new Float32Array(m);
  for (let k = 0; k < d; k++) {
    for (const [j, sign] of [[2 * k, 1], [2 * k + 1, -1]] as const) {
      for (let i = 0; i < d; i++) {
        W_dec[j * d + i] = sign * Q[k]![i]!;
        W_enc[i * m + j] = sign * Q[k]![i]!;
      }
    }
  }
  b_enc.fill(-1, 2 * d);
  mkdirSync(dir, { recursive: true });
  writeSafetensors(join(dir, 'sae_weights.safetensors'), {
    W_enc: { dtype: 'F32', shape: [d, m], data: W_enc },
    b_enc: { dtype: 'F32', shape: [m], data: b_enc },
    W_dec: { dtype: 'F32', shape: [m, d], data: W_dec },
    b_dec: { dtype: 'F32', shape: [d], data: new Float32Array(d) },
  });
  writeJsonAtomic(join(dir, 'cfg.json'), {
    architecture: 'standard', d_in: d, d_sae: m, dtype: 'float32', device: 'cpu', apply_b_dec_to_input: false,
    normalize_activations: 'none', reshape_activations: 'none',
    metadata: { model_name: 'safekeep-planted (synthetic)', hook_name: PLANTED_SAE.hookName, hook_head_index: null, prepend_bos: true },
  }, 1);
}
