/**
 * `safekeep reproduce`: extract → analyses → figures → report, reusing caches.
 *   1. cache the final-prompt-token residual stream for Table 1's configurations (chatbot, +role, +instructions,
 *      +tools = agent.schema, chatbot-long) and Table 2's representations (agent.schema, .flattened, .pseudoword),
 *      and the first generated token for agent.schema / agent.flattened (Figure 4);
 *   2. analyze(): chatbot refusal direction, ℓ* by cross-validation on the extraction split, AUROC tables with
 *      paired bootstrap intervals on the evaluation split, Schema Direction cosines with baselines, projections;
 *   3. writeReport(): tables (md/csv/json), figures (svg/png), report.html under results/<model>/.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { analyze, type ConfigActivations, type FirstTokenInput } from '../analysis/analyze.ts';
import { makeActivations } from '../analysis/activations.ts';
import type { AnalysisResults } from '../analysis/results.ts';
import { readActivationCache } from '../cache/store.ts';
import { writeReport, type ReportFiles } from '../report/write-report.ts';
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
export type AnalysisContext = Pick<ExtractContext, 'cacheDir' | 'split' | 'modelDir' | 'modelName' | 'baseManifest'>;

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
  return { name, label, acts: makeActivations(cache.n, cache.layers, cache.d, cache.data), labels, pairIds, extraction, evaluation };
}

export interface ReproduceOptions extends ContextOptions {
  quick?: boolean;
  /** bootstrap / baseline repetitions (default 1000) */
  reps?: number;
}

export interface ReproduceResult {
  outDir: string;
  results: AnalysisResults;
  files: ReportFiles;
}

/** The extraction passes of `reproduce`, in order (the same list for one process and for every shard). */
export function reproducePasses(ctx: ExtractContext): ExtractPass[] {
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
  try {
    // passes are built one at a time: a pass's plan depends on the caches earlier passes completed
    await runPasses(ctx, [promptAndFirstTokenPass(ctx, 'schema')]);
    await runPasses(ctx, [promptAndFirstTokenPass(ctx, 'flattened')]);
    await runPasses(ctx, reproducePasses(ctx).slice(2));
  } finally {
    await ctx.engine.dispose();
  }
  return analyzeAndReport(ctx, { quick: Boolean(o.quick), reps: o.reps ?? 1000 });
}

/**
 * `reproduce --shard i/n`: only the extraction part, and only this shard's batches (token-balanced over every
 * pass), into results/<model>/shards/reproduce/shard-<i>-of-<n>/. `safekeep merge` then assembles the caches and
 * runs the analyses and report.
 */
export async function reproduceShard(o: ReproduceOptions, shard: Shard): Promise<ShardSummary> {
  const limit = limitOf(o);
  const ctx = await openContext({ ...o, ...(limit !== undefined ? { limit } : {}) });
  try {
    const merge: ReproduceMergeOptions = { modelDir: ctx.modelDir, modelName: ctx.modelName, baseManifest: ctx.baseManifest, quick: Boolean(o.quick), reps: o.reps ?? 1000 };
    return await runShard(ctx, 'reproduce', reproducePasses(ctx), shard, { ...merge });
  } finally {
    await ctx.engine.dispose();
  }
}

/** Analyses, tables, figures and report from the caches (after extraction, or after `merge`). */
export async function analyzeAndReport(ctx: AnalysisContext, o: { quick: boolean; reps: number }): Promise<ReproduceResult> {
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
      ...(synthetic ? { planted: JSON.parse(readFileSync(plantedPath, 'utf8')) as unknown } : {}),
    },
    options: { reps, randomReps: reps, permutationReps: reps },
  });
  const outDir = join(ctx.cacheDir, '..');
  const files = await writeReport(outDir, results);
  return { outDir, results, files };
}

/** The options a reproduce shard records for merge: the analysis context (less the cache folder) and the run's options. */
export interface ReproduceMergeOptions {
  modelDir: string;
  modelName: string;
  baseManifest: Record<string, unknown>;
  quick: boolean;
  reps: number;
}

/** After `merge` assembled the caches of a sharded reproduce: the analyses and report, as one process would. */
export function finishReproduce(resultsDir: string, m: ReproduceMergeOptions): Promise<ReproduceResult> {
  const split = (m.baseManifest.dataset as { split: ExtractContext['split'] }).split;
  return analyzeAndReport({ cacheDir: join(resultsDir, 'cache'), split, modelDir: m.modelDir, modelName: m.modelName, baseManifest: m.baseManifest }, { quick: m.quick, reps: m.reps });
}
