/**
 * Table 4 writers: Markdown, CSV and JSON of the per-method summaries (percentages with 95 % Wilson intervals),
 * plus every output with its label as JSONL. All files written atomically under `results/<model>/guard/`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { GuardBench } from '../../benchmarks/cases.ts';
import type { EvalRow, MethodSummary } from './eval.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { shownRate, tableJsonValue, type Rate } from '../metrics.ts';
import { paperModel, paperNumbers } from '../../report/paper-numbers.ts';

const LABELS: Record<string, string> = {
  refusal: 'Refusal', acc: 'Acc', valid: 'Valid', asr: 'ASR (Total)',
  refusalJudge: 'Refusal (AgentHarm judge)', agreement: 'Substring–judge agreement',
  dh: 'ASR-valid DH', ds1: 'DS step 1', ds2: 'DS step 2', ds: 'ASR-valid DS',
};
/** the paper's Table 4 columns (the combined table); per-benchmark tables keep every column */
const TABLE4_KEYS = new Set(['refusal', 'acc', 'valid', 'asr']);

function header(key: string): string {
  const [a, b] = key.includes('.') ? key.split('.') : ['', key];
  return `${a ? `${a[0]!.toUpperCase()}${a.slice(1)} ` : ''}${LABELS[b!] ?? b}`;
}

const pct = (x: number) => (Number.isFinite(x) ? (100 * x).toFixed(1) : '–');
export function formatRate(r: Rate): string {
  return r.n === 0 ? '–' : `${pct(r.p)} [${pct(r.lo)}, ${pct(r.hi)}]`;
}
const ms = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : '–');

/**
 * `refusalPath`: how the refusal path ran (the endpoint's prefill mode or the local prefill), said under the table;
 * `agentFormat`: InjecAgent's format when it is not native (native tables stay as they were).
 */
