/**
 * The paper's white-box analyses composed: from cached activations of every configuration to `AnalysisResults`.
 * 1. r = chatbot refusal direction (extraction split); ℓ* by k-fold CV on that split (or, `layerRule: 'peak'`,
 *    the paper's layer of peak chatbot AUROC).
 * 2. Table 1 / Table 2 / curves: r scores every configuration's evaluation split (cross-format) and each
 *    configuration's own direction scores its own evaluation split (within-format); paired bootstrap CIs.
 * 3. Schema Direction R_c = mean(h_schema − h_flattened) per category over every pair (the paper's Eq. 2; or the
 *    extraction split only), cosine with r, with random and label-permutation bands.
 * 4. First-token projections on r̂ for {harmful, benign} × {schema, flattened}.
 * 5. Norms of every direction and mean ‖h‖ per layer.
 */
import { SafekeepError } from '../util/errors.ts';
import type { Activations, Labels } from './activations.ts';
import { permutationCosineBand, randomCosineBand } from './baselines.ts';
import { chooseLayerByCV } from './crossval.ts';
import { type Directions, directionNorms, layerCosines, meanHiddenNorm, refusalDirection } from './direction.ts';
import { type EvalSet, type LayerwiseAuroc, layerwiseAuroc } from './format-transfer.ts';
import { projectionStats } from './projection.ts';
import type { AnalysisResults, AurocCI, FirstTokenSeries, LayerCurve, LayerRule, NormSeries, SchemaDirectionPairs, TableRow } from './results.ts';
import { matchRows, schemaDirection } from './schema-direction.ts';

/** One configuration's cached final-prompt-token activations with its split. */
export interface ConfigActivations {
  /** key, e.g. 'chatbot', 'agent-role', 'agent-full', 'schema', 'flattened', 'pseudoword' */
  name: string;
  /** reader-facing label (default: name) */
  label?: string;
  acts: Activations;
  /** [n] 1 = harmful, 0 = benign */
  labels: Labels;
  /** [n] */
  pairIds: readonly string[];
  /**
   * [n] resampling group of each row (scenario / behavior stem): bootstrap resamples and CV folds draw whole groups,
   * so pairs that share tools are never split between a fold's training and test rows. Default: the pair id.
   */
  groups?: readonly string[];
  /** extraction-split rows */
  extraction: readonly number[];
  /** evaluation-split rows */
  evaluation: readonly number[];
}

export interface FirstTokenInput {
  category: 'harmful' | 'benign';
  representation: 'schema' | 'flattened';
  /** [n, L+1, d] first generated token residuals */
  acts: Activations;
  rows?: readonly number[];
}

export interface AnalysisInput {
  model: string;
  synthetic?: boolean;
  /** source of the refusal direction; also the reference row of both tables */
  chatbot: ConfigActivations;
  /** Table 1 configurations besides the chatbot (+role, +instructions, +tools, chatbot-long) */
  table1: readonly ConfigActivations[];
  /** Table 2 representations of the agent format (schema, flattened, pseudoword) */
  table2: readonly ConfigActivations[];
  /** Schema Direction inputs: same requests with JSON schemas and with flattened prose */
  schemaPair?: { schema: ConfigActivations; text: ConfigActivations };
  firstToken?: readonly FirstTokenInput[];
  manifest?: Record<string, unknown>;
  options?: {
    /** bootstrap reps (default 1000) */
    reps?: number;
    seed?: number;
    /** CV folds for ℓ* (default 5) */
    k?: number;
    /** random-direction draws (default 1000) */
    randomReps?: number;
    /** label permutations (default 1000) */
    permutationReps?: number;
    /** ℓ*: 'cv' (default; 5-fold CV on the extraction split) or 'peak' (the paper: peak chatbot AUROC, evaluation split) */
    layerRule?: LayerRule;
    /** Schema Direction over 'all' pairs (default; the paper's Eq. 2) or the 'extraction' split only */
    schemaPairs?: SchemaDirectionPairs;
  };
}

function toEval(c: ConfigActivations): EvalSet {
  return { name: c.name, acts: c.acts, labels: c.labels, pairIds: c.groups ?? c.pairIds, rows: c.evaluation };
}

/** Same shape and the same numbers (the same cache loaded twice counts as the same set). */
function sameActivations(a: Activations, b: Activations): boolean {
  if (a === b || a.data === b.data) return true;
  if (a.n !== b.n || a.layers !== b.layers || a.d !== b.d) return false;
  for (let i = 0; i < a.data.length; i++) if (a.data[i] !== b.data[i]) return false;
  return true;
}

