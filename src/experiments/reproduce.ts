/**
 * `safekeep reproduce`: extract → analyses → figures → report, reusing caches.
 *   1. cache the final-prompt-token residual stream for Table 1's configurations (chatbot, +role, +instructions,
 *      +tools = agent.schema, chatbot-long) and Table 2's representations (agent.schema, .flattened, .pseudoword),
 *      and the first generated token for agent.schema / agent.flattened (Figure 4);
 *   2. analyze(): chatbot refusal direction, ℓ* by cross-validation on the extraction split, AUROC tables with
 *      paired bootstrap intervals on the evaluation split, Schema Direction cosines with baselines, projections;
 *   3. behavioural refusal: greedy answers to the evaluation split's harmful requests as chatbot and as agent (§3.1);
 *   4. writeReport(): tables (md/csv/json), figures (svg/png), report.html under results/<model>/;
 *   5. directions.safetensors next to them: every configuration's refusal direction, the Schema Directions, ℓ*
 *      (directions-file.ts), for `steer --direction FILE`, `generate --intervene` and Python;
 *   6. with an SAE (`--sae DIR`): the features of the refusal and Schema Directions in each condition of
 *      Figures 3–4 with their top-activating prompts (sae-features.ts), a figure and a section of report.html.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { analyze, type ConfigActivations, type FirstTokenInput } from '../analysis/analyze.ts';
import { makeActivations } from '../analysis/activations.ts';
import { refusalDirection, type Directions } from '../analysis/direction.ts';
import { matchRows, schemaDirection } from '../analysis/schema-direction.ts';
import { DIRECTIONS_FILE, writeDirectionsFile } from './directions-file.ts';
import type { AnalysisResults, BehaviouralRefusal, LayerRule, SchemaDirectionPairs } from '../analysis/results.ts';
import { behaviouralRefusal } from './behavioural.ts';
import { readActivationCache } from '../cache/store.ts';
import { groupMap } from '../data/split.ts';
import { writeReport, type ReportFiles } from '../report/write-report.ts';
import type { Sae } from '../sae/types.ts';
import { checkSae, saeFeaturesSection } from './sae-features.ts';
import type { Shard } from '../util/shard.ts';
import {
  conditionName, conditionPass, firstTokenCacheName, openContext, promptAndFirstTokenPass, promptCacheName, runPasses, runShard,
  type Condition, type ShardSummary, type ContextOptions, type ExtractContext, type ExtractPass,
} from './extract.ts';

/** Pairs in `--quick` mode: sized so a 0.5B model finishes on a 2-core CPU in under 30 minutes. */
export const QUICK_PAIRS = 30;

export const TABLE1: readonly { c: Condition; label: string }[] = [
  { c: { config: '+role', repr: null }, label: '+role' },
  { c: { config: '+instructions', repr: null }, label: '+instructions' },
  { c: { config: 'agent', repr: 'schema' }, label: '+tools (full agent)' },
  { c: { config: 'chatbot-long', repr: null }, label: 'chatbot-long (length control)' },
];
export const TABLE2: readonly { c: Condition; label: string }[] = [
  { c: { config: 'agent', repr: 'schema' }, label: 'agent, JSON schema' },
  { c: { config: 'agent', repr: 'flattened' }, label: 'agent, flattened prose' },
  { c: { config: 'agent', repr: 'pseudoword' }, label: 'agent, pseudoword schema' },
];
const CHATBOT: Condition = { config: 'chatbot', repr: null };

/** What the analysis stage needs: the caches and the run's context, no engine (so `merge` can run it). */
type AnalysisContext = Pick<ExtractContext, 'cacheDir' | 'split' | 'modelDir' | 'modelName' | 'baseManifest'> & {
  /** pair id → group (scenario / behaviour stem): bootstrap and CV folds resample groups */
  groups: ReadonlyMap<string, string>;
};

