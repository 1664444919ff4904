/**
 * One shard of a steering sweep (`steer --shard i/n`): its share of the (requests × condition × batch) generations,
 * each batch written as a chunk file with its log lines beside it, and the record `safekeep merge` finishes from.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cacheIsComplete } from '../../cache/store.ts';
import type { SteerPositions } from '../../engine/types.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { SafekeepError } from '../../util/errors.ts';
import { sha256Hex } from '../../util/hash.ts';
import { Limiter } from '../../util/limit.ts';
import { ShardRun } from '../../util/shard-run.ts';
import { selectShard, type Shard } from '../../util/shard.ts';
import { openContext, promptCacheName, renderRows, shardIdentity, type ShardSummary } from '../extract.ts';
import { checkInterventionSets } from './conditions.ts';
import { GEN_BATCH, generateChunk, generationsKey, sampledSweep, type SteerDecode } from './generate.ts';
import type { SteeringSampling } from '../../analysis/results.ts';
import { STEER_CONDITIONS, steerSetup, type SteerOptions } from './setup.ts';
import { tableContext, type TableContext } from './table3.ts';

/** What `merge` needs to finish a sharded sweep (recorded in every steer shard; equal across shards). */
export interface SteerMergeOptions {
  table: TableContext;
  layer: number;
  meanNorm: number;
  directionName: string;
  alphas: number[];
  /** intervention sets after the α rows: label and content hash */
  interventionSets: Array<{ label: string; hash: string }>;
  requests: Array<'harmful' | 'benign'>;
  /** number of evaluation pairs (chunks of GEN_BATCH) */
  pairs: number;
  /** generations-file key per `<requests>/<condition index>` (α rows, then intervention sets) */
  keys: Record<string, string>;
  positions: SteerPositions;
  protocol: Record<string, unknown>;
  /** a sampled sweep's decoding (absent: greedy) */
  sampling?: SteeringSampling;
}

/** `label=sha256[:12]` per set: how shard records name the sets (merge shows it when shards differ). */
const setsIdentity = (sets: ReadonlyArray<{ label: string; hash: string }>): string =>
  sets.length ? sets.map((s) => `${s.label}=${s.hash.slice(0, 12)}`).join(',') : 'none';

/**
 * `steer --shard i/n`: this shard's (requests × condition × batch-of-8-pairs) generations, token-balanced (prompt tokens +
 * max new tokens per pair), into results/<model>/shards/steer/shard-<i>-of-<n>/; `safekeep merge` writes the
 * generation files, Table 3 and the report. Needs the extraction caches (chatbot, agent.schema, agent.flattened)
 * already merged: ℓ* and R̂ come from them, identically in every shard.
 */
