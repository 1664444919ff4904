/**
 * Synthetic activations with analytically known structure for the analysis and report tests:
 * per pair, a harmful and a benign request; h = N(0, noise²·I) + strength(ℓ)·label·u + shift(ℓ)
 * so the true refusal direction at layer ℓ is strength(ℓ)·u.
 */
import { type Activations, makeActivations } from '../../src/analysis/activations.ts';
import { makeRng } from '../../src/util/rng.ts';
import { unit } from '../../src/analysis/vector.ts';

export interface PlantedOptions {
  pairs: number;
  layers: number;
  d: number;
  /** strength of the planted direction at each layer [layers] */
  strength: readonly number[];
  noise?: number;
  seed?: number;
  /** planted unit direction (default: a seeded random unit vector) */
  u?: Float64Array;
  /** added to every row at each layer: shift(ℓ, label) → vector [d] or null */
  shift?: (layer: number, label: number) => ArrayLike<number> | null;
}

export interface Planted {
  acts: Activations;
  labels: Uint8Array;
  pairIds: string[];
  u: Float64Array;
}

export function randomUnit(d: number, seed: number): Float64Array {
  const rng = makeRng(seed);
  return unit(Array.from({ length: d }, () => rng.normal()));
}

export function planted(o: PlantedOptions): Planted {
  const rng = makeRng(o.seed ?? 1);
  const u = o.u ?? randomUnit(o.d, (o.seed ?? 1) + 1000);
  const n = 2 * o.pairs;
  const acts = makeActivations(n, o.layers, o.d);
  const labels = new Uint8Array(n);
  const pairIds: string[] = [];
  const noise = o.noise ?? 1;
  for (let p = 0; p < o.pairs; p++) {
    for (const y of [1, 0]) {
      const row = 2 * p + (1 - y);
      labels[row] = y;
      pairIds.push(`p${String(p).padStart(4, '0')}`);
      for (let l = 0; l < o.layers; l++) {
        const off = (row * o.layers + l) * o.d;
        const s = o.shift?.(l, y) ?? null;
        for (let j = 0; j < o.d; j++) {
          acts.data[off + j] = noise * rng.normal() + o.strength[l]! * y * u[j]! + (s ? s[j]! : 0);
        }
      }
    }
  }
  return { acts, labels, pairIds, u };
}