/** How the analyses run: the protocol options of reproduce, and the behavioural refusal measured (if any). */
interface AnalyzeOptions {
  quick: boolean;
  reps: number;
  layerRule?: LayerRule;
  schemaPairs?: SchemaDirectionPairs;
  splitSeed?: number;
  /** new tokens per answer of the behavioural refusal that ran (0 = not run) */
  refusalTokens: number;
  behavioural?: BehaviouralRefusal;
  /** `--sae DIR`: the dictionary (opened at the CLI edge) and pair id → prompt texts for the snippets */
  sae?: ReproduceSae;
  texts?: ReadonlyMap<string, { harmful: string; benign: string }>;
}

/** An SAE for the features section: the loaded dictionary and where it came from. */
export interface ReproduceSae {
  sae: Sae;
  source: string;
  /** features per ranking (default 5) and activating prompts per feature (default 3) */
  top?: number;
  k?: number;
}

/** Row labels/ids/splits of a cache (rows `<pairId>:harmful|benign`, in the same order for every cache). */
function configActivations(ctx: AnalysisContext, cacheName: string, name: string, label: string): ConfigActivations {
  const cache = readActivationCache(ctx.cacheDir, cacheName);
  const rows = (cache.manifest.rows as { key: string }[]).map((r) => r.key);
  const pairIds = rows.map((k) => k.slice(0, k.lastIndexOf(':')));
  const labels = Uint8Array.from(rows, (k) => (k.endsWith(':harmful') ? 1 : 0));
  const ext = new Set(ctx.split.extraction);
  const extraction: number[] = [];
  const evaluation: number[] = [];
  pairIds.forEach((p, i) => (ext.has(p) ? extraction : evaluation).push(i));
  const groups = pairIds.map((p) => ctx.groups.get(p) ?? p);
  return { name, label, acts: makeActivations(cache.n, cache.layers, cache.d, cache.data), labels, pairIds, groups, extraction, evaluation };
}

interface ReproduceOptions extends ContextOptions {
  quick?: boolean;
  /** bootstrap / baseline repetitions (default 1000) */
  reps?: number;
  /** ℓ* rule (default 'cv') */
  layerRule?: LayerRule;
  /** Schema Direction pairs (default 'all', the paper's Eq. 2) */
  schemaPairs?: SchemaDirectionPairs;
  /** behavioural refusal (chatbot vs agent): new tokens per answer; 0 = skip (default 64) */
  refusalTokens?: number;
  /** the SAE features section (absent: the report says no SAE was given) */
  sae?: ReproduceSae;
}

export const DEFAULT_REFUSAL_TOKENS = 64;

export interface ReproduceResult {
  outDir: string;
  results: AnalysisResults;
  files: ReportFiles;
  /** directions.safetensors (directions-file.ts) */
  directionsFile: string;
}

/** The extraction passes of `reproduce`, in order (the same list for one process and for every shard). */
function reproducePasses(ctx: ExtractContext): ExtractPass[] {
  // agent.schema and agent.flattened: last prompt token and first generated token from one prefill
  const passes = [promptAndFirstTokenPass(ctx, 'schema'), promptAndFirstTokenPass(ctx, 'flattened')];
  const seen = new Set<string>(['agent.schema', 'agent.flattened']);
  for (const c of [CHATBOT, ...TABLE1.map((t) => t.c), ...TABLE2.map((t) => t.c)]) {
    if (seen.has(conditionName(c))) continue;
    seen.add(conditionName(c));
    passes.push(conditionPass(ctx, c));
  }
  return passes;
}

const limitOf = (o: ReproduceOptions): number | undefined => o.limit ?? (o.quick ? QUICK_PAIRS : undefined);

