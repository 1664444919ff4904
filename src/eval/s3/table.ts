/**
 * `s3 eval` writers: per-configuration table as Markdown, CSV and JSON, every trajectory as JSONL (with each stage
 * decision). Written atomically.
 */
import { join } from 'node:path';
import { writeFileAtomic } from '../../util/atomic.ts';
import { shownRate, tableJsonValue, type Rate } from '../metrics.ts';
import { formatRate } from '../table4/table.ts';
import type { MeanCI, S3Summary, ScoredTrajectory } from './eval.ts';

const f = (x: number, d: number) => (Number.isFinite(x) ? x.toFixed(d) : '–');
const formatMean = (m: MeanCI, d = 2) => (m.n === 0 ? '–' : `${f(m.mean, d)} [${f(m.lo, d)}, ${f(m.hi, d)}]`);

/** multistage: one row per configuration × risk type (the stage where its hazard enters), with GIC and RSC. */
function riskTypeTable(s: readonly S3Summary[]): string[] {
  if (!s.some((x) => x.riskTypes)) return [];
  const out = ['', '## Per risk type and stage', '', '| Config | Risk type | Stage | ASR % | Benign completion % | GIC / task | RSC / task |', '| --- | --- | --- | --- | --- | --- | --- |'];
  for (const x of s) {
    for (const [rt, r] of Object.entries(x.riskTypes ?? {})) out.push(`| ${x.config} | ${rt} | ${r.stage} | ${formatRate(r.asr)} (${r.asr.k}/${r.asr.n}) | ${formatRate(r.benign)} (${r.benign.k}/${r.benign.n}) | ${formatMean(r.gic)} | ${formatMean(r.rsc)} |`);
  }
  out.push('', 'Multistage ASR and benign completion are read from the world\'s end state, so a harm incident response undid already counts as not carried out (ASR after remediation = ASR).');
  return out;
}

export function s3MarkdownTable(bench: string, model: string, s: readonly S3Summary[]): string {
  const groups = [...new Set(s.flatMap((x) => Object.keys(x.groups)))].sort();
  const cols = ['Config', 'n', 'ASR %', 'Benign completion %', 'GIC / task', 'RSC / task', 'Extra tokens / task', 'Latency ms / task', 'Recovery fallbacks', 'ASR after remediation %',
    ...groups.flatMap((g) => [`${g} ASR %`, `${g} benign %`])];
  const lines = [`# S³ — ${bench} — ${model}`, '', `| ${cols.join(' | ')} |`, `|${cols.map(() => ' --- ').join('|')}|`];
  for (const x of s) {
    lines.push(`| ${x.config} | ${x.n} | ${formatRate(x.asr)} | ${formatRate(x.benign)} | ${formatMean(x.gic)} | ${formatMean(x.rsc)} | ${formatMean(x.extraTokens, 1)} | ${formatMean(x.latencyMs, 0)} | ${x.fallbacks} | ${formatRate(x.asrAfterRemediation)} | ${groups.map((g) => { const r = x.groups[g]; return r ? `${formatRate(r.asr)} | ${formatRate(r.benign)}` : '– | –'; }).join(' | ')} |`);
  }
  lines.push(...riskTypeTable(s));
  lines.push('', 'Rates: % with 95 % Wilson intervals. Per-task means with 95 % normal-approximation intervals. GIC = guard invocations,',
    'RSC = recovery signals, extra tokens = guard LLM + refusal-prefill tokens. n = tasks per configuration.',
    'Recovery fallbacks = recoveries that replaced a whole observation or answer because the evidence could not be cut.',
    'ASR after remediation = ASR counting a harm that incident response undid (contained + inverse action) as not carried out.');
  return lines.join('\n') + '\n';
}

function s3CsvTable(s: readonly S3Summary[]): string {
  const num = (x: number) => (Number.isFinite(x) ? String(Math.round(x * 1e6) / 1e6) : '');
  const rate = (rate: Rate) => { const r = shownRate(rate); return [num(r.p), String(r.k), String(r.n), num(r.lo), num(r.hi)]; };
  const mean = (m: MeanCI) => [num(m.mean), num(m.lo), num(m.hi)];
  const head = ['config', 'n', 'asr', 'asr_k', 'asr_n', 'asr_lo', 'asr_hi', 'benign', 'benign_k', 'benign_n', 'benign_lo', 'benign_hi',
    'gic', 'gic_lo', 'gic_hi', 'rsc', 'rsc_lo', 'rsc_hi', 'extra_tokens', 'extra_tokens_lo', 'extra_tokens_hi', 'latency_ms', 'latency_ms_lo', 'latency_ms_hi', 'fallbacks'];
  return [head.join(','), ...s.map((x) => [x.config, String(x.n), ...rate(x.asr), ...rate(x.benign), ...mean(x.gic), ...mean(x.rsc), ...mean(x.extraTokens), ...mean(x.latencyMs), String(x.fallbacks)].join(','))].join('\n') + '\n';
}

/** The summaries as the report shows them (results.json, the figure): an empty rate without an interval. */
export function s3ReportRows(s: readonly S3Summary[]): S3Summary[] {
  return s.map((x) => ({
    ...x, asr: shownRate(x.asr), asrAfterRemediation: shownRate(x.asrAfterRemediation), benign: shownRate(x.benign),
    groups: Object.fromEntries(Object.entries(x.groups).map(([g, r]) => [g, { asr: shownRate(r.asr), benign: shownRate(r.benign) }])),
  }));
}

export interface S3Files { markdown: string; csv: string; json: string; trajectories: string }

export function writeS3Tables(dir: string, bench: string, model: string, summaries: readonly S3Summary[], rows: readonly ScoredTrajectory[], meta: Record<string, unknown>): S3Files {
  const base = join(dir, `s3-${bench}`);
  const files = { markdown: `${base}.md`, csv: `${base}.csv`, json: `${base}.json`, trajectories: join(dir, `trajectories-${bench}.jsonl`) };
  writeFileAtomic(files.markdown, s3MarkdownTable(bench, model, summaries));
  writeFileAtomic(files.csv, s3CsvTable(summaries));
  writeFileAtomic(files.json, JSON.stringify({ bench, model, ...meta, configs: summaries }, tableJsonValue, 2) + '\n');
  writeFileAtomic(files.trajectories, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return files;
}
