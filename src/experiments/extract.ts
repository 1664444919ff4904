/**
 * Extraction stage (paper §3): for every request of a pair set, render each prompt configuration with the model's
 * own chat template, run the model, and cache the residual stream at the final prompt token for all layers
 * (`prompt.<config>[.<repr>]`), plus — for {harmful, benign} × {schema, flattened} — the residual stream of the
 * first generated token (`first.<repr>`). Caches live in `results/<model>/cache/` and are resumable (cache/store.ts).
 *
 * Rows are the pairs in set order, each as `<pairId>:harmful` then `<pairId>:benign`, identical for every
 * configuration, so rows align across caches (the Schema Direction pairs h_schema and h_text row by row).
 */
import { basename, join, resolve } from 'node:path';
import { createEngine, type EngineOptions } from '../engine/engine.ts';
import { GRAPH_VERSION } from '../engine/session.ts';
import { describePlan, planRecord, type MemoryPlan } from '../engine/memory.ts';
import { plannedReuse, prefixPlan, PrefixCache } from '../engine/prefix.ts';
import type { Engine } from '../engine/types.ts';
import { loadCheckpoint } from '../checkpoint/load.ts';
import { loadPairSet } from '../data/load.ts';
import { splitPairs } from '../data/split.ts';
import type { PairSet, Split } from '../data/types.ts';
import { PromptBuilder, type ConfigName, type ToolRepr } from '../prompts/configurations.ts';
import { loadPromptTexts } from '../prompts/texts.ts';
import { loadPromptTokenizer, type PromptTokenizer } from '../prompts/tokenizer.ts';
import { resolveTemplateKwargs, type ThinkingFlag } from '../prompts/thinking.ts';
import { SafekeepError } from '../util/errors.ts';
import { buildActivationCache, buildActivationCaches, cacheIsComplete, type BatchCompute, type CacheRow, type StoreResult } from '../cache/store.ts';

export const ENGINE_VERSION = `safekeep-engine graph v${GRAPH_VERSION}`;

/** A cached prompt condition: a configuration and, for `agent`, a tool representation. */
export interface Condition {
  config: ConfigName;
  repr: ToolRepr | null;
}

export function conditionName(c: Condition): string {
  return c.config === 'agent' ? `agent.${c.repr ?? 'schema'}` : c.config;
}

/** `chatbot`, `+role`, `agent.schema`, `agent.flattened` ... → Condition */
export function parseCondition(s: string): Condition {
  const [config, repr] = s.split('.');
  const configs: readonly string[] = ['chatbot', '+role', '+instructions', 'agent', 'chatbot-long'];
  if (!configs.includes(config!)) throw new SafekeepError(`unknown configuration '${s}' (known: ${configs.join(', ')}; agent.schema|flattened|pseudoword)`);
  if (config === 'agent') {
    const r = repr ?? 'schema';
    if (!['schema', 'flattened', 'pseudoword'].includes(r)) throw new SafekeepError(`unknown tool representation '${r}' (schema, flattened, pseudoword)`);
    return { config: 'agent', repr: r as ToolRepr };
  }
  if (repr) throw new SafekeepError(`'${s}': only the agent configuration takes a representation`);
  return { config: config as ConfigName, repr: null };
}

/** Cache file names (without extension) of a condition. */
export const promptCacheName = (c: Condition): string => `prompt.${conditionName(c)}`;
export const firstTokenCacheName = (repr: ToolRepr): string => `first.${repr}`;

export interface ExtractContext {
  modelDir: string;
  /** short model name used for results/<model>/ */
  modelName: string;
  engine: Engine;
  tok: PromptTokenizer;
  builder: PromptBuilder;
  set: PairSet;
  split: Split;
  cacheDir: string;
  baseManifest: Record<string, unknown>;
  batchTokens: number;
  /** the engine's --max-memory plan (sizes the prefix cache); absent = no budget */
  memoryPlan?: MemoryPlan | null;
}

export interface ContextOptions {
  model: string;
  data: string;
  /** results root (default `results`) */
  results?: string;
  /** engine options (dtype, device, threads) */
  engine?: EngineOptions;
  template?: string;
  splitSeed?: number;
  /** keep only n pairs: round-robin over categories in set order, so a subset still spans every category */
  limit?: number;
  batchTokens?: number;
  /** --thinking: default off on templates with a thinking switch (prompts/thinking.ts) */
  thinking?: ThinkingFlag;
  /** --chat-template-kwargs */
  chatTemplateKwargs?: Record<string, unknown>;
}

