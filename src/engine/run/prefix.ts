/**
 * Shared-prefix KV reuse. Prompts of one workload share long token prefixes (template header, system
 * text, tool specs); each distinct shared prefix is computed once, its KV kept in a byte-bounded LRU, and only the
 * suffixes are run on top of it.
 *
 * Split points come from the trie of ALL prompts of a workload (`prefixPlan`): a prompt's boundaries are the depths
 * where its path branches (every lcp with another prompt). A prefix's KV is always built along the same chain of
 * boundaries (each step = the tokens between two boundaries, batch 1), and the cache key includes that chain and the
 * interventions, so a cache hit returns exactly the bytes a miss would compute: results never depend on what the
 * LRU held (deterministic kill-and-resume).
 *
 * Suffix batches: rows with different prefix lengths share one step by LEFT-padding the past KV (row b's prefix in
 * slots Pmax−P_b..Pmax−1, start = Pmax−P_b) and RIGHT-padding the new tokens (causal attention never lets a real token
 * see a later pad), so position ids stay slot − start and only the real slots are visible.
 */
import * as ort from 'onnxruntime-node';
import { sha256Hex } from '../../util/hash.ts';
import { argmax } from './argmax.ts';
import { selectPositions, type InterventionInputs } from './batch.ts';
import { compactKv, kvArray, kvArrayLike, kvBytes, kvCapacity, kvTensor, type KvArray, type KvCache } from '../runtime/kv.ts';
import { PrefixCache, type PrefixKv } from './prefix-cache.ts';
import { hiddenRows, type Stepper, type StepOutput } from './step.ts';
import type { FirstTokenSharedOptions, FirstTokenSharedResult, ForwardResult, GenerateResult, ReuseStats, SharedForwardOptions, SharedForwardResult } from './types.ts';