export async function reproduce(o: ReproduceOptions): Promise<ReproduceResult> {
  const limit = limitOf(o);
  const ctx = await openContext({ ...o, ...(limit !== undefined ? { limit } : {}) });
  const refusalTokens = o.refusalTokens ?? DEFAULT_REFUSAL_TOKENS;
  let behavioural: BehaviouralRefusal | undefined;
  try {
    // a dictionary that cannot be compared with the run's directions fails before any extraction
    if (o.sae) checkSae(o.sae.sae, ctx.engine.numLayers, ctx.engine.dModel);
    // passes are built one at a time: a pass's plan depends on the caches earlier passes completed
    await runPasses(ctx, [promptAndFirstTokenPass(ctx, 'schema')]);
    await runPasses(ctx, [promptAndFirstTokenPass(ctx, 'flattened')]);
    await runPasses(ctx, reproducePasses(ctx).slice(2));
    if (refusalTokens > 0) behavioural = await behaviouralRefusal(ctx, refusalTokens);
  } finally {
    await ctx.engine.dispose();
  }
  const texts = new Map(ctx.set.pairs.map((p) => [p.id, { harmful: p.harmful.prompt, benign: p.benign.prompt }]));
  return analyzeAndReport({ ...ctx, groups: groupMap(ctx.set.pairs) }, {
    ...analyzeOptions(o), refusalTokens, ...(behavioural ? { behavioural } : {}), ...(o.sae ? { sae: o.sae, texts } : {}),
  });
}

const analyzeOptions = (o: ReproduceOptions): Omit<AnalyzeOptions, 'refusalTokens'> => ({
  quick: Boolean(o.quick), reps: o.reps ?? 1000,
  ...(o.layerRule ? { layerRule: o.layerRule } : {}), ...(o.schemaPairs ? { schemaPairs: o.schemaPairs } : {}),
  ...(o.splitSeed !== undefined ? { splitSeed: o.splitSeed } : {}),
});

/**
 * `reproduce --shard i/n`: only the extraction part, and only this shard's batches (token-balanced over every
 * pass), into results/<model>/shards/reproduce/shard-<i>-of-<n>/. `safekeep merge` then assembles the caches and
 * runs the analyses and report.
 */
export async function reproduceShard(o: ReproduceOptions, shard: Shard): Promise<ShardSummary> {
  const limit = limitOf(o);
  const ctx = await openContext({ ...o, ...(limit !== undefined ? { limit } : {}) });
  try {
    // behavioural refusal needs generation, which the merge job does not run: a sharded reproduce records 0 here
    // (run `reproduce` once after the merge: it reuses every cache and only generates)
    const merge: ReproduceMergeOptions = {
      modelDir: ctx.modelDir, modelName: ctx.modelName, baseManifest: ctx.baseManifest, ...analyzeOptions(o), refusalTokens: 0,
      groups: Object.fromEntries(groupMap(ctx.set.pairs)),
    };
    return await runShard(ctx, 'reproduce', reproducePasses(ctx), shard, { ...merge });
  } finally {
    await ctx.engine.dispose();
  }
}

