/**
 * Table 4's stage on the shared evaluation stage (src/eval/shard-stage.ts): `guard eval --shard i/n` runs this
 * shard's token-balanced share of the (method × case) work items; `safekeep merge` joins the lines in the
 * single-process order and writes the log and Table 4 exactly as one process does.
 * Token cost of an item is ESTIMATED from characters (≈ 4 per token: endpoints give us no tokenizer) — the request
 * the agent sees, plus the judge's copy of it for judging methods, plus each one's output budget.
 */
import { join } from 'node:path';
import { sampleId, type SampleLog } from '../../harness/log.ts';
import { evalStage } from '../shard-stage.ts';
import type { Shard } from '../../util/shard.ts';
import { agentHarmCases, injecAgentCases, type GuardBench, type GuardCase, type InjecSetting } from '../../benchmarks/cases.ts';
import { evalItems, guardTask, summarizeEval, type EvalItem, type EvalOptions, type EvalRow, type MethodSummary, type ReactFormat } from './eval.ts';
import { renderReactPrompt } from '../../benchmarks/injecagent-react.ts';
import { writeGuardTables, type WrittenTables } from './table.ts';
import type { GuardMethod } from '../../guard/types.ts';

/** InjecAgent's agent format: its own ReAct prompt and parser (the paper's setting) or native tool calling. */
export type InjecAgentFormat = 'react' | 'native';
export const INJECAGENT_FORMATS: readonly InjecAgentFormat[] = ['react', 'native'];

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
  /** InjecAgent's agent format (null for AgentHarm): shards run in different formats are not joined */
  injecagentFormat: InjecAgentFormat | null;
  /** the backend's native call syntax (a rescoring parses the logged replies with it) */
  callFormat?: string;
}

export function loadGuardCases(m: Pick<GuardMergeOptions, 'bench' | 'dataDir' | 'settings' | 'limit'>): GuardCase[] {
  const limit = m.limit ?? Infinity;
  return m.bench === 'agentharm' ? agentHarmCases(m.dataDir, limit) : injecAgentCases(m.dataDir, m.settings, limit);
}

/** Estimated tokens of an item (see the file comment); in InjecAgent's react format the agent sees its own, longer prompt. */
export function itemTokens(it: EvalItem, maxTokens: number, judgeMaxTokens: number, react?: ReactFormat): number {
  const prompt = Math.ceil(JSON.stringify(it.c.request).length / 4);
  const rc = react && it.c.bench === 'injecagent' ? react.cases.get(it.c.id) : undefined;
  const agent = rc ? Math.ceil(JSON.stringify(renderReactPrompt(react!.ctx, rc)).length / 4) : prompt;
  return agent + maxTokens + (it.method === 'base' || it.method === 'safeprompt' ? 0 : prompt + judgeMaxTokens);
}

/** Table 4's shards go to results/<name>/shards/guard-eval/ (its folder is results/<name>/guard). */
const stage = evalStage<GuardMergeOptions>({
  command: 'guard-eval',
  resultsDir: (m) => join(m.out, '..'),
  protocol: (m) => (m.meta.protocol ?? {}) as Record<string, unknown>,
});

/** A shard's log lines (src/harness/shard.ts). */
export const guardSamplesFile = (bench: GuardBench): string => stage.samplesFile(bench);

export function runGuardShard(cases: readonly GuardCase[], opts: EvalOptions, shard: Shard, m: GuardMergeOptions,
  identity: Record<string, string>): Promise<{ dir: string; items: number; tokens: number; seconds: number }> {
  return stage.runShard(m, shard, identity, {
    task: guardTask(opts), items: evalItems(cases, m.methods), cost: (it) => itemTokens(it, m.maxTokens, m.judgeMaxTokens, opts.react),
    concurrency: opts.concurrency, onProgress: opts.onProgress,
  });
}

export interface GuardRunFiles {
  files: WrittenTables & { log: string };
  summaries: MethodSummary[];
  rows: EvalRow[];
  /** judge answers that were neither YES nor NO, of all judged */
  unparseable: { k: number; judged: number };
}

/**
 * The end of every Table 4 run (one process or merged shards): the per-sample log is written, then read back, and
 * Table 4 is computed from it — so what the tables say is what the log holds, and a rescoring reproduces them.
 */
export function writeGuardRun(m: GuardMergeOptions, samples: readonly SampleLog<EvalRow>[]): GuardRunFiles {
  const { log, rows } = stage.writeLog(m, samples);
  const cases = loadGuardCases(m);
  const summaries = summarizeEval(m.bench, cases, rows, m.methods);
  const judged = rows.filter((r) => r.verdict !== null);
  const k = judged.filter((r) => r.verdict === 'unparseable').length;
  const meta = { ...m.meta, protocol: { ...(m.meta.protocol as Record<string, unknown> | undefined), judgeUnparseableShare: judged.length ? k / judged.length : null } };
  return { files: { ...writeGuardTables(m.out, m.bench, m.name, summaries, rows, meta), log }, summaries, rows, unparseable: { k, judged: judged.length } };
}

/** The keys of a run's items in the one-process order (what merge expects from the shards). */
export function guardExpectedKeys(m: GuardMergeOptions): string[] {
  return evalItems(loadGuardCases(m), m.methods).map((it) => sampleId(it.method, it.c.id));
}
