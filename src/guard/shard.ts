/**
 * `guard eval --shard i/n`: this shard's share of the (method × case) work items, token-balanced, run as usual
 * and written to results/<name>/shards/guard-eval/shard-<i>-of-<n>/rows-<bench>.jsonl; `safekeep merge` joins
 * the rows in the single-process order and writes Table 4 exactly as one process does (util/shard.ts).
 * Token cost of an item is ESTIMATED from characters (≈ 4 per token: endpoints give us no tokenizer) — the request
 * the agent sees, plus the judge's copy of it for judging methods, plus each one's output budget.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from './files.ts';
import { SafekeepError } from '../util/errors.ts';
import { ShardRun, type ShardEntry } from '../util/shard-run.ts';
import { selectShard, type Shard } from '../util/shard.ts';
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

export function loadCases(m: Pick<GuardMergeOptions, 'bench' | 'dataDir' | 'settings' | 'limit'>): GuardCase[] {
  const limit = m.limit ?? Infinity;
  return m.bench === 'agentharm' ? agentHarmCases(m.dataDir, limit) : injecAgentCases(m.dataDir, m.settings, limit);
}

/** Estimated tokens of an item (see the file comment). */
export function itemTokens(it: EvalItem, maxTokens: number, judgeMaxTokens: number): number {
  const prompt = Math.ceil(JSON.stringify(it.c.request).length / 4);
  return prompt + maxTokens + (it.method === 'base' || it.method === 'safeprompt' ? 0 : prompt + judgeMaxTokens);
}

const rowsFile = (bench: GuardBench): string => `rows-${bench}.jsonl`;

export async function runGuardShard(cases: readonly GuardCase[], opts: EvalOptions, shard: Shard, m: GuardMergeOptions,
  identity: Record<string, string>): Promise<{ dir: string; items: number; tokens: number; seconds: number }> {
  const cost = (it: EvalItem): number => itemTokens(it, m.maxTokens, m.judgeMaxTokens);
  const mine = selectShard(evalItems(cases, m.methods), cost, shard);
  const run = new ShardRun(join(m.out, '..'), 'guard-eval', shard, identity, { ...m }, { items: mine.length, tokens: mine.reduce((t, x) => t + cost(x), 0) });
  let last = 0;
  const rows = await runEvalItems(mine, {
    ...opts,
    onProgress: (done, total) => {
      opts.onProgress?.(done, total);
      run.add(done - last, mine.slice(last, done).reduce((t, x) => t + cost(x), 0));
      last = done;
    },
  });
  writeFileAtomic(join(run.dir, rowsFile(m.bench)), rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''));
  const rec = run.finish();
  return { dir: run.dir, items: rec.items, tokens: rec.tokens, seconds: rec.seconds ?? 0 };
}

/** Joins the shards' rows (each item exactly once) and writes Table 4 as one process would. */
export function finishGuardEval(m: GuardMergeOptions, shards: readonly ShardEntry[]): { files: WrittenTables; summaries: MethodSummary[] } {
  const cases = loadCases(m);
  const byItem = new Map<string, { row: EvalRow; shard: string }>();
  const key = (method: string, caseId: string): string => `${method}\t${caseId}`;
  for (const s of shards) {
    const path = join(s.dir, rowsFile(m.bench));
    if (!existsSync(path)) throw new SafekeepError(`${s.dir}: no ${rowsFile(m.bench)} (shard ${s.name} did not finish writing)`);
    for (const line of readFileSync(path, 'utf8').split('\n').filter(Boolean)) {
      const row = JSON.parse(line) as EvalRow;
      const k = key(row.method, row.caseId);
      const prev = byItem.get(k);
      if (prev) throw new SafekeepError(`guard eval: ${row.method} × ${row.caseId} is in both ${prev.shard} and ${s.name} (duplicate shards)`);
      byItem.set(k, { row, shard: s.name });
    }
  }
  const items = evalItems(cases, m.methods);
  const missing = items.filter((it) => !byItem.has(key(it.method, it.c.id)));
  if (missing.length) throw new SafekeepError(`guard eval: ${missing.length} of ${items.length} items are in no shard (first: ${missing[0]!.method} × ${missing[0]!.c.id}); the data or --limit changed?`);
  if (byItem.size !== items.length) throw new SafekeepError(`guard eval: shards hold ${byItem.size - items.length} items that are not in ${m.bench} at ${m.dataDir}`);
  const rows = items.map((it) => byItem.get(key(it.method, it.c.id))!.row);
  const summaries = summarizeEval(m.bench, cases, rows, m.methods);
  return { files: writeGuardTables(m.out, m.bench, m.name, summaries, rows, m.meta), summaries };
}
