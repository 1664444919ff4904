/**
 * `guard eval --shard i/n`: this shard's share of the (method × case) work items, token-balanced, run as usual
 * and written to results/<name>/shards/guard-eval/shard-<i>-of-<n>/rows-<bench>.jsonl; `safekeep merge` joins
 * the rows in the single-process order and writes Table 4 exactly as one process does (util/shard-rows.ts; `s3 eval`
 * shards the same way: s3/shard.ts).
 * Token cost of an item is ESTIMATED from characters (≈ 4 per token: endpoints give us no tokenizer) — the request
 * the agent sees, plus the judge's copy of it for judging methods, plus each one's output budget.
 */
import { join } from 'node:path';
import type { ShardEntry } from '../util/shard-run.ts';
import { mergeShardRows, runShardRows } from '../util/shard-rows.ts';
import type { Shard } from '../util/shard.ts';
import { agentHarmCases, injecAgentCases, type GuardBench, type GuardCase, type InjecSetting } from './bench/cases.ts';
import { evalItems, runEvalItems, summarizeEval, type EvalItem, type EvalOptions, type EvalRow, type MethodSummary } from './eval.ts';
import { writeGuardTables, type WrittenTables } from './table.ts';
import type { GuardMethod } from './types.ts';

/** What merge needs to rebuild the cases and write Table 4 (equal across shards). */
export interface GuardMergeOptions {
  bench: GuardBench;
  dataDir: string;
  settings: InjecSetting[];
  /** per-group case limit; null = all */
  limit: number | null;
  methods: GuardMethod[];
  /** the run's name (results/<name>) and Table 4 folder */
  name: string;
  out: string;
  maxTokens: number;
  judgeMaxTokens: number;
  /** writeGuardTables' meta */
  meta: Record<string, unknown>;
}

function loadCases(m: Pick<GuardMergeOptions, 'bench' | 'dataDir' | 'settings' | 'limit'>): GuardCase[] {
  const limit = m.limit ?? Infinity;
  return m.bench === 'agentharm' ? agentHarmCases(m.dataDir, limit) : injecAgentCases(m.dataDir, m.settings, limit);
}

/** Estimated tokens of an item (see the file comment). */
export function itemTokens(it: EvalItem, maxTokens: number, judgeMaxTokens: number): number {
  const prompt = Math.ceil(JSON.stringify(it.c.request).length / 4);
  return prompt + maxTokens + (it.method === 'base' || it.method === 'safeprompt' ? 0 : prompt + judgeMaxTokens);
}

const rowsFile = (bench: GuardBench): string => `rows-${bench}.jsonl`;
const itemKey = (method: string, caseId: string): string => `${method} × ${caseId}`;

export function runGuardShard(cases: readonly GuardCase[], opts: EvalOptions, shard: Shard, m: GuardMergeOptions,
  identity: Record<string, string>): Promise<{ dir: string; items: number; tokens: number; seconds: number }> {
  return runShardRows({
    resultsDir: join(m.out, '..'), command: 'guard-eval', shard, identity, options: { ...m }, file: rowsFile(m.bench),
    items: evalItems(cases, m.methods), cost: (it) => itemTokens(it, m.maxTokens, m.judgeMaxTokens),
    run: (mine, progress) => runEvalItems(mine, { ...opts, onProgress: (done, total) => { opts.onProgress?.(done, total); progress(done); } }),
  });
}

/** Joins the shards' rows (each item exactly once) and writes Table 4 as one process would. */
export function finishGuardEval(m: GuardMergeOptions, shards: readonly ShardEntry[]): { files: WrittenTables; summaries: MethodSummary[] } {
  const cases = loadCases(m);
  const rows = mergeShardRows<EvalRow>(shards, rowsFile(m.bench), (r) => itemKey(r.method, r.caseId), evalItems(cases, m.methods).map((it) => itemKey(it.method, it.c.id)));
  const summaries = summarizeEval(m.bench, cases, rows, m.methods);
  return { files: writeGuardTables(m.out, m.bench, m.name, summaries, rows, m.meta), summaries };
}