/** Analyses, tables, figures and report from the caches (after extraction, or after `merge`). */
async function analyzeAndReport(ctx: AnalysisContext, o: AnalyzeOptions): Promise<ReproduceResult> {
  const ca = (c: Condition, label: string): ConfigActivations => configActivations(ctx, promptCacheName(c), conditionName(c), label);
  const chatbot = ca(CHATBOT, 'chatbot');
  const table1 = TABLE1.map((t) => ca(t.c, t.label));
  const table2 = TABLE2.map((t) => ca(t.c, t.label));
  const firstToken: FirstTokenInput[] = [];
  for (const repr of ['schema', 'flattened'] as const) {
    const f = configActivations(ctx, firstTokenCacheName(repr), `first.${repr}`, repr);
    for (const [category, y] of [['harmful', 1], ['benign', 0]] as const) {
      firstToken.push({ category, representation: repr, acts: f.acts, rows: f.evaluation.filter((i) => f.labels[i] === y) });
    }
  }
  const plantedPath = join(ctx.modelDir, 'PLANTED.json');
  const synthetic = existsSync(plantedPath);
  const reps = o.reps;
  const results = analyze({
    model: ctx.modelName,
    synthetic,
    chatbot,
    table1,
    table2,
    schemaPair: { schema: table2[0]!, text: table2[1]! },
    firstToken,
    manifest: {
      ...ctx.baseManifest,
      quick: o.quick,
      caches: ctx.cacheDir,
      // the protocol values of this run (docs/protocol.md)
      protocol: {
        split: `group-disjoint 7:3 (bundled pairs by scenario, AgentHarm by behavior stem), seed ${o.splitSeed ?? 0}`,
        intervals: 'bootstrap and CV folds resample groups',
        layerRule: o.layerRule ?? 'cv',
        schemaDirectionPairs: o.schemaPairs ?? 'all',
        thinking: ctx.baseManifest.thinking,
        behaviouralRefusalTokens: o.refusalTokens,
      },
      ...(synthetic ? { planted: JSON.parse(readFileSync(plantedPath, 'utf8')) as unknown } : {}),
    },
    options: { reps, randomReps: reps, permutationReps: reps, layerRule: o.layerRule ?? 'cv', schemaPairs: o.schemaPairs ?? 'all' },
  });
  if (o.behavioural) results.behavioural = o.behavioural;
  const outDir = join(ctx.cacheDir, '..');
  const directions = runDirections(chatbot, [...table1, ...table2], table2[0]!, table2[1]!, o.schemaPairs ?? 'all');
  if (o.sae) {
    results.saeFeatures = await saeFeaturesSection({
      ...o.sae, cacheDir: ctx.cacheDir, directions, lStar: results.lStar.layer, layers: results.layers, ...(o.texts ? { texts: o.texts } : {}),
    });
  }
  const files = await writeReport(outDir, results);
  const directionsFile = join(outDir, DIRECTIONS_FILE);
  writeDirectionsFile(directionsFile, directions, {
    model: ctx.modelName, lStar: results.lStar.layer, layerRule: results.lStar.rule ?? 'cv', schemaPairs: o.schemaPairs ?? 'all', provenance: results.manifest,
  });
  return { outDir, results, files, directionsFile };
}

/**
 * The directions of the run, as analyze() computes them: each configuration's refusal direction on its extraction
 * split (`refusal.<name>`), and the Schema Direction per category over the requests present in both the schema and
 * the flattened caches (`schema.harmful`, `schema.benign`; rows of 'all' pairs or the extraction split).
 */
function runDirections(chatbot: ConfigActivations, configs: readonly ConfigActivations[], schema: ConfigActivations, text: ConfigActivations,
  pairs: SchemaDirectionPairs): Record<string, Directions> {
  const out: Record<string, Directions> = {};
  for (const c of [chatbot, ...configs]) out[`refusal.${c.name}`] ??= refusalDirection(c.acts, c.labels, c.extraction);
  const rowsOf = (c: ConfigActivations) => (pairs === 'all' ? [...c.extraction, ...c.evaluation].sort((a, b) => a - b) : c.extraction);
  const keys = (c: ConfigActivations, rows: readonly number[]) => rows.map((r) => `${c.pairIds[r]}:${c.labels[r]}`);
  for (const [cat, y] of [['harmful', 1], ['benign', 0]] as const) {
    const sRows = rowsOf(schema).filter((i) => schema.labels[i] === y);
    const tRows = rowsOf(text).filter((i) => text.labels[i] === y);
    const m = matchRows(keys(schema, sRows), keys(text, tRows));
    if (m.a.length > 0) out[`schema.${cat}`] = schemaDirection(schema.acts, text.acts, m.a.map((i) => sRows[i]!), m.b.map((i) => tRows[i]!));
  }
  return out;
}

/** The options a reproduce shard records for merge: the analysis context (less the cache folder) and the run's options. */
export interface ReproduceMergeOptions extends AnalyzeOptions {
  modelDir: string;
  modelName: string;
  baseManifest: Record<string, unknown>;
  /** pair id → group, as the shards saw the pair set */
  groups: Record<string, string>;
}

/** After `merge` assembled the caches of a sharded reproduce: the analyses and report, as one process would. */
export function finishReproduce(resultsDir: string, m: ReproduceMergeOptions): Promise<ReproduceResult> {
  const split = (m.baseManifest.dataset as { split: ExtractContext['split'] }).split;
  const { modelDir, modelName, baseManifest, groups, ...o } = m;
  return analyzeAndReport({ cacheDir: join(resultsDir, 'cache'), split, modelDir, modelName, baseManifest, groups: new Map(Object.entries(groups)) }, o);
}