export async function steerShard(o: SteerOptions, shard: Shard): Promise<ShardSummary> {
  const ctx = await openContext(o);
  try {
    const sets = checkInterventionSets(o.interventionSets ?? [], ctx.engine.numLayers, ctx.engine.dModel);
    const missing = STEER_CONDITIONS.filter((c) => !cacheIsComplete(ctx.cacheDir, promptCacheName(c), renderRows(ctx, c)));
    if (missing.length) {
      throw new SafekeepError(`steer --shard needs the caches ${missing.map((c) => promptCacheName(c)).join(', ')} in ${ctx.cacheDir} first: `
        + 'run `safekeep extract --configs chatbot,agent --repr schema,flattened` (sharded and merged, or in one process); `safekeep slurm steer` does this stage first');
    }
    const setup = await steerSetup(ctx, o, sets);
    const kinds = [...(o.requests ?? (['harmful', 'benign'] as const))];
    const rendered = Object.fromEntries(kinds.map((k) => [k, setup.pairs.map((p) => ctx.builder.render(p[k].prompt, p.tools, 'agent', 'schema'))]));
    const ids = Object.fromEntries(kinds.map((k) => [k, rendered[k]!.map((r) => r.ids!)])) as Record<string, number[][]>;
    const texts = Object.fromEntries(kinds.map((k) => [k, rendered[k]!.map((r) => r.text)])) as Record<string, string[]>;
    const items: Array<{ kind: 'harmful' | 'benign'; a: number; s: number; cost: number }> = [];
    for (const kind of kinds) {
      for (let a = 0; a < setup.conditions.length; a++) {
        for (let s = 0; s < setup.pairs.length; s += GEN_BATCH) {
          const chunk = ids[kind]!.slice(s, s + GEN_BATCH);
          items.push({ kind, a, s, cost: chunk.reduce((t, x) => t + x.length + o.maxNewTokens, 0) });
        }
      }
    }
    const mine = selectShard(items, (x) => x.cost, shard);
    const decode: SteerDecode = { ...(o.sampling ? { sampling: o.sampling } : {}), samples: o.samples ?? 1 };
    const keys: Record<string, string> = {};
    for (const kind of kinds) setup.conditions.forEach((cond, a) => (keys[`${kind}/${a}`] = generationsKey(ctx, setup.pairs, ids[kind]!, setup.layer, cond, o.maxNewTokens, setup.unit, setup.positions, decode)));
    const interventionSets = setup.conditions.flatMap((c) => (c.set ? [{ label: c.set.label, hash: c.set.hash }] : []));
    const merge: SteerMergeOptions = {
      table: tableContext(ctx), layer: setup.layer, meanNorm: setup.meanNorm, directionName: setup.directionName, alphas: setup.alphas, interventionSets,
      requests: kinds, pairs: setup.pairs.length, keys, positions: setup.positions, protocol: setup.protocol, ...sampledSweep(o),
    };
    // the intervention sets by name and hash first, so merge names them when shards were run with different files
    const identity = { ...shardIdentity(ctx), interventions: setsIdentity(interventionSets), steer: sha256Hex(JSON.stringify({ ...merge, table: null })).slice(0, 12) };
    const run = new ShardRun(join(ctx.cacheDir, '..'), 'steer', shard, identity, { ...merge }, { items: mine.length, tokens: mine.reduce((t, x) => t + x.cost, 0) });
    let computed = 0;
    // the shard's batches in flight together (--gen-concurrency), batch-major (the same prompts under every condition
    // side by side, as in one process), each written as it finishes
    const limiter = new Limiter(ctx.genConcurrency);
    const order = [...mine].sort((x, y) => kinds.indexOf(x.kind) - kinds.indexOf(y.kind) || x.s - y.s || x.a - y.a);
    await Promise.all(order.map((it) => limiter.run(async () => {
      const file = join(run.dir, chunkFile(it.kind, it.a, it.s));
      const key = keys[`${it.kind}/${it.a}`]!;
      if (existsSync(file) && (JSON.parse(readFileSync(file, 'utf8').split('\n')[0]!) as { key?: string }).key === key) { run.add(1, it.cost); return; }
      const { gens, samples } = await generateChunk(ctx, setup.pairs.slice(it.s, it.s + GEN_BATCH), ids[it.kind]!.slice(it.s, it.s + GEN_BATCH), texts[it.kind]!.slice(it.s, it.s + GEN_BATCH), it.kind,
        setup.conditions[it.a]!, setup.layer, setup.unit, o.maxNewTokens, setup.format, setup.positions, decode);
      // the log lines first: a chunk file present means its log lines are too
      writeFileAtomic(samplesChunkFile(file), samples.map((x) => JSON.stringify(x)).join('\n') + '\n');
      writeFileAtomic(file, [JSON.stringify({ key }), ...gens.map((g) => JSON.stringify(g))].join('\n') + '\n');
      computed += gens.length;
      run.add(1, it.cost);
    })));
    const rec = run.finish();
    return { dir: run.dir, items: rec.items, tokens: rec.tokens, computedRows: computed, seconds: rec.seconds ?? 0 };
  } finally {
    await ctx.engine.dispose();
  }
}

/** A shard's generations of one batch: `<requests>.a<condition index>.<first pair index>.jsonl` (key header, then rows). */
export const chunkFile = (kind: string, a: number, s: number): string => `${kind}.a${a}.${String(s).padStart(6, '0')}.jsonl`;
/** the chunk's log lines, beside it */
export const samplesChunkFile = (chunk: string): string => chunk.replace(/\.jsonl$/, '.samples.jsonl');
