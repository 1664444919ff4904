/**
 * The conditions of a steering sweep: α values (`--alphas`) for the shorthand −α·R̂ at ℓ*, and intervention sets
 * (`--intervene FILE.json`), each checked against the model and named by its content hash.
 */
import type { Intervention } from '../../engine/types.ts';
import { interventionInputs } from '../../engine/run/batch.ts';
import { canonicalJson } from '../../data/jsonfile.ts';
import { SafekeepError } from '../../util/errors.ts';
import { sha256Hex } from '../../util/hash.ts';

/** A steering strength: absolute (residual units, as the engine subtracts it) or relative to mean ‖hidden[ℓ*]‖. */
export type AlphaSpec = { kind: 'absolute'; value: number } | { kind: 'relative'; value: number };

/** `0,4,8,12` (absolute) or `0,0.5x,1x` (× mean ‖hidden[ℓ*]‖); forms may be mixed. */
export function parseAlphas(s: string): AlphaSpec[] {
  return s.split(',').map((t) => {
    const rel = t.trim().endsWith('x');
    const num = (rel ? t.trim().slice(0, -1) : t).trim(); // 'x' alone would be Number('') = 0
    const v = Number(num);
    if (!num || !Number.isFinite(v)) throw new SafekeepError(`--alphas: '${t}' is not a number (use 4 or 0.5x)`);
    return rel ? { kind: 'relative', value: v } : { kind: 'absolute', value: v };
  });
}

/** An intervention set run as one condition of the sweep (read from FILE.json by the CLI). */
export interface InterventionSet {
  /** the row's label: the file's name without `.json` */
  label: string;
  /** where it was read from (named in errors) */
  file: string;
  interventions: Intervention[];
}

/** One condition of the sweep: the shorthand at strength α, or an intervention set (α = 0: no shorthand on top). */
export interface SteerCondition {
  alpha: number;
  set?: { label: string; hash: string; interventions: Intervention[] };
}

/** sha256 of an intervention set's content (every vector value): a changed file is a different condition. */
export function interventionSetHash(list: readonly Intervention[]): string {
  return sha256Hex(canonicalJson(list.map((iv) => ({
    layer: iv.layer, kind: iv.kind, vector: Array.from(iv.vector, Number), alpha: iv.alpha ?? null, positions: iv.positions ?? 'all',
  }))));
}

/** α as rows, file names and labels show it: six decimals, so a relative α reads the same on every machine */
export const round = (x: number): number => Math.round(x * 1e6) / 1e6;

/** how progress lines and errors name a condition */
export const conditionName = (c: SteerCondition): string => (c.set ? `intervene ${c.set.label}` : `α=${round(c.alpha)}`);

/**
 * Intervention sets checked against the model before anything runs (the engine's own checks, with the file named)
 * and given their content hash; labels must be unique, since they name the rows and the generation files.
 */
export function checkInterventionSets(sets: readonly InterventionSet[], numLayers: number, d: number): Array<InterventionSet & { hash: string }> {
  const seen = new Map<string, string>();
  return sets.map((s) => {
    if (!/^[A-Za-z0-9_.+-]+$/.test(s.label)) throw new SafekeepError(`${s.file}: the row label '${s.label}' (the file's name) may use only letters, digits and _ . + -`);
    const other = seen.get(s.label);
    if (other !== undefined) throw new SafekeepError(`--intervene: ${other} and ${s.file} have the same name '${s.label}'; rename one (the name labels the row)`);
    seen.set(s.label, s.file);
    try {
      interventionInputs(numLayers, d, s.interventions);
    } catch (e) {
      if (e instanceof SafekeepError) throw new SafekeepError(`${s.file}: ${e.message}`);
      throw e;
    }
    return { ...s, hash: interventionSetHash(s.interventions) };
  });
}
