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
import type { EngineOptions } from '../engine/engine-config.ts';
import { createEngine } from '../engine/engine.ts';
import { GRAPH_VERSION } from '../engine/runtime/session.ts';
import { describePlan, planRecord, type MemoryPlan } from '../engine/runtime/memory.ts';
import { plannedReuse, prefixPlan } from '../engine/run/prefix.ts';
import { PrefixCache } from '../engine/run/prefix-cache.ts';
import type { Engine } from '../engine/types.ts';
import { loadCheckpoint } from '../checkpoint/load.ts';
import { loadPairSet } from '../data/load.ts';
import type { DataDirs } from '../data/locate.ts';
import { splitPairs } from '../data/split.ts';
import type { PairSet, Split } from '../data/types.ts';
import { PromptBuilder, type ConfigName, type ToolRepr } from '../prompts/configurations.ts';
import { loadPromptTexts } from '../prompts/texts.ts';
import { loadPromptTokenizer, type PromptTokenizer } from '../prompts/tokenizer.ts';
import { resolveTemplateKwargs, type ThinkingFlag } from '../prompts/thinking.ts';
import { SafekeepError } from '../util/errors.ts';
import { buildActivationCaches, cacheIsComplete, passIsComplete, planPass, rowsHash, type CacheRow, type MultiBatchCompute, type MultiStoreOptions, type StoreResult } from '../cache/store.ts';
import { partitionByCost, type Shard } from '../util/shard.ts';
import { sha256Hex } from '../util/hash.ts';
import { ShardRun } from '../util/shard-run.ts';

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
  /** no progress lines (the engine option `quiet`, SAFEKEEP_QUIET at the CLI) */
  quiet: boolean;
  /** generation batches in flight at once (steer, behavioural refusal): the engine's scheduler decodes them together */
  genConcurrency: number;
}