/** n pairs taken round-robin over categories (each category in set order); result in set order. */
export function stratifiedSubset<T extends { category: string }>(pairs: readonly T[], n: number): T[] {
  if (n >= pairs.length) return [...pairs];
  const byCat = new Map<string, number[]>();
  pairs.forEach((p, i) => {
    const l = byCat.get(p.category) ?? [];
    l.push(i);
    byCat.set(p.category, l);
  });
  const queues = [...byCat.values()];
  const picked: number[] = [];
  for (let k = 0; picked.length < n; k++) {
    for (const q of queues) if (k < q.length && picked.length < n) picked.push(q[k]!);
  }
  return picked.sort((a, b) => a - b).map((i) => pairs[i]!);
}

/** Opens model, tokenizer, template, data and split once for every stage of a run. */
export async function openContext(o: ContextOptions): Promise<ExtractContext> {
  const modelDir = resolve(o.model);
  const ckpt = await loadCheckpoint(modelDir);
  const tok = await loadPromptTokenizer(modelDir, o.template ? { template: o.template } : {});
  if (tok.vocab === 'none') throw new SafekeepError(`${o.model}: no tokenizer.json; extraction needs token ids`);
  const texts = loadPromptTexts();
  const template = resolveTemplateKwargs(tok.template, o.thinking, o.chatTemplateKwargs);
  const builder = new PromptBuilder(tok, { texts, templateKwargs: template.kwargs });
  let set = await loadPairSet(o.data);
  if (o.limit !== undefined) set = { ...set, pairs: stratifiedSubset(set.pairs, o.limit) };
  const split = splitPairs(set, o.splitSeed ?? 0);
  const engineOptions: EngineOptions = { dtype: 'f32', device: 'cpu', ...o.engine };
  const engine = await createEngine(modelDir, engineOptions);
  // --max-memory: the engine's plan (batches, chunked prefill, prefix cache) is printed and recorded in every manifest
  if (engine.memoryPlan) process.stderr.write(`${describePlan(engine.memoryPlan)}\n`);
  const modelName = basename(modelDir);
  const cacheDir = join(resolve(o.results ?? 'results'), modelName, 'cache');
  const baseManifest = {
    model: { dir: o.model, configHash: ckpt.configHash, family: ckpt.config.family, layers: ckpt.config.numLayers, dModel: ckpt.config.hiddenSize, dtype: engineOptions.dtype },
    prompts: builder.manifest(),
    thinking: template.thinking,
    dataset: { name: set.name, hash: set.hash, pairs: set.pairs.length, limit: o.limit ?? null, split },
    engine: ENGINE_VERSION,
    reuse: 'none: every prompt is computed in full',
    memory: engine.memoryPlan ? planRecord(engine.memoryPlan) : 'no --max-memory budget',
  };
  return { modelDir, modelName, engine, tok, builder, set, split, cacheDir, baseManifest, batchTokens: o.batchTokens ?? 4096, memoryPlan: engine.memoryPlan };
}

/** Rows (harmful, benign per pair) rendered in one condition. */
export function renderRows(ctx: ExtractContext, c: Condition): CacheRow[] {
  const rows: CacheRow[] = [];
  for (const p of ctx.set.pairs) {
    for (const kind of ['harmful', 'benign'] as const) {
      const r = ctx.builder.render(p[kind].prompt, p.tools, c.config, c.repr ?? 'schema');
      rows.push({ key: `${p.id}:${kind}`, ids: r.ids!, promptHash: r.hash });
    }
  }
  return rows;
}

/** Runs `compute` over the rows of condition `c` into the cache `name` (resumable, see cache/store.ts). */
function cacheCondition(ctx: ExtractContext, c: Condition, name: string, kind: string, compute: BatchCompute,
  rows: CacheRow[] = renderRows(ctx, c), extra: Record<string, unknown> = {}): Promise<StoreResult> {
  return buildActivationCache({
    dir: ctx.cacheDir,
    name,
    rows,
    layers: ctx.engine.numLayers + 1,
    d: ctx.engine.dModel,
    batchTokens: ctx.batchTokens,
    label: `${kind} ${conditionName(c)}`,
    manifest: { ...ctx.baseManifest, kind, condition: conditionName(c), ...extra },
    compute,
  });
}

/**
 * Caches the final-prompt-token residual stream of every row in condition `c`. [n, L+1, d]
 * With an engine that has `forwardShared`, shared token prefixes (split points planned over all rows of the
 * condition, so every batch computes the same bytes whatever the prefix cache holds) are computed once; the
 * manifest's `reuse` gives the planned prompt/computed token counts.
 */