export function markdownTable(bench: GuardBench, model: string, s: readonly MethodSummary[], refusalPath?: string, agentFormat?: string): string {
  const keys = Object.keys(s[0]?.metrics ?? {});
  // the judge's flag rate right after Refusal (InjecAgent: after its own columns), unparseable answers at the end
  const judging = s.some((m) => m.flagRate);
  const overRefusal = judging && bench === 'agentharm';
  const flagCol = judging ? [`Judge flag rate % [95 % CI] (${bench === 'agentharm' ? 'harmful requests' : 'attack cases'})`, ...(overRefusal ? ['Benign over-refusal: judge flag rate % [95 % CI] (benign requests)'] : [])] : [];
  const at = bench === 'agentharm' ? 1 : keys.length;
  const cols = ['Method', ...keys.slice(0, at).map((k) => `${header(k)} % [95 % CI]`), ...flagCol, ...keys.slice(at).map((k) => `${header(k)} % [95 % CI]`),
    'n', 'Judge ms (mean / p50 / p99)', 'Judge tokens / request', 'Flagged', ...(judging ? ['Unparseable judge answers'] : []),
    ...(bench === 'injecagent' ? ['Step-2 tool responses (exact / same-tool / none)'] : []), ...COST_HEADERS];
  const paper = paperTable4Columns(model, keys.map((k) => (k.includes('.') ? k : `${bench}.${k}`)));
  if (paper) cols.push(...paper.headers);
  const lines = [
    `# Table 4 — ${bench === 'agentharm' ? 'AgentHarm' : 'InjecAgent'} — ${model}`,
    '',
    `| ${cols.join(' | ')} |`,
    `|${cols.map(() => ' --- ').join('|')}|`,
  ];
  for (const m of s) {
    const k = m.metrics;
    const judge = m.judged ? `${ms(m.judgeLatencyMs.mean)} / ${ms(m.judgeLatencyMs.p50)} / ${ms(m.judgeLatencyMs.p99)}` : '–';
    const tokens = m.judged ? m.judgeTokensPerRequest.toFixed(1) : '–';
    // InjecAgent's columns have different denominators: each cell shows its k/n
    const cell = (r: Rate) => (bench === 'injecagent' && r.n > 0 ? `${formatRate(r)} (${r.k}/${r.n})` : formatRate(r));
    const kOfN = (r: Rate | null | undefined) => (r ? `${formatRate(r)} (${r.k}/${r.n})` : '–');
    const flag = judging ? [kOfN(m.flagRate), ...(overRefusal ? [kOfN(m.benignFlagRate)] : [])] : [];
    const unparseable = judging ? [m.judged ? `${m.unparseable} (${pct(m.unparseable / m.judged)} %)` : '–'] : [];
    const sim = bench === 'injecagent' && m.simulated ? [`${m.simulated.exact} / ${m.simulated.sameTool} / ${m.simulated.none}`] : bench === 'injecagent' ? ['–'] : [];
    const cells = [...keys.slice(0, at).map((key) => cell(k[key]!)), ...flag, ...keys.slice(at).map((key) => cell(k[key]!))];
    lines.push(`| ${m.method} | ${cells.join(' | ')} | ${m.n} | ${judge} | ${tokens} | ${m.probed ? `${m.flagged}/${m.n}` : m.judged ? `${m.flagged}/${m.judged}` : '–'} |${[...unparseable, ...sim, ...costCells(m), ...(paper ? paper.cells(m.method) : [])].map((u) => ` ${u} |`).join('')}`);
  }
  // the cascade's band and probe-steer's steered answers are reported, never hidden
  for (const m of s) {
    if (m.bands) lines.push('', `${m.method}: the probe let ${m.bands.run} of ${m.n} requests run unjudged, sent ${m.bands.judge} to the judge and refused ${m.bands.refuse} itself.`);
    if (m.steered !== undefined) lines.push('', `${m.method}: ${m.steered} of ${m.n} requests were flagged and answered by the steered generation.`);
  }
  // a verdict that is mostly unparseable measures the unparseable policy, not the judge: said in the table itself
  for (const m of s.filter((x) => x.judged > 0 && x.unparseable * 2 >= x.judged)) {
    lines.push('', `**Warning:** ${m.unparseable} of ${m.judged} judge answers of ${m.method} were unparseable (counted by the --unparseable policy); its judge numbers measure that policy, not the judge.`);
  }
  lines.push('', 'Percentages with 95 % Wilson score intervals; n = requests per method. Judge latency and token overhead are per judged request / per request.');
  lines.push('', COST_NOTE);
  if (paper) lines.push('', paper.note);
  if (refusalPath) lines.push('', `Refusal path: ${refusalPath}.`);
  if (agentFormat) lines.push('', `Agent format: ${agentFormat}.`);
  if (bench === 'injecagent') {
    lines.push('', 'InjecAgent\'s own columns: Valid = 1 − invalid/cases; ASR-valid DH; data stealing step 1 (extraction tool called), ' +
      'step 2 (after the simulated response, the sending tool called), ASR-valid DS (both steps); ASR (Total) = (DH succ + DS succ) / valid ' +
      'attempts = Table 4\'s ASR. Each cell: % [95 % CI] (k/n).');
    lines.push('', 'Step-2 tool responses: the simulated response of the extraction tool fed back in step 2 — the exact cached response of the call\'s ' +
      'arguments, the same tool\'s response for other arguments (fallback), or none found (step 2 not run).');
  }
  return lines.join('\n') + '\n';
}

/** our metric key → the paper's Table 4 column (data/paper/paper-numbers.json) */
const PAPER_COLUMN: Record<string, number> = { 'agentharm.acc': 0, 'agentharm.refusal': 1, 'base.valid': 2, 'base.asr': 3, 'enhanced.valid': 4, 'enhanced.asr': 5 };
const PAPER_METHOD: Record<string, string> = { base: 'Base', safejudge: 'SafeJudge', safeprompt: 'SafePrompt', safekeep: 'SafeKeep' };

/**
 * The paper's Table 4 figures beside ours: one column per measured metric the paper reports, for the paper's model
 * this one matches by name, else every paper model's figure ("Llama / Qwen / Gemini / GPT"); methods the paper
 * did not run show "–". `keys` are metric keys qualified by bench (agentharm.refusal, base.asr, …).
 */
export function paperTable4Columns(model: string, keys: readonly string[]): { headers: string[]; cells: (method: string) => string[]; note: string } | null {
  const pt = paperNumbers()?.tables.table_4;
  if (!pt) return null;
  const mine = keys.filter((k) => PAPER_COLUMN[k] !== undefined);
  if (mine.length === 0) return null;
  const models = Object.keys(pt.rows);
  const m = paperModel(model, models);
  const shown = m ? [m] : models;
  const who = m ?? shown.map((x) => x.replace(/[-\d.].*$/, '')).join(' / ');
  return {
    headers: mine.map((k) => `Paper ${pt.column_labels[PAPER_COLUMN[k]!]} % (${who})`),
    cells: (method) => mine.map((k) => {
      const name = PAPER_METHOD[method];
      if (!name) return '–';
      return shown.map((x) => pt.rows[x]![name]?.[PAPER_COLUMN[k]!]?.toFixed(1) ?? '–').join(' / ');
    }),
    note: `Paper: ${pt.title}, ${shown.join(', ')} on ${pt.data} (data/paper/paper-numbers.json).`,
  };
}