export interface ContextOptions {
  model: string;
  data: string;
  /** where named data sets are looked up (data/locate.ts) */
  dataDirs?: DataDirs;
  /** results root (default `results`) */
  results?: string;
  /** engine options (dtype, device, threads) */
  engine?: EngineOptions;
  template?: string;
  splitSeed?: number;
  /** keep only n pairs: round-robin over categories in set order, so a subset still spans every category */
  limit?: number;
  batchTokens?: number;
  /** generation batches (of 8 prompts) in flight at once, across conditions (default 4) */
  genConcurrency?: number;
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
/**
 * Generation batches in flight by default: 4 × 8 prompts = 32 sequences on the scheduler at once, the batch where
 * decode throughput measured near its plateau on the SmolLM2 shape (issue-era bench: 103 / 145 / 188 tok/s at 8 /
 * 16 / 32 rows), while a condition's results stay in pair order.
 */
export const GEN_CONCURRENCY = 4;

export async function openContext(o: ContextOptions): Promise<ExtractContext> {
  const modelDir = resolve(o.model);
  const ckpt = await loadCheckpoint(modelDir);
  const tok = await loadPromptTokenizer(modelDir, o.template ? { template: o.template } : {});
  if (tok.vocab === 'none') throw new SafekeepError(`${o.model}: no tokenizer.json; extraction needs token ids`);
  const texts = loadPromptTexts();
  const template = resolveTemplateKwargs(tok.template, o.thinking, o.chatTemplateKwargs);
  const builder = new PromptBuilder(tok, { texts, templateKwargs: template.kwargs });
  let set = await loadPairSet(o.data, o.dataDirs);
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
  return { modelDir, modelName, engine, tok, builder, set, split, cacheDir, baseManifest, batchTokens: o.batchTokens ?? 4096, memoryPlan: engine.memoryPlan, quiet: o.engine?.quiet ?? false, genConcurrency: o.genConcurrency ?? GEN_CONCURRENCY };
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

/**
 * A cache pass built but not run: the rows of one condition and how to compute them (cache/store.ts). `release`
 * drops what the pass holds between batches (its prefix cache), so a list of built passes costs memory only while
 * each one runs.
 */
export type ExtractPass = MultiStoreOptions & { release?: () => void };

function pass(ctx: ExtractContext, c: Condition, names: string[], kinds: string[], rows: CacheRow[], extra: Record<string, unknown>,
  compute: MultiBatchCompute, release?: () => void): ExtractPass {
  return {
    ...(release ? { release } : {}),
    dir: ctx.cacheDir,
    names,
    rows,
    layers: ctx.engine.numLayers + 1,
    d: ctx.engine.dModel,
    batchTokens: ctx.batchTokens,
    quiet: ctx.quiet,
    label: names.length === 1 ? `${kinds[0]} ${conditionName(c)}` : `prompt + first token ${conditionName(c)}`,
    // one cache: its kind in the manifest body (as buildActivationCache always wrote it); several: per cache
    ...(names.length === 1
      ? { manifest: { ...ctx.baseManifest, kind: kinds[0], condition: conditionName(c), ...extra } }
      : { kinds, manifest: { ...ctx.baseManifest, condition: conditionName(c), ...extra } }),
    compute,
  };
}

/**
 * The pass caching the final-prompt-token residual stream of every row in condition `c`. [n, L+1, d]
 * With an engine that has `forwardShared`, shared token prefixes (split points planned over all rows of the
 * condition, so every batch computes the same bytes whatever the prefix cache holds) are computed once; the
 * manifest's `reuse` gives the planned prompt/computed token counts.
 */
export function conditionPass(ctx: ExtractContext, c: Condition): ExtractPass {
  const rows = renderRows(ctx, c);
  const shared = ctx.engine.forwardShared?.bind(ctx.engine);
  if (!shared) {
    return pass(ctx, c, [promptCacheName(c)], ['final-prompt-token'], rows, {}, async (batch) => {
      const res = await ctx.engine.forward(batch.map((r) => r.ids), { hiddenAt: 'last', logitsAt: 'none' });
      return [res.map((r) => r.hidden)];
    });
  }
  const { cache, release, boundariesOf, reuse } = prefixReuse(ctx, rows);
  return pass(ctx, c, [promptCacheName(c)], ['final-prompt-token'], rows, { reuse }, async (batch) => {
    const { results } = await shared(batch.map((r) => r.ids), { hiddenAt: 'last', logitsAt: 'none', cache: cache(), boundaries: boundariesOf(batch) });
    return [results.map((r) => r.hidden)];
  }, release);
}

/** Caches the final-prompt-token residual stream of every row in condition `c` (see `conditionPass`). [n, L+1, d] */
export async function extractCondition(ctx: ExtractContext, c: Condition): Promise<StoreResult> {
  return (await runPasses(ctx, [conditionPass(ctx, c)]))[0]![0]!;
}

/**
 * Shared-prefix plan of a condition's rows (src/engine/run/prefix.ts): split points over ALL rows, so each batch computes
 * the same bytes whatever the prefix cache holds (deterministic resume); `reuse` = planned token counts.
 */
function prefixReuse(ctx: ExtractContext, rows: readonly CacheRow[]) {
  const ids = rows.map((r) => r.ids);
  const plan = prefixPlan(ids);
  const boundaries = new Map(rows.map((r, i) => [r, plan[i]!])); // by row identity (the store passes slices of `rows`)
  const planned = plannedReuse(ids, plan);
  let held: PrefixCache | null = null;
  return {
    // made on the first batch, sized by the --max-memory plan when there is one (else PrefixCache's default)
    cache: (): PrefixCache => (held ??= new PrefixCache(ctx.memoryPlan?.prefixCacheBytes)),
    release: (): void => { held = null; },
    boundariesOf: (batch: readonly CacheRow[]) => batch.map((r) => boundaries.get(r) ?? prefixPlan([r.ids])[0]!),
    reuse: { kind: 'shared-prefix KV', promptTokens: planned.promptTokens, computedTokens: planned.computedTokens, ratio: Number(planned.ratio.toFixed(4)) },
  };
}

/**
 * The pass caching the residual stream of the first generated token (greedy) for the agent prompt in `repr`: the
 * state computed when that token is fed back in (the convention in engine/types.ts). [n, L+1, d]
 */
export function firstTokenPass(ctx: ExtractContext, repr: ToolRepr): ExtractPass {
  const c: Condition = { config: 'agent', repr };
  return pass(ctx, c, [firstTokenCacheName(repr)], ['first-generated-token'], renderRows(ctx, c), {}, async (batch) => {
    const res = await ctx.engine.generate(batch.map((r) => r.ids), { maxNewTokens: 1, stopIds: [], returnFirstTokenHidden: true });
    return [res.map((r) => r.firstTokenHidden!)];
  });
}

export async function extractFirstToken(ctx: ExtractContext, repr: ToolRepr): Promise<StoreResult> {
  return (await runPasses(ctx, [firstTokenPass(ctx, repr)]))[0]![0]!;
}

/**
 * The agent prompt in `repr` cached twice from ONE prefill: its last prompt token (`prompt.agent.<repr>`) and the
 * first generated token (`first.<repr>`). When the prompt cache already exists only the first-token pass runs.
 */
export function promptAndFirstTokenPass(ctx: ExtractContext, repr: ToolRepr): ExtractPass {
  const c: Condition = { config: 'agent', repr };
  const rows = renderRows(ctx, c);
  if (cacheIsComplete(ctx.cacheDir, promptCacheName(c), rows)) return firstTokenPass(ctx, repr);
  const shared = ctx.engine.firstTokenShared?.bind(ctx.engine);
  const { cache, release, boundariesOf, reuse } = prefixReuse(ctx, rows);
  return pass(ctx, c, [promptCacheName(c), firstTokenCacheName(repr)], ['final-prompt-token', 'first-generated-token'], rows,
    shared ? { reuse } : {}, async (batch) => {
      if (shared) {
        // the same as the generate() below, with the prefill's shared prefixes computed once
        const { results } = await shared(batch.map((r) => r.ids), { stopIds: [], cache: cache(), boundaries: boundariesOf(batch) });
        return [results.map((r) => r.promptLastHidden!), results.map((r) => r.firstTokenHidden!)];
      }
      const res = await ctx.engine.generate(batch.map((r) => r.ids), {
        maxNewTokens: 1, stopIds: [], returnPromptLastHidden: true, returnFirstTokenHidden: true,
      });
      return [res.map((r) => r.promptLastHidden!), res.map((r) => r.firstTokenHidden!)];
    }, release);
}

export function extractWithFirstToken(ctx: ExtractContext, repr: ToolRepr): Promise<StoreResult[]> {
  return runPasses(ctx, [promptAndFirstTokenPass(ctx, repr)]).then((r) => r[0]!);
}

/** Where a sharded extraction writes: its command's shard folder and its progress record. */
interface ShardTarget {
  shard: Shard;
  /** the shard's own folder (parts go to `<dir>/cache/`) */
  dir: string;
  /** progress of the shard's items (batches) and tokens */
  onBatch?: (items: number, tokens: number) => void;
}

/**
 * The shard's batches of every pass: the batch plans of all passes in order are one work list, split by
 * `partitionByCost` on padded tokens. [pass] → batch indices. Passes already complete in the cache get none.
 */
function shardBatches(ctx: ExtractContext, passes: readonly ExtractPass[], shard: Shard): { batches: number[][]; items: number; tokens: number } {
  const items: Array<{ p: number; b: number; tokens: number }> = [];
  passes.forEach((ps, p) => {
    if (passIsComplete(ctx.cacheDir, { names: ps.names, rowsHash: rowsHash(ps.rows) })) return;
    planPass(ps).tokens.forEach((tokens, b) => items.push({ p, b, tokens }));
  });
  const owner = partitionByCost(items.map((x) => x.tokens), shard.count);
  const batches = passes.map((): number[] => []);
  let tokens = 0;
  let count = 0;
  items.forEach((x, k) => {
    if (owner[k] !== shard.index) return;
    batches[x.p]!.push(x.b);
    tokens += x.tokens;
    count++;
  });
  return { batches, items: count, tokens };
}

/** Runs passes in order: all of each (then assembled), or with `target` only the shard's batches into its folder. */
export async function runPasses(ctx: ExtractContext, passes: readonly ExtractPass[], target?: ShardTarget): Promise<StoreResult[][]> {
  const out: StoreResult[][] = [];
  if (!target) {
    for (const p of passes) {
      out.push(await buildActivationCaches(p));
      p.release?.();
    }
    return out;
  }
  const { batches } = shardBatches(ctx, passes, target.shard);
  for (let k = 0; k < passes.length; k++) {
    out.push(await buildActivationCaches(passes[k]!, { partsRoot: join(target.dir, 'cache'), batches: batches[k]!, ...(target.onBatch ? { onBatch: (_rows: number, tokens: number) => target.onBatch!(1, tokens) } : {}) }));
    passes[k]!.release?.();
  }
  return out;
}

/**
 * What must agree across the shards of one run for their parts to join: model (config hash, dtype), template and
 * prompt texts, data (hash, limit, split), engine graph version and batching. Short hashes, so refusals can name them.
 */
export function shardIdentity(ctx: ExtractContext): Record<string, string> {
  const m = ctx.baseManifest as { model: { dir: string; configHash: string; dtype: string }; prompts: unknown; dataset: { name: string; hash: string; limit: number | null; split: unknown } };
  const short = (x: unknown): string => sha256Hex(typeof x === 'string' ? x : JSON.stringify(x)).slice(0, 12);
  return {
    model: `${ctx.modelName} config ${String(m.model.configHash).slice(0, 12)} ${m.model.dtype}`,
    template: `${(m.prompts as { templateHash?: string }).templateHash?.slice(0, 12) ?? '?'} prompts ${short(m.prompts)}`,
    data: `${m.dataset.name} ${String(m.dataset.hash).slice(0, 12)} limit ${m.dataset.limit ?? 'all'} split ${short(m.dataset.split)}`,
    engine: `${ENGINE_VERSION} batch-tokens ${ctx.batchTokens}`,
  };
}

export interface ShardSummary {
  /** the shard's folder */
  dir: string;
  /** batches and their padded tokens assigned to this shard */
  items: number;
  tokens: number;
  computedRows: number;
  seconds: number;
}

/**
 * One shard of a command's extraction passes: its token-balanced batches into
 * results/<model>/shards/<command>/shard-<i>-of-<n>/, with progress and identity in shard.json.
 * `mergeOptions` is what `safekeep merge` needs to finish the command.
 */
export async function runShard(ctx: ExtractContext, command: string, passes: readonly ExtractPass[], shard: Shard,
  mergeOptions: Record<string, unknown>): Promise<ShardSummary> {
  const mine = shardBatches(ctx, passes, shard);
  const run = new ShardRun(join(ctx.cacheDir, '..'), command, shard, shardIdentity(ctx), mergeOptions, mine);
  const res = await runPasses(ctx, passes, { shard, dir: run.dir, onBatch: (items, tokens) => run.add(items, tokens) });
  const rec = run.finish();
  return { dir: run.dir, items: mine.items, tokens: mine.tokens, computedRows: res.reduce((s, r) => s + (r[0]?.computedRows ?? 0), 0), seconds: rec.seconds ?? 0 };
}