/** Each configuration's own refusal direction (its extraction split), computed once per configuration name. */
function ownDirections(): (c: ConfigActivations) => Directions {
  const cache = new Map<string, Directions>();
  return (c) => {
    let d = cache.get(c.name);
    if (!d) {
      d = refusalDirection(c.acts, c.labels, c.extraction);
      cache.set(c.name, d);
    }
    return d;
  };
}

const round = (x: number): number => Math.round(x * 1e6) / 1e6;
const ci = (e: AurocCI): AurocCI => ({ auroc: round(e.auroc), lo: round(e.lo), hi: round(e.hi), n: e.n });

function curves(res: readonly LayerwiseAuroc[], configs: readonly ConfigActivations[], direction: 'chatbot' | 'own'): LayerCurve[] {
  return res.map((r, i) => ({
    config: r.name,
    label: configs[i]!.label ?? r.name,
    direction,
    perLayer: r.perLayer.map(ci),
  }));
}

function tableRows(
  configs: readonly ConfigActivations[],
  cross: readonly LayerwiseAuroc[],
  within: readonly LayerwiseAuroc[],
  layer: number,
): TableRow[] {
  return configs.map((c, i) => {
    const d = cross[i]!.diffToReference[layer]!;
    return {
      config: c.name,
      label: c.label ?? c.name,
      layer,
      cross: ci(cross[i]!.perLayer[layer]!),
      crossDiff: { diff: round(d.diff), lo: round(d.lo), hi: round(d.hi) },
      within: ci(within[i]!.perLayer[layer]!),
    };
  });
}

function requestKeys(c: ConfigActivations, rows: readonly number[]): string[] {
  return rows.map((r) => `${c.pairIds[r]}:${c.labels[r]}`);
}

/** Index of the largest value over layers 1..L (the embedding layer 0 is never a candidate); ties → the earliest. */
export function peakLayer(perLayer: readonly number[]): number {
  let best = 1;
  for (let l = 2; l < perLayer.length; l++) if (perLayer[l]! > perLayer[best]!) best = l;
  return best;
}