/** the cost columns, every method alike (eval.ts MethodSummary.cost) */
const COST_HEADERS = ['Judge calls / request', 'Guard tokens / request', 'Added ms p50 / p95'];
const COST_NOTE = 'Cost, every method on the same backend in the same run: judge calls and guard tokens (judge prompt + completion, and a probe-halted prefill read again by the next call) per request; added ms = wall time of the request before the call that produced the answer (nearest-rank p50 / p95). SafePrompt\'s longer system prompt is inside the answering call and not counted. A reply the local engine serves from memory (an identical call earlier in the run: the cascade\'s judge call after SafeKeep\'s, an executed call after the base agent\'s) costs only its lookup — compare latencies with --no-cache. InjecAgent: the first step\'s request.';

function costCells(m: MethodSummary): string[] {
  const c = m.cost;
  if (!c) return ['–', '–', '–'];
  return [c.judgeCallsPerRequest.toFixed(2), c.guardTokensPerRequest.toFixed(1), c.addedMs.n ? `${ms(c.addedMs.p50)} / ${ms(c.addedMs.p95)}` : '–'];
}

export function csvTable(s: readonly MethodSummary[]): string {
  const keys = Object.keys(s[0]?.metrics ?? {});
  const judging = s.some((m) => m.flagRate);
  const head = ['method', ...keys.flatMap((k) => [`${k}`, `${k}_k`, `${k}_n`, `${k}_lo`, `${k}_hi`]), 'n', 'judged', 'flagged', 'unparseable', 'judge_ms_mean', 'judge_ms_p50', 'judge_ms_p99', 'judge_tokens_per_request',
    ...(judging ? ['flag_rate', 'flag_rate_k', 'flag_rate_n', 'flag_rate_lo', 'flag_rate_hi'] : []),
    'judge_calls_per_request', 'guard_tokens_per_request', 'added_ms_p50', 'added_ms_p95'];
  const num = (x: number) => (Number.isFinite(x) ? String(Math.round(x * 1e6) / 1e6) : '');
  const flagCells = (r: Rate) => [num(r.p), String(r.k), String(r.n), num(r.lo), num(r.hi)];
  const rows = s.map((m) => [
    m.method,
    ...keys.flatMap((k) => { const r = shownRate(m.metrics[k]!); return [num(r.p), String(r.k), String(r.n), num(r.lo), num(r.hi)]; }),
    String(m.n), String(m.judged), String(m.flagged), String(m.unparseable),
    num(m.judgeLatencyMs.mean), num(m.judgeLatencyMs.p50), num(m.judgeLatencyMs.p99), num(m.judgeTokensPerRequest),
    ...(judging ? (m.flagRate ? flagCells(shownRate(m.flagRate)) : ['', '', '', '', '']) : []),
    ...(m.cost ? [num(m.cost.judgeCallsPerRequest), num(m.cost.guardTokensPerRequest), num(m.cost.addedMs.p50), num(m.cost.addedMs.p95)] : ['', '', '', '']),
  ].join(','));
  return [head.join(','), ...rows].join('\n') + '\n';
}

export interface WrittenTables { markdown: string; csv: string; json: string; rows: string }

export function writeGuardTables(dir: string, bench: GuardBench, model: string, summaries: readonly MethodSummary[], rows: readonly EvalRow[], meta: Record<string, unknown>): WrittenTables {
  const base = join(dir, `table4-${bench}`);
  const files = { markdown: `${base}.md`, csv: `${base}.csv`, json: `${base}.json`, rows: join(dir, `outputs-${bench}.jsonl`) };
  const protocol = meta.protocol as { refusalPath?: unknown; injecagentFormat?: unknown; modelKind?: unknown; probe?: unknown } | undefined;
  const str = (x: unknown): string | undefined => (typeof x === 'string' ? x : undefined);
  const md = markdownTable(bench, model, summaries, str(protocol?.refusalPath), str(protocol?.injecagentFormat));
  // which kind of model produced the numbers, and the probe (band, α) the probe methods read
  const extra = [...(str(protocol?.modelKind) ? [`Model: ${str(protocol?.modelKind)}.`] : []), ...(str(protocol?.probe) ? [`Probe: ${str(protocol?.probe)}.`] : [])];
  writeFileAtomic(files.markdown, extra.length ? `${md}\n${extra.join('\n\n')}\n` : md);
  writeFileAtomic(files.csv, csvTable(summaries));
  writeFileAtomic(files.json, JSON.stringify({ bench, model, ...meta, methods: summaries }, tableJsonValue, 2) + '\n');
  writeFileAtomic(files.rows, rows.map(({ outcome: _o, ...r }) => JSON.stringify(r)).join('\n') + '\n');
  const combined = combinedTable4(dir);
  if (combined) writeFileAtomic(join(dir, 'table4.md'), combined);
  return files;
}