export function extractCondition(ctx: ExtractContext, c: Condition): Promise<StoreResult> {
  const rows = renderRows(ctx, c);
  const shared = ctx.engine.forwardShared?.bind(ctx.engine);
  if (!shared) {
    return cacheCondition(ctx, c, promptCacheName(c), 'final-prompt-token', async (batch) => {
      const res = await ctx.engine.forward(batch.map((r) => r.ids), { hiddenAt: 'last', logitsAt: 'none' });
      return res.map((r) => r.hidden);
    }, rows);
  }
  const { cache, boundariesOf, reuse } = prefixReuse(ctx, rows);
  return cacheCondition(ctx, c, promptCacheName(c), 'final-prompt-token', async (batch) => {
    const { results } = await shared(batch.map((r) => r.ids), { hiddenAt: 'last', logitsAt: 'none', cache, boundaries: boundariesOf(batch) });
    return results.map((r) => r.hidden);
  }, rows, { reuse });
}

/**
 * Shared-prefix plan of a condition's rows (src/engine/prefix.ts): split points over ALL rows, so each batch computes
 * the same bytes whatever the prefix cache holds (deterministic resume); `reuse` = planned token counts.
 */
function prefixReuse(ctx: ExtractContext, rows: readonly CacheRow[]) {
  const ids = rows.map((r) => r.ids);
  const plan = prefixPlan(ids);
  const boundaries = new Map(rows.map((r, i) => [r, plan[i]!])); // by row identity (the store passes slices of `rows`)
  const planned = plannedReuse(ids, plan);
  return {
    // sized by the --max-memory plan when there is one (else PrefixCache's default)
    cache: new PrefixCache(ctx.memoryPlan?.prefixCacheBytes),
    boundariesOf: (batch: readonly CacheRow[]) => batch.map((r) => boundaries.get(r) ?? prefixPlan([r.ids])[0]!),
    reuse: { kind: 'shared-prefix KV', promptTokens: planned.promptTokens, computedTokens: planned.computedTokens, ratio: Number(planned.ratio.toFixed(4)) },
  };
}

/**
 * Caches the residual stream of the first generated token (greedy) for the agent prompt in `repr`: the state
 * computed when that token is fed back in (DEVELOPERS.md convention). [n, L+1, d]
 */
export function extractFirstToken(ctx: ExtractContext, repr: ToolRepr): Promise<StoreResult> {
  return cacheCondition(ctx, { config: 'agent', repr }, firstTokenCacheName(repr), 'first-generated-token', async (batch) => {
    const res = await ctx.engine.generate(batch.map((r) => r.ids), { maxNewTokens: 1, stopIds: [], returnFirstTokenHidden: true });
    return res.map((r) => r.firstTokenHidden!);
  });
}

/**
 * The agent prompt in `repr` cached twice from ONE prefill: its last prompt token (`prompt.agent.<repr>`) and the
 * first generated token (`first.<repr>`). When the prompt cache already exists only the first-token pass runs.
 */
export async function extractWithFirstToken(ctx: ExtractContext, repr: ToolRepr): Promise<StoreResult[]> {
  const c: Condition = { config: 'agent', repr };
  const rows = renderRows(ctx, c);
  if (cacheIsComplete(ctx.cacheDir, promptCacheName(c), rows)) return [await extractFirstToken(ctx, repr)];
  const shared = ctx.engine.firstTokenShared?.bind(ctx.engine);
  const { cache, boundariesOf, reuse } = prefixReuse(ctx, rows);
  return buildActivationCaches({
    dir: ctx.cacheDir,
    names: [promptCacheName(c), firstTokenCacheName(repr)],
    kinds: ['final-prompt-token', 'first-generated-token'],
    rows,
    layers: ctx.engine.numLayers + 1,
    d: ctx.engine.dModel,
    batchTokens: ctx.batchTokens,
    label: `prompt + first token ${conditionName(c)}`,
    manifest: { ...ctx.baseManifest, condition: conditionName(c), ...(shared ? { reuse } : {}) },
    compute: async (batch) => {
      if (shared) {
        // the same as the generate() below, with the prefill's shared prefixes computed once
        const { results } = await shared(batch.map((r) => r.ids), { stopIds: [], cache, boundaries: boundariesOf(batch) });
        return [results.map((r) => r.promptLastHidden!), results.map((r) => r.firstTokenHidden!)];
      }
      const res = await ctx.engine.generate(batch.map((r) => r.ids), {
        maxNewTokens: 1, stopIds: [], returnPromptLastHidden: true, returnFirstTokenHidden: true,
      });
      return [res.map((r) => r.promptLastHidden!), res.map((r) => r.firstTokenHidden!)];
    },
  });
}