export function analyze(input: AnalysisInput): AnalysisResults {
  const o = input.options ?? {};
  const reps = o.reps ?? 1000;
  const seed = o.seed ?? 0;
  const level = 0.95;
  const { chatbot } = input;
  const { layers, d } = chatbot.acts;
  const all = [chatbot, ...input.table1, ...input.table2];
  const names = new Map<string, ConfigActivations>();
  for (const c of all) {
    const prev = names.get(c.name);
    // the same configuration may appear in both tables (e.g. the full agent with schemas), possibly under
    // another label; what must not happen is one name for two different activation sets
    if (prev && !sameActivations(prev.acts, c.acts)) {
      throw new SafekeepError(`configuration name '${c.name}' is used for two different activation sets`);
    }
    if (!prev) names.set(c.name, c);
    if (c.acts.layers !== layers || c.acts.d !== d) {
      throw new SafekeepError(`configuration '${c.name}': activations [${c.acts.layers}, ${c.acts.d}] differ from chatbot [${layers}, ${d}]`);
    }
  }
  const r = refusalDirection(chatbot.acts, chatbot.labels, chatbot.extraction);
  const choice = chooseLayerByCV(chatbot.acts, chatbot.labels, chatbot.groups ?? chatbot.pairIds, chatbot.extraction, { k: o.k ?? 5, seed });
  const layerRule: LayerRule = o.layerRule ?? 'cv';
  const bopts = { reps, seed, level };

  const t1 = [chatbot, ...input.table1];
  const t2 = [chatbot, ...input.table2];
  const t1Cross = layerwiseAuroc(r, t1.map(toEval), bopts);
  // 'peak': the paper's reading — the layer (1..L) where the chatbot direction separates the chatbot's evaluation
  // requests best (ties → the earliest); it looks at evaluation data, hence not our default
  const lStar = layerRule === 'peak' ? peakLayer(t1Cross[0]!.perLayer.map((e) => e.auroc)) : choice.layer;
  const own = ownDirections();
  const byName = names;
  const ownOf = (t: EvalSet): Directions => own(byName.get(t.name)!);
  const t1Own = layerwiseAuroc(ownOf, t1.map(toEval), bopts);
  const t2Cross = layerwiseAuroc(r, t2.map(toEval), bopts);
  const t2Own = layerwiseAuroc(ownOf, t2.map(toEval), bopts);

  const res: AnalysisResults = {
    version: 1,
    model: input.model,
    layers,
    dModel: d,
    synthetic: input.synthetic ?? false,
    lStar: {
      layer: lStar,
      rule: layerRule,
      method: layerRule === 'peak'
        ? 'peak chatbot AUROC on the evaluation split (the paper\'s rule; --layer-rule peak)'
        : `${choice.k}-fold cross-validation over ${chatbot.groups ? 'groups' : 'pairs'} on the chatbot extraction split, seed ${seed} (--layer-rule cv)`,
      cvAuroc: choice.cvAuroc.map((x) => (Number.isNaN(x) ? null : round(x))),
    },
    bootstrap: { reps, seed, level, groups: new Set(chatbot.evaluation.map((i) => (chatbot.groups ?? chatbot.pairIds)[i])).size },
    curves: [...curves(t1Cross, t1, 'chatbot'), ...curves(t2Cross.slice(1), t2.slice(1), 'chatbot'), ...curves(t1Own, t1, 'own'), ...curves(t2Own.slice(1), t2.slice(1), 'own')],
    table1: tableRows(t1, t1Cross, t1Own, lStar),
    table2: tableRows(t2, t2Cross, t2Own, lStar),
    norms: { directions: [], meanHidden: [] },
    manifest: input.manifest ?? {},
  };

  const dirNorms: NormSeries[] = [{ name: 'refusal (chatbot)', norm: [...directionNorms(r)].map(round) }];
  for (const c of byName.values()) {
    if (c.name !== chatbot.name) dirNorms.push({ name: `refusal (${c.label ?? c.name})`, norm: [...directionNorms(own(c))].map(round) });
  }
  if (input.schemaPair) {
    const { schema, text } = input.schemaPair;
    const cats: Record<'harmful' | 'benign', Directions> = {} as Record<'harmful' | 'benign', Directions>;
    const counts = { harmful: 0, benign: 0 };
    const schemaPairs: SchemaDirectionPairs = o.schemaPairs ?? 'all';
    const rowsOf = (c: ConfigActivations) => (schemaPairs === 'all' ? [...c.extraction, ...c.evaluation].sort((a, b) => a - b) : c.extraction);
    for (const [cat, y] of [['harmful', 1], ['benign', 0]] as const) {
      const sRows = rowsOf(schema).filter((i) => schema.labels[i] === y);
      const tRows = rowsOf(text).filter((i) => text.labels[i] === y);
      const m = matchRows(requestKeys(schema, sRows), requestKeys(text, tRows));
      if (m.a.length === 0) throw new SafekeepError(`Schema Direction: no ${cat} request present in both '${schema.name}' and '${text.name}'`);
      cats[cat] = schemaDirection(schema.acts, text.acts, m.a.map((i) => sRows[i]!), m.b.map((i) => tRows[i]!));
      counts[cat] = m.a.length;
      dirNorms.push({ name: `Schema Direction (${cat})`, norm: [...directionNorms(cats[cat])].map(round) });
    }
    const rb = randomCosineBand(r, { reps: o.randomReps ?? 1000, seed, level });
    const pb = permutationCosineBand(chatbot.acts, chatbot.labels, cats.harmful, chatbot.extraction, {
      reps: o.permutationReps ?? 1000,
      seed,
      level,
    });
    res.schemaCosines = {
      harmful: [...layerCosines(cats.harmful, r)].map(round),
      benign: [...layerCosines(cats.benign, r)].map(round),
      randomBand: { lo: rb.lo.map(round), hi: rb.hi.map(round), reps: rb.reps, level },
      permutationBand: { lo: pb.lo.map(round), hi: pb.hi.map(round), reps: pb.reps, level },
      n: counts,
      pairs: schemaPairs,
    };
  }
  if (input.firstToken) {
    res.firstToken = input.firstToken.map((f): FirstTokenSeries => {
      const s = projectionStats(f.acts, r, f.rows);
      return { category: f.category, representation: f.representation, n: s.n, mean: s.mean.map(round), sd: s.sd.map(round) };
    });
  }
  const seen = new Set<string>();
  for (const c of all) {
    if (seen.has(c.name)) continue;
    seen.add(c.name);
    res.norms.meanHidden.push({ name: c.label ?? c.name, norm: [...meanHiddenNorm(c.acts, c.evaluation)].map(round) });
  }
  res.norms.directions = dirNorms;
  return res;
}
