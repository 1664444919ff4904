/**
 * Within- and cross-format AUROC: a direction fit on one configuration's extraction split scores another
 * configuration's evaluation split, at every layer, with paired-bootstrap 95 % intervals (the same resampled pairs
 * for every configuration and layer, so differences between configurations are paired).
 */
import type { Activations, Labels } from './activations.ts';
import { type AurocEstimate, type DifferenceEstimate, bootstrapAuroc } from './bootstrap.ts';
import type { Directions } from './direction.ts';
import { projections } from './projection.ts';

/** The evaluation rows of one configuration. */
export interface EvalSet {
  name: string;
  acts: Activations;
  /** [n] labels of all rows of `acts` */
  labels: Labels;
  /** [n] resampling unit of all rows of `acts`: the pair id, or its group (scenario) so whole groups resample */
  pairIds: readonly string[];
  /** evaluation row indices */
  rows: readonly number[];
}

export interface LayerwiseAuroc {
  name: string;
  /** [layers] */
  perLayer: AurocEstimate[];
  /** [layers] this configuration − the reference configuration, paired */
  diffToReference: DifferenceEstimate[];
}

interface TransferOptions {
  reps?: number;
  seed?: number;
  level?: number;
  /** index in `targets` of the reference configuration for differences (default 0) */
  reference?: number;
  /** layers to evaluate (default all) */
  layers?: readonly number[];
}

/**
 * AUROC of the score h·d̂(ℓ) on each target's evaluation rows, for each layer. `direction` may differ per target
 * (within-format: each target's own direction) by passing a function.
 */
export function layerwiseAuroc(
  direction: Directions | ((target: EvalSet) => Directions),
  targets: readonly EvalSet[],
  opts: TransferOptions = {},
): LayerwiseAuroc[] {
  const nLayers = targets[0]?.acts.layers ?? 0;
  const layers = opts.layers ?? Array.from({ length: nLayers }, (_, l) => l);
  const dirs = targets.map((t) => (typeof direction === 'function' ? direction(t) : direction));
  const out: LayerwiseAuroc[] = targets.map((t) => ({ name: t.name, perLayer: [], diffToReference: [] }));
  for (const l of layers) {
    const sets = targets.map((t, i) => ({
      scores: projections(t.acts, dirs[i]!, l, t.rows),
      labels: t.rows.map((r) => t.labels[r]!),
      pairIds: t.rows.map((r) => t.pairIds[r]!),
    }));
    const b = bootstrapAuroc(sets, { reps: opts.reps, seed: opts.seed, level: opts.level, reference: opts.reference });
    b.estimates.forEach((e, i) => out[i]!.perLayer.push(e));
    b.differences.forEach((e, i) => out[i]!.diffToReference.push(e));
  }
  return out;
}