interface StoredCost { judgeCallsPerRequest: number | null; guardTokensPerRequest: number | null; addedMs: { n: number; p50: number | null; p95: number | null } }
interface StoredTable { bench: GuardBench; model: string; methods: { method: string; metrics: Record<string, { k: number; n: number; p: number | null; lo: number | null; hi: number | null }>; cost?: StoredCost }[] }

/**
 * The paper's Table 4 layout from whatever `table4-<bench>.json` files exist in `dir`: one row per method,
 * AgentHarm Refusal/Acc then InjecAgent Valid/ASR per setting (cells "p [lo, hi]" in %, "–" when not run).
 */
function combinedTable4(dir: string): string | null {
  const tables: StoredTable[] = [];
  for (const bench of ['agentharm', 'injecagent'] as const) {
    const f = join(dir, `table4-${bench}.json`);
    if (existsSync(f)) tables.push(JSON.parse(readFileSync(f, 'utf8')) as StoredTable);
  }
  if (tables.length === 0) return null;
  const cols: { bench: GuardBench; key: string }[] = tables.flatMap((t) =>
    Object.keys(t.methods[0]?.metrics ?? {}).filter((key) => TABLE4_KEYS.has(key.split('.').pop()!)).map((key) => ({ bench: t.bench, key })));
  const methods = [...new Set(tables.flatMap((t) => t.methods.map((m) => m.method)))];
  const cell = (bench: GuardBench, method: string, key: string) => {
    const r = tables.find((t) => t.bench === bench)?.methods.find((m) => m.method === method)?.metrics[key];
    return r && r.p !== null && r.lo !== null && r.hi !== null ? formatRate({ k: r.k, n: r.n, p: r.p, lo: r.lo, hi: r.hi }) : '–';
  };
  const names = cols.map((c) => `${c.bench === 'agentharm' ? 'AgentHarm' : 'InjecAgent'} ${header(c.key)}`);
  // the cost of each method per benchmark, beside its rates
  const costNames = tables.flatMap((t) => COST_HEADERS.map((h) => `${t.bench === 'agentharm' ? 'AgentHarm' : 'InjecAgent'} ${h}`));
  const fixed = (x: number | null | undefined, d: number) => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(d) : '–');
  const costCellsOf = (m: string) => tables.flatMap((t) => {
    const c = t.methods.find((x) => x.method === m)?.cost;
    if (!c) return ['–', '–', '–'];
    return [fixed(c.judgeCallsPerRequest, 2), fixed(c.guardTokensPerRequest, 1), c.addedMs.n ? `${fixed(c.addedMs.p50, 0)} / ${fixed(c.addedMs.p95, 0)}` : '–'];
  });
  const paper = paperTable4Columns(tables[0]!.model, cols.map((c) => (c.key.includes('.') ? c.key : `${c.bench}.${c.key}`)));
  const paperNames = paper?.headers ?? [];
  return [
    `# Table 4 — ${tables[0]!.model}`,
    '',
    `| Method | ${[...names, ...costNames, ...paperNames].join(' | ')} |`,
    `| --- |${[...cols, ...costNames, ...paperNames].map(() => ' --- ').join('|')}|`,
    ...methods.map((m) => `| ${m} | ${[...cols.map((c) => cell(c.bench, m, c.key)), ...costCellsOf(m), ...(paper ? paper.cells(m) : [])].join(' | ')} |`),
    '',
    '% with 95 % Wilson intervals. Per-benchmark details (n, judge latency, token overhead): table4-<bench>.md.',
    '',
    COST_NOTE,
    ...(paper ? ['', paper.note] : []),
  ].join('\n') + '\n';
}
