/**
 * The features of named directions (the refusal direction r, the Schema Directions R_harmful / R_benign) in each
 * condition of a set of labelled activations (the caches Figures 3–4 read), for the report:
 * - by decoder-row cosine with the direction (a property of the dictionary: the same in every condition);
 * - by attribution over the condition's rows ((harmful − benign mean activation) × W_dec[j]·r̂, features.ts);
 * - each listed feature's top-K activating rows of the condition (activation > 0 only, most active first).
 * Activations are taken at the one position each cache holds (the last prompt token, or the first generated token):
 * the position the directions, AUROCs and projections of the pipeline use, so a feature's top prompts are the ones
 * that push the measured state along it — not a maximum over tokens the analyses never read.
 * Pure: the caller reads the caches and names the rows.
 */
import { attributionFromMeans, classMeanActivations, decoderCosines, decoderProjections, topActivatingRows, type EncodeRows } from './features.ts';
import type { Sae } from './types.ts';

/** A direction at the SAE's hidden row. */
export interface NamedDirection {
  /** e.g. refusal.chatbot, schema.harmful */
  name: string;
  label: string;
  /** [d_in] */
  v: ArrayLike<number>;
}

/** One condition's activations at the SAE's hidden row, one row per prompt. */
export interface ConditionRows {
  /** e.g. prompt.agent.schema */
  name: string;
  label: string;
  /** [n, d_in] */
  x: Float32Array;
  /** row keys `<pair>:harmful|benign` (labels come from the suffix) */
  keys: readonly string[];
}

export interface FeatureRow {
  index: number;
  /** cos(W_dec[j], r) */
  cosine: number;
  /** (harmful − benign mean activation in this condition) × W_dec[j]·r̂ */
  attribution: number;
  meanDiff: number;
  /** the condition's rows it is most active on */
  top: { key: string; activation: number }[];
}

export interface DirectionFeatures {
  condition: string;
  direction: string;
  /** the top N by decoder cosine, best first */
  byCosine: FeatureRow[];
  /** the top N by |attribution|, largest first */
  byAttribution: FeatureRow[];
}

export interface DirectionFeatureOptions {
  /** features listed per ranking */
  top: number;
  /** activating rows per feature */
  k: number;
  encodeRows?: EncodeRows;
}

const labelOf = (key: string): number => (key.endsWith(':harmful') ? 1 : key.endsWith(':benign') ? 0 : -1);

/** Per condition × direction (condition-major): the leading features by cosine and by attribution, with their top rows. */
export async function directionFeatures(sae: Sae, directions: readonly NamedDirection[], conditions: readonly ConditionRows[], o: DirectionFeatureOptions): Promise<DirectionFeatures[]> {
  // properties of the dictionary: one pass over W_dec per direction, shared by every condition
  const cosines = directions.map((d) => decoderCosines(sae, d.v));
  const projections = directions.map((d) => decoderProjections(sae, d.v));
  const out: DirectionFeatures[] = [];
  for (const c of conditions) {
    const n = c.keys.length;
    const means = await classMeanActivations(sae, c.x, c.keys.map(labelOf), o.encodeRows);
    const perDirection = directions.map((d, i) => {
      const attribution = attributionFromMeans(projections[i]!, means);
      return { d, cos: cosines[i]!.slice(0, o.top), attr: attribution.slice(0, o.top), byIndex: new Map(attribution.map((a) => [a.index, a])) };
    });
    const listed = [...new Set(perDirection.flatMap((p) => [...p.cos, ...p.attr].map((f) => f.index)))];
    const tops = await topActivatingRows(sae, c.x, n, listed, o.k, o.encodeRows);
    for (const p of perDirection) {
      const cosineOf = new Map(cosines[directions.indexOf(p.d)]!.map((f) => [f.index, f.cosine]));
      const row = (j: number): FeatureRow => {
        const a = p.byIndex.get(j)!;
        return { index: j, cosine: cosineOf.get(j)!, attribution: a.attribution, meanDiff: a.meanDiff, top: (tops.get(j) ?? []).map((t) => ({ key: c.keys[t.row]!, activation: t.activation })) };
      };
      out.push({ condition: c.name, direction: p.d.name, byCosine: p.cos.map((f) => row(f.index)), byAttribution: p.attr.map((f) => row(f.index)) });
    }
  }
  return out;
}