/** lcp of two token sequences */
export function lcp(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * For each prompt, the ascending depths (> 0) at which its trie path is shared with another prompt and branches:
 * { lcp(s, t) : t another prompt, lcp > 0 }. Sorted-neighbour form: lcp(s_i, s_j) = min of adjacent lcps between
 * them in sorted order; each prompt walks outward until the running min reaches 0. [prompt] → boundaries
 */
export function prefixPlan(prompts: readonly (readonly number[])[]): number[][] {
  const n = prompts.length;
  const order = prompts.map((_, i) => i).sort((a, b) => compareSeq(prompts[a]!, prompts[b]!) || a - b);
  const adj = new Array<number>(Math.max(0, n - 1));
  for (let k = 0; k + 1 < n; k++) adj[k] = lcp(prompts[order[k]!]!, prompts[order[k + 1]!]!);
  const out: number[][] = new Array(n);
  for (let k = 0; k < n; k++) {
    const set = new Set<number>();
    for (let m = Infinity, j = k - 1; j >= 0; j--) {
      m = Math.min(m, adj[j]!);
      if (m === 0) break;
      set.add(m);
    }
    for (let m = Infinity, j = k; j + 1 < n; j++) {
      m = Math.min(m, adj[j]!);
      if (m === 0) break;
      set.add(m);
    }
    out[order[k]!] = [...set].sort((a, b) => a - b);
  }
  return out;
}

function compareSeq(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/**
 * The prefix a prompt reuses: the largest boundary that leaves every requested position (and at least the last
 * token) in the computed suffix; 0 = no reuse. `chain` = the boundaries below it (how its KV is built).
 */
function choosePrefix(boundaries: readonly number[], length: number, firstWanted: number): { prefix: number; chain: number[] } {
  const limit = Math.min(firstWanted, length - 1);
  const usable = boundaries.filter((b) => b > 0 && b <= limit);
  return { prefix: usable.at(-1) ?? 0, chain: usable.slice(0, -1) };
}

/** what the interventions do to a prefix's KV, as a key part ('none' when they do nothing) */
const steerKey = (iv: InterventionInputs): string => {
  const any = (a: Float32Array) => a.some((v) => v !== 0);
  if (!any(iv.steer) && !any(iv.dir)) return 'none';
  const all = new Float32Array([...iv.steer, ...iv.dir, ...iv.value]);
  return sha256Hex(new Uint8Array(all.buffer)).slice(0, 16);
};
const prefixKey = (ids: readonly number[], prefix: number, chain: readonly number[], steer: string): string =>
  sha256Hex(`${steer}|${chain.join(',')}|${ids.slice(0, prefix).join(',')}`);

/**
 * Forward with shared-prefix reuse: the same `ForwardResult[]` as `engine.forward(prompts, opts)` (hidden states and
 * logits within float rounding, ≤ 1e-5 in the tests) plus what was computed.
 */
export async function forwardShared(engine: Stepper, prompts: number[][], iv: InterventionInputs, opts: SharedForwardOptions = {}): Promise<SharedForwardResult> {
  return sharedCore(engine, prompts, iv, opts, null);
}

/**
 * `generate(prompts, {maxNewTokens: 1, returnPromptLastHidden: true, returnFirstTokenHidden: true, stopIds})` with
 * shared-prefix reuse for the prefill: the prompt's last-token hidden state, its greedy token, and the all-layer
 * hidden state computed when that token is fed back (one batch-1 step per prompt on its own KV).
 */
export async function firstTokenShared(engine: Stepper, prompts: number[][], iv: InterventionInputs,
  opts: Omit<FirstTokenSharedOptions, 'steer'> = {}): Promise<FirstTokenSharedResult> {
  const out: GenerateResult[] = new Array(prompts.length);
  const { stats } = await sharedCore(engine, prompts, iv, { ...opts, hiddenAt: 'last', logitsAt: 'last' }, { stop: new Set(opts.stopIds ?? engine.eosIds), out });
  return { results: out, stats };
}

/** One prompt of a shared forward: the positions it wants and the prefix it reuses. */
interface SharedRow {
  /** the prompt's index in the call */
  i: number;
  ids: number[];
  hiddenPos: number[];
  logitPos: number[];
  /** tokens whose KV comes from the prefix cache (0: none) */
  prefix: number;
  /** the boundaries below `prefix`, along which its KV is built */
  chain: number[];
}

/** What the steps of one shared forward share: the engine, the interventions, the cache and the running counts. */
interface SharedRun {
  engine: Stepper;
  iv: InterventionInputs;
  cache: PrefixCache;
  /** the interventions' share of every prefix key */
  sKey: string;
  stats: ReuseStats;
}

/** The first token fed back after the prefill (firstTokenShared): stop ids and the results it fills. */
interface FirstToken {
  stop: Set<number>;
  out: GenerateResult[];
}

async function sharedCore(engine: Stepper, prompts: number[][], iv: InterventionInputs, opts: SharedForwardOptions,
  first: FirstToken | null): Promise<SharedForwardResult> {
  const n = prompts.length;
  const boundaries = opts.boundaries ?? prefixPlan(prompts);
  if (boundaries.length !== n) throw new Error(`forwardShared: ${boundaries.length} boundary lists for ${n} prompts`);
  const run: SharedRun = {
    engine, iv, cache: opts.cache ?? new PrefixCache(engine.memoryPlan?.prefixCacheBytes), sKey: steerKey(iv),
    stats: { promptTokens: 0, computedTokens: 0 },
  };
  const rows = prompts.map((ids, i) => planRow(engine, ids, i, boundaries[i]!, opts));
  for (const r of rows) run.stats.promptTokens += r.ids.length;
  const results: ForwardResult[] = new Array(n);
  for (const batch of suffixBatches(engine, rows, first !== null)) {
    const kvs = await batchPrefixes(run, batch);
    const { out, P, starts } = await runSuffixBatch(run, batch, kvs, first !== null);
    splitResults(engine, batch, out, results);
    if (first) await feedFirstTokens(run, batch, out, P, starts, results, first);
  }
  return { results, stats: run.stats };
}

/** what prompt `i` needs and which prefix it reuses */
function planRow(engine: Stepper, ids: number[], i: number, boundaries: readonly number[], opts: SharedForwardOptions): SharedRow {
  const hiddenPos = selectPositions(opts.hiddenAt, ids.length, `sequence ${i} hiddenAt`);
  const logitPos = selectPositions(opts.logitsAt, ids.length, `sequence ${i} logitsAt`);
  const first = Math.min(ids.length - 1, ...hiddenPos, ...logitPos);
  // dynamic-NTK RoPE rotates every token by the frequencies of the whole length run; beyond max_position_embeddings
  // those differ from what a shorter prefix was computed with, so such prompts reuse nothing (results = forward)
  const rope = engine.config.rope;
  const reusable = rope.type !== 'dynamic' || ids.length <= rope.maxPositionEmbeddings;
  const { prefix, chain } = reusable ? choosePrefix(boundaries, ids.length, first) : { prefix: 0, chain: [] };
  return { i, ids, hiddenPos, logitPos, prefix, chain };
}

/**
 * Suffix batches: rows sorted by (prefix, suffix length), packed while B·(Pmax + Tmax) stays under the token cap
 * and, with a memory plan, the step fits it (memory.ts; a row alone that does not is prefilled in chunks).
 * `present`: the steps return their KV (for the first token fed back).
 */
function suffixBatches(engine: Stepper, rows: readonly SharedRow[], present: boolean): SharedRow[][] {
  const order = [...rows].sort((a, b) => a.prefix - b.prefix || (a.ids.length - a.prefix) - (b.ids.length - b.prefix) || a.i - b.i);
  const budget = engine.maxBatchTokens;
  const batches: SharedRow[][] = [];
  let cur: SharedRow[] = [];
  for (const r of order) {
    const P = Math.max(r.prefix, ...cur.map((x) => x.prefix));
    const T = Math.max(r.ids.length - r.prefix, ...cur.map((x) => x.ids.length - x.prefix));
    const B = cur.length + 1;
    const fits = engine.memoryFits(() => [{
      batch: B, width: T, past: P, present,
      hidden: r.hiddenPos.length + cur.reduce((s, x) => s + x.hiddenPos.length, 0),
      logits: r.logitPos.length + cur.reduce((s, x) => s + x.logitPos.length, 0),
    }]);
    // under a memory plan the step's bytes (past KV included) are checked exactly; else B·(P + T) ≤ the token cap
    if (cur.length && (fits ? B * T > budget || !fits(B, T) : B * (P + T) > budget)) { batches.push(cur); cur = []; }
    cur.push(r);
  }
  if (cur.length) batches.push(cur);
  return batches;
}

/** KV of ids[0..prefix) built along `chain` (each piece one batch-1 step), from the cache when there */
async function prefixKv(run: SharedRun, ids: readonly number[], prefix: number, chain: readonly number[]): Promise<PrefixKv> {
  const { engine, iv, cache } = run;
  const key = prefixKey(ids, prefix, chain, run.sKey);
  const hit = cache.get(key);
  if (hit) { cache.hits++; return hit; }
  cache.misses++;
  const below = chain.at(-1) ?? 0;
  const past = below > 0 ? await prefixKv(run, ids, below, chain.slice(0, -1)) : null;
  const piece = ids.slice(below, prefix);
  const out = await engine.prefill({
    ids: BigInt64Array.from(piece, BigInt), batch: 1, width: piece.length, starts: [0],
    past: past ? leftPadPrefixes(engine, [past], below) : null, steer: iv.steer, project: iv, hiddenIndex: [], logitsIndex: [],
  });
  run.stats.computedTokens += piece.length;
  const { numKvHeads: kvH, headDim: hd } = engine.config;
  const kv: PrefixKv = {
    ...compactKv(out.present!), // [1, kvH, prefix, hd] per layer
    length: prefix,
    bytes: 2 * engine.numLayers * kvH * prefix * hd * kvBytes(engine.kvDType ?? 'f32'),
  };
  cache.set(key, kv);
  return kv;
}

/** each row's prefix KV (null: no prefix); rows of a batch that share a prefix share its KV even when the LRU is too small to keep it */
async function batchPrefixes(run: SharedRun, batch: readonly SharedRow[]): Promise<(PrefixKv | null)[]> {
  const kvs: (PrefixKv | null)[] = [];
  const local = new Map<string, PrefixKv>();
  for (const r of batch) {
    if (r.prefix === 0) { kvs.push(null); continue; }
    const key = prefixKey(r.ids, r.prefix, r.chain, run.sKey);
    const kv = local.get(key) ?? await prefixKv(run, r.ids, r.prefix, r.chain);
    local.set(key, kv);
    kvs.push(kv);
  }
  return kvs;
}

/** B prefixes left-padded into one past: per layer [B, kvH, P, hd], row b's prefix in slots P − p_b .. P − 1 */
function leftPadPrefixes(engine: Stepper, kvs: readonly (PrefixKv | null)[], P: number): KvCache {
  const { numKvHeads: kvH, headDim: hd } = engine.config;
  const B = kvs.length;
  const keys: ort.Tensor[] = [];
  const values: ort.Tensor[] = [];
  for (let l = 0; l < engine.numLayers; l++) {
    const k = kvArray(engine.kvDType ?? 'f32', B * kvH * P * hd);
    const v = kvArray(engine.kvDType ?? 'f32', B * kvH * P * hd);
    kvs.forEach((kv, b) => {
      if (!kv) return;
      const p = kv.length;
      for (let h = 0; h < kvH; h++) {
        const dst = ((b * kvH + h) * P + (P - p)) * hd;
        (k as Float32Array).set((kv.keys[l] as Float32Array).subarray(h * p * hd, (h + 1) * p * hd), dst);
        (v as Float32Array).set((kv.values[l] as Float32Array).subarray(h * p * hd, (h + 1) * p * hd), dst);
      }
    });
    keys.push(kvTensor(k, [B, kvH, P, hd]));
    values.push(kvTensor(v, [B, kvH, P, hd]));
  }
  return { keys, values, batch: B, length: P, starts: kvs.map((kv) => P - (kv?.length ?? 0)) };
}

/**
 * One step for a batch's suffixes on their left-padded prefixes, the suffixes right-padded to the longest (T).
 * P = the longest prefix, starts[b] = P − prefix_b (row b's first real slot).
 */
async function runSuffixBatch(run: SharedRun, batch: readonly SharedRow[], kvs: readonly (PrefixKv | null)[], present: boolean): Promise<{ out: StepOutput; P: number; starts: number[] }> {
  const { engine, iv } = run;
  const B = batch.length;
  const P = Math.max(...batch.map((r) => r.prefix));
  const T = Math.max(...batch.map((r) => r.ids.length - r.prefix));
  const ids = new BigInt64Array(B * T);
  batch.forEach((r, b) => { for (let t = r.prefix; t < r.ids.length; t++) ids[b * T + t - r.prefix] = BigInt(r.ids[t]!); });
  const starts = batch.map((r) => P - r.prefix);
  const flat = (pick: (r: SharedRow) => number[]) => batch.flatMap((r, b) => pick(r).map((p) => b * T + p - r.prefix));
  const out = await engine.prefill({
    ids, batch: B, width: T, starts, past: P > 0 ? leftPadPrefixes(engine, kvs, P) : null, steer: iv.steer, project: iv,
    hiddenIndex: flat((r) => r.hiddenPos), logitsIndex: flat((r) => r.logitPos), wantPresent: present,
    ropeLength: batch.map((r) => r.ids.length), // real lengths: the right pads are not part of a row's sequence
  });
  run.stats.computedTokens += batch.reduce((s, r) => s + r.ids.length - r.prefix, 0);
  return { out, P, starts };
}

/** each row's hidden rows [L+1, n_b, d] and logits [m_b, V] of a suffix step, into results[row.i] */
function splitResults(engine: Stepper, batch: readonly SharedRow[], out: StepOutput, results: ForwardResult[]): void {
  const L1 = engine.numLayers + 1;
  const d = engine.dModel;
  const V = engine.vocabSize;
  const N = batch.reduce((s, r) => s + r.hiddenPos.length, 0);
  let hOff = 0;
  let lOff = 0;
  for (const r of batch) {
    const nh = r.hiddenPos.length;
    const hidden = hiddenRows(out.hidden, L1, N, d, hOff, nh);
    const m = r.logitPos.length;
    results[r.i] = { length: r.ids.length, hiddenPositions: r.hiddenPos, hidden, logitPositions: r.logitPos, logits: out.logits.slice(lOff * V, (lOff + m) * V) };
    hOff += nh;
    lOff += m;
  }
}

/** row b's slots from .. from + len − 1 of a step's present KV (stride S ≥ P + T): a batch-1 past [1, kvH, len, hd] */
function rowPast(engine: Stepper, present: KvCache, b: number, from: number, len: number): KvCache {
  const { numKvHeads: kvH, headDim: hd } = engine.config;
  const S = kvCapacity(present); // buffer stride (≥ P + T)
  const slice = (t: ort.Tensor): ort.Tensor => {
    const src = t.data as KvArray;
    const dst = kvArrayLike(src, kvH * len * hd);
    for (let h = 0; h < kvH; h++) (dst as Float32Array).set((src as Float32Array).subarray(((b * kvH + h) * S + from) * hd, ((b * kvH + h) * S + from + len) * hd), h * len * hd);
    return kvTensor(dst, [1, kvH, len, hd]);
  };
  return { keys: present.keys.map(slice), values: present.values.map(slice), batch: 1, length: len, starts: [0] };
}

/** feed each row's greedy token on its own KV: row b's real slots starts[b] .. P + suffix_b − 1 (no right pads) */
async function feedFirstTokens(run: SharedRun, batch: readonly SharedRow[], out: StepOutput, P: number, starts: readonly number[],
  results: readonly ForwardResult[], first: FirstToken): Promise<void> {
  const { engine, iv } = run;
  for (let b = 0; b < batch.length; b++) {
    const r = batch[b]!;
    const res = results[r.i]!;
    const tok = argmax(res.logits);
    const from = starts[b]!;
    const len = P + r.ids.length - r.prefix - from;
    const past = rowPast(engine, out.present!, b, from, len);
    const next = await engine.step({ ids: BigInt64Array.from([BigInt(tok)]), batch: 1, width: 1, starts: [0], past, steer: iv.steer, project: iv, hiddenIndex: [0], logitsIndex: [], wantPresent: false });
    run.stats.computedTokens += 1;
    first.out[r.i] = { generatedIds: [tok], finish: first.stop.has(tok) ? 'stop' : 'length', promptLastHidden: res.hidden, firstTokenHidden: next.hidden };
  }
}

/**
 * Tokens a workload would compute with reuse and an unbounded cache (each distinct prefix piece once, every suffix),
 * from the plan alone: a deterministic figure for manifests. Only the last token of each prompt is assumed wanted.
 */
export function plannedReuse(prompts: readonly (readonly number[])[], boundaries: readonly (readonly number[])[] = prefixPlan(prompts)): ReuseStats & { ratio: number } {
  const pieces = new Set<string>();
  let promptTokens = 0;
  let computedTokens = 0;
  prompts.forEach((ids, i) => {
    promptTokens += ids.length;
    const { prefix, chain } = choosePrefix(boundaries[i]!, ids.length, ids.length - 1);
    computedTokens += ids.length - prefix;
    const steps = [...chain, prefix].filter((b) => b > 0);
    let below = 0;
    for (const b of steps) {
      const key = `${chain.filter((c) => c < b).join(',')}|${ids.slice(0, b).join(',')}`;
      if (!pieces.has(key)) { pieces.add(key); computedTokens += b - below; }
      below = b;
    }
  });
  return { promptTokens, computedTokens, ratio: promptTokens ? computedTokens / promptTokens : 0 };
}
