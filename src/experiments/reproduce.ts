/**
 * `safekeep reproduce`: extract → analyses → figures → report, reusing caches.
 *   1. cache the final-prompt-token residual stream for Table 1's configurations (chatbot, +role, +instructions,
 *      +tools = agent.schema, chatbot-long) and Table 2's representations (agent.schema, .flattened, .pseudoword),
 *      and the first generated token for agent.schema / agent.flattened (Figure 4);
 *   2. analyze(): chatbot refusal direction, ℓ* by cross-validation on the extraction split, AUROC tables with
 *      paired bootstrap intervals on the evaluation split, Schema Direction cosines with baselines, projections;
 *   3. behavioural refusal: greedy answers to the evaluation split's harmful requests as chatbot and as agent (§3.1);
 *   4. writeReport(): tables (md/csv/json), figures (svg/png), report.html under results/<model>/.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { analyze, type ConfigActivations, type FirstTokenInput } from '../analysis/analyze.ts';
import { makeActivations } from '../analysis/activations.ts';
import type { AnalysisResults, BehaviouralRefusal, LayerRule, SchemaDirectionPairs } from '../analysis/results.ts';
import { behaviouralRefusal } from './behavioural.ts';
import { readActivationCache } from '../cache/store.ts';
import { groupMap } from '../data/split.ts';
import { writeReport, type ReportFiles } from '../report/write-report.ts';
import {
  conditionName, extractCondition, extractWithFirstToken, firstTokenCacheName, openContext, promptCacheName,
  type Condition, type ContextOptions, type ExtractContext,
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

/** Row labels/ids/splits of a cache (rows `<pairId>:harmful|benign`, in the same order for every cache). */
function configActivations(ctx: ExtractContext, cacheName: string, name: string, label: string): ConfigActivations {
  const cache = readActivationCache(ctx.cacheDir, cacheName);
  const rows = (cache.manifest.rows as { key: string }[]).map((r) => r.key);
  const pairIds = rows.map((k) => k.slice(0, k.lastIndexOf(':')));
  const labels = Uint8Array.from(rows, (k) => (k.endsWith(':harmful') ? 1 : 0));
  const ext = new Set(ctx.split.extraction);
  const extraction: number[] = [];
  const evaluation: number[] = [];
  pairIds.forEach((p, i) => (ext.has(p) ? extraction : evaluation).push(i));
  const group = groupMap(ctx.set.pairs);
  const groups = pairIds.map((p) => group.get(p) ?? p);
  return { name, label, acts: makeActivations(cache.n, cache.layers, cache.d, cache.data), labels, pairIds, groups, extraction, evaluation };
}

export interface ReproduceOptions extends ContextOptions {
  quick?: boolean;
  /** bootstrap / baseline repetitions (default 1000) */
  reps?: number;
  /** ℓ* rule (default 'cv') */
  layerRule?: LayerRule;
  /** Schema Direction pairs (default 'all', the paper's Eq. 2) */
  schemaPairs?: SchemaDirectionPairs;
  /** behavioural refusal (chatbot vs agent): new tokens per answer; 0 = skip (default 64) */
  refusalTokens?: number;
}

export const DEFAULT_REFUSAL_TOKENS = 64;

export interface ReproduceResult {
  outDir: string;
  results: AnalysisResults;
  files: ReportFiles;
}

export async function reproduce(o: ReproduceOptions): Promise<ReproduceResult> {
  const limit = o.limit ?? (o.quick ? QUICK_PAIRS : undefined);
  const ctx = await openContext({ ...o, ...(limit !== undefined ? { limit } : {}) });
  const refusalTokens = o.refusalTokens ?? DEFAULT_REFUSAL_TOKENS;
  let behavioural: BehaviouralRefusal | undefined;
  try {
    const conditions = [CHATBOT, ...TABLE1.map((t) => t.c), ...TABLE2.map((t) => t.c)];
    // agent.schema and agent.flattened: last prompt token and first generated token from one prefill
    await extractWithFirstToken(ctx, 'schema');
    await extractWithFirstToken(ctx, 'flattened');
    const seen = new Set<string>(['agent.schema', 'agent.flattened']);
    for (const c of conditions) {
      if (seen.has(conditionName(c))) continue;
      seen.add(conditionName(c));
      await extractCondition(ctx, c);
    }
    if (refusalTokens > 0) behavioural = await behaviouralRefusal(ctx, refusalTokens);
  } finally {
    await ctx.engine.dispose();
  }
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
  const reps = o.reps ?? 1000;
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
      quick: Boolean(o.quick),
      caches: ctx.cacheDir,
      // the protocol values of this run (docs/protocol.md)
      protocol: {
        split: `group-disjoint 7:3 (bundled pairs by scenario, AgentHarm by behavior stem), seed ${o.splitSeed ?? 0}`,
        intervals: 'bootstrap and CV folds resample groups',
        layerRule: o.layerRule ?? 'cv',
        schemaDirectionPairs: o.schemaPairs ?? 'all',
        thinking: ctx.baseManifest.thinking,
        behaviouralRefusalTokens: refusalTokens,
      },
      ...(synthetic ? { planted: JSON.parse(readFileSync(plantedPath, 'utf8')) as unknown } : {}),
    },
    options: { reps, randomReps: reps, permutationReps: reps, layerRule: o.layerRule ?? 'cv', schemaPairs: o.schemaPairs ?? 'all' },
  });
  if (behavioural) results.behavioural = behavioural;
  const outDir = join(ctx.cacheDir, '..');
  const files = await writeReport(outDir, results);
  return { outDir, results, files };
}
