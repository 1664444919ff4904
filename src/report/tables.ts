/** Tables as Markdown, CSV and JSON: every value with its 95 % interval and n. */
import type { AnalysisResults, AurocCI, DiffCI, MeanCI, RateCI, S3Run, TableRow } from '../analysis/results.ts';
import { wilsonInterval } from '../analysis/stats.ts';
import { paperCell, paperHeader, paperModel, paperNumbers, paperTable1Row, paperTable2Row } from './paper-numbers.ts';
import { steeringConditionLabel } from './steering-label.ts';

type Cell = string | number | null;

export interface Table {
  /** file stem */
  name: string;
  title: string;
  /** column keys (CSV header) */
  columns: string[];
  rows: Cell[][];
  /** human-formatted header and cells (Markdown and HTML) */
  header: string[];
  display: string[][];
  /** sentence under the table */
  note?: string;
  /** JSON document written next to the CSV */
  json: unknown;
}

/** `### title`, the table, the note. */
export function tableMarkdown(t: Table): string {
  return `### ${t.title}\n\n${toMarkdown(t.header, t.display)}${t.note ? `\n${t.note}\n` : ''}`;
}

const f3 = (x: number): string => x.toFixed(3);
const ciText = (e: AurocCI): string => `${f3(e.auroc)} [${f3(e.lo)}, ${f3(e.hi)}]`;
const diffText = (e: DiffCI): string => `${e.diff >= 0 ? '+' : '-'}${f3(Math.abs(e.diff))} [${f3(e.lo)}, ${f3(e.hi)}]`;

export function csvField(c: Cell): string {
  if (c === null) return '';
  const s = typeof c === 'number' ? String(c) : c;
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function toCsv(columns: readonly string[], rows: readonly Cell[][]): string {
  return [columns, ...rows].map((r) => r.map(csvField).join(',')).join('\n') + '\n';
}

function mdEscape(s: string): string {
  return s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

function toMarkdown(header: readonly string[], rows: readonly string[][]): string {
  const line = (r: readonly string[]) => `| ${r.map(mdEscape).join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n') + '\n';
}

function formatTable(res: AnalysisResults, which: 'table1' | 'table2'): Table {
  const rows: TableRow[] = res[which];
  const title =
    which === 'table1'
      ? `Table 1 — chatbot refusal direction scoring each configuration (AUROC at ℓ* = ${res.lStar.layer}, rule ${res.lStar.rule ?? 'cv'})`
      : `Table 2 — tool representation: schema vs flattened vs pseudoword (AUROC at ℓ* = ${res.lStar.layer}, rule ${res.lStar.rule ?? 'cv'})`;
  const columns = ['config', 'label', 'layer', 'n', 'cross_auroc', 'cross_lo', 'cross_hi', 'diff_vs_chatbot', 'diff_lo', 'diff_hi', 'within_auroc', 'within_lo', 'within_hi'];
  const csvRows: Cell[][] = rows.map((r) => [
    r.config, r.label, r.layer, r.cross.n, r.cross.auroc, r.cross.lo, r.cross.hi, r.crossDiff.diff, r.crossDiff.lo, r.crossDiff.hi, r.within.auroc, r.within.lo, r.within.hi,
  ]);
  const header = ['Configuration', 'n', 'AUROC, chatbot direction [95% CI]', 'Δ vs chatbot [95% CI]', 'AUROC, own direction [95% CI]'];
  const display = rows.map((r) => [r.label, String(r.cross.n), ciText(r.cross), diffText(r.crossDiff), ciText(r.within)]);
  let note = `ℓ* = ${res.lStar.layer} (rule ${res.lStar.rule ?? 'cv'}): ${res.lStar.method}. Intervals: ${res.bootstrap.reps} paired bootstrap resamples of groups of pairs (scenarios; seed ${res.bootstrap.seed}), percentile ${Math.round(res.bootstrap.level * 100)}%.`;
  // the paper's figure for the same row, beside ours (the JSON keeps it too; the CSV keeps its columns)
  const pt = paperNumbers()?.tables[which === 'table1' ? 'table_1' : 'table_2'];
  const paper = pt ? rows.map((r) => { const k = (which === 'table1' ? paperTable1Row : paperTable2Row)(r.config); return k ? { row: k, values: pt.rows[k] } : null; }) : [];
  if (pt) {
    const m = paperModel(res.model, pt.models);
    header.push(paperHeader('AUROC', pt.models, m));
    display.forEach((d, i) => d.push(paperCell(paper[i]?.values, pt.models, m, 3)));
    note += ` Paper: ${pt.models.join(', ')} on ${pt.data}.`;
  }
  return { name: which, title, columns, rows: csvRows, header, display, note, json: { title, layer: res.lStar.layer, layerRule: res.lStar.rule ?? 'cv', lStarMethod: res.lStar.method, bootstrap: res.bootstrap, rows, ...(pt ? { paper: { models: pt.models, data: pt.data, rows: paper } } : {}) } };
}

function curvesTable(res: AnalysisResults): Table {
  const columns = ['config', 'label', 'direction', 'layer', 'auroc', 'lo', 'hi', 'n'];
  const rows: Cell[][] = res.curves.flatMap((c) => c.perLayer.map((e, l) => [c.config, c.label, c.direction, l, e.auroc, e.lo, e.hi, e.n]));
  const title = 'AUROC by layer for every configuration';
  const header = ['Configuration', 'Direction', ...Array.from({ length: res.layers }, (_, l) => `ℓ=${l}`)];
  const display = res.curves.map((c) => [c.label, c.direction, ...c.perLayer.map((e) => f3(e.auroc))]);
  const note = `Point estimates only; intervals per layer in auroc-by-layer.csv / .json. ℓ* = ${res.lStar.layer}.`;
  return { name: 'auroc-by-layer', title, columns, rows, header, display, note, json: { title, lStar: res.lStar, bootstrap: res.bootstrap, curves: res.curves } };
}

function schemaCosineTable(res: AnalysisResults): Table | null {
  const sc = res.schemaCosines;
  if (!sc) return null;
  const columns = ['layer', 'cos_harmful', 'cos_benign', 'random_lo', 'random_hi', 'permutation_lo', 'permutation_hi'];
  const rows: Cell[][] = sc.harmful.map((h, l) => [l, h, sc.benign[l]!, sc.randomBand.lo[l]!, sc.randomBand.hi[l]!, sc.permutationBand?.lo[l] ?? null, sc.permutationBand?.hi[l] ?? null]);
  const title = 'Schema Direction: cosine with the chatbot refusal direction per layer';
  const header = ['Layer', 'cos(R_harmful, r)', 'cos(R_benign, r)', 'Random 95% band', 'Permutation 95% band'];
  const display = rows.map((r) => [String(r[0]), f3(r[1] as number), f3(r[2] as number), `[${f3(r[3] as number)}, ${f3(r[4] as number)}]`, r[5] === null ? '—' : `[${f3(r[5] as number)}, ${f3(r[6] as number)}]`]);
  const note = `n = ${sc.n.harmful} harmful, ${sc.n.benign} benign requests (${sc.pairs === 'extraction' ? 'extraction split only' : 'all pairs, the paper\'s Eq. 2'}); random band from ${sc.randomBand.reps} Gaussian unit vectors${sc.permutationBand ? `, permutation band from ${sc.permutationBand.reps} label shuffles` : ''}.`;
  return { name: 'schema-cosines', title, columns, rows, header, display, note, json: { title, ...sc } };
}

function firstTokenTable(res: AnalysisResults): Table | null {
  if (!res.firstToken?.length) return null;
  const columns = ['category', 'representation', 'layer', 'mean', 'sd', 'n'];
  const rows: Cell[][] = res.firstToken.flatMap((s) => s.mean.map((m, l) => [s.category, s.representation, l, m, s.sd[l]!, s.n]));
  const title = 'First-token projections on the chatbot refusal direction (mean ± sd)';
  const header = ['Condition', 'n', ...Array.from({ length: res.layers }, (_, l) => `ℓ=${l}`)];
  const display = res.firstToken.map((s) => [`${s.category} · ${s.representation}`, String(s.n), ...s.mean.map((m, l) => `${m.toFixed(2)} ± ${s.sd[l]!.toFixed(2)}`)]);
  const note = undefined;
  return { name: 'first-token', title, columns, rows, header, display, note, json: { title, series: res.firstToken } };
}

function normsTable(res: AnalysisResults): Table {
  const columns = ['kind', 'name', 'layer', 'norm'];
  const all = [
    ...res.norms.directions.map((s) => ['direction', s] as const),
    ...res.norms.meanHidden.map((s) => ['mean_hidden', s] as const),
  ];
  const rows: Cell[][] = all.flatMap(([kind, s]) => s.norm.map((v, l) => [kind, s.name, l, v]));
  const title = 'Norms per layer: directions and mean ‖h‖ (the residual scale for steering strengths)';
  const header = ['Vector', ...Array.from({ length: res.layers }, (_, l) => `ℓ=${l}`)];
  const display = all.map(([kind, s]) => [kind === 'direction' ? `‖${s.name}‖` : `mean ‖h‖ (${s.name})`, ...s.norm.map((v) => v.toFixed(2))]);
  const note = undefined;
  return { name: 'norms', title, columns, rows, header, display, note, json: { title, ...res.norms } };
}

function steeringTable(res: AnalysisResults): Table | null {
  if (!res.steering?.length) return null;
  // a sampled sweep (steer --samples K --temperature T) adds its columns at the end, so a greedy table is unchanged
  const sampled = res.steering.some((s) => s.rows.some((r) => r.sampled));
  // `condition` (last, so the earlier columns keep their places): 'alpha' on the shorthand rows, the intervention
  // file's name on `--intervene` rows (their alpha empty)
  const columns = ['direction', 'requests', 'layer', 'alpha', 'alpha_relative', 'n', 'outcome', 'count', 'percent', 'lo_percent', 'hi_percent', 'condition',
    ...(sampled ? ['prompts', 'samples', 'boot_lo_percent', 'boot_hi_percent'] : [])];
  const rows: Cell[][] = [];
  const mdRows: string[][] = [];
  const pct1 = (x: number) => (100 * x).toFixed(1);
  for (const s of res.steering) {
    for (const r of s.rows) {
      const cells: string[] = [s.feature ? `${s.requests}, along SAE feature #${s.feature.index}` : s.requests, steeringConditionLabel(r), String(r.n)];
      for (const k of ['refusal', 'valid', 'invalid'] as const) {
        const iv = wilsonInterval(r.counts[k], r.n);
        const pct = r.n ? (100 * r.counts[k]) / r.n : 0;
        const boot = k === 'refusal' ? r.sampled?.refusal.bootstrap : undefined;
        rows.push([s.direction, s.requests, s.layer, r.condition === undefined ? r.alpha : null, r.condition === undefined ? r.alphaRelative ?? null : null,
          r.n, k, r.counts[k], +pct.toFixed(4), +(100 * iv.lo).toFixed(4), +(100 * iv.hi).toFixed(4), r.condition ?? 'alpha',
          ...(sampled ? [r.sampled?.prompts ?? null, r.sampled?.samples ?? null, boot ? +(100 * boot.lo).toFixed(4) : null, boot ? +(100 * boot.hi).toFixed(4) : null] : [])]);
        cells.push(`${pct.toFixed(1)}% [${(100 * iv.lo).toFixed(1)}, ${(100 * iv.hi).toFixed(1)}]`);
        if (sampled && k === 'refusal') cells.push(r.sampled ? `[${pct1(r.sampled.refusal.bootstrap.lo)}, ${pct1(r.sampled.refusal.bootstrap.hi)}]` : '');
      }
      mdRows.push(cells);
    }
  }
  const title = 'Table 3 — steering outcomes vs α';
  const s0 = res.steering[0]!;
  const header = ['Requests', 'α (relative to mean ‖h‖) or intervention set', 'n', 'Refusal [95% CI]', ...(sampled ? ['Refusal, per-prompt bootstrap [95% CI]'] : []), 'Valid harmful call [95% CI]', 'Invalid [95% CI]'];
  const display = mdRows;
  const where = s0.positions === 'generated' ? 'at generated tokens only (--steer-positions generated)' : 'at every prompt position and generated token (--steer-positions all)';
  const sets = s0.rows.some((r) => r.condition !== undefined)
    ? ' Rows "intervene: NAME" run the interventions of NAME.json (--intervene; add / ablate / clamp, with their own layers and positions) instead, on the same prompts.'
    : '';
  const f = res.steering.find((x) => x.feature)?.feature;
  const byFeature = f
    ? ` Rows "along SAE feature #${f.index}" subtract α · (unit decoder row of feature #${f.index} of ${f.sae} at ${f.hook}, the feature with the largest cosine, ${f.cosine.toFixed(4)}, with the ${f.of}) instead: the same α, prompts and scoring.`
    : '';
  let note = `Steering: hidden[${s0.layer}] −= α · unit(${s0.direction}) ${where}.${sets}${byFeature} Intervals: Wilson 95%.${sampled ? sampledNote(res.steering) : ''}`;
  // the paper's row at the same α (its α are its own scale: compare the shape, not the index)
  const pt = paperNumbers()?.tables.table_3;
  if (pt) {
    header.push(`Paper refusal / harmful exec. / invalid % (${pt.models.join(', ')}, same α)`);
    let k = 0;
    for (const s of res.steering) for (const r of s.rows) {
      const p = r.condition === undefined ? pt.rows.find((x) => x[0] === r.alpha) : undefined;
      display[k++]!.push(p ? `${p[1]!.toFixed(1)} / ${p[2]!.toFixed(1)} / ${p[3]!.toFixed(1)}` : '–');
    }
    note += ` Paper (${pt.models.join(', ')}, ${pt.data}): ${pt.rows.map((x) => `α=${x[0]}: ${x[1]} / ${x[2]} / ${x[3]}`).join('; ')}.`;
  }
  return { name: 'table3-steering', title, columns, rows, header, display, note, json: { title, positions: s0.positions ?? 'all', steering: res.steering, ...(pt ? { paper: pt } : {}) } };
}

/** how a sampled sweep decoded and how to read its two refusal intervals */
function sampledNote(sweeps: NonNullable<AnalysisResults['steering']>): string {
  const s = sweeps.find((x) => x.sampling)?.sampling;
  const row = sweeps.flatMap((x) => x.rows).find((r) => r.sampled)?.sampled;
  const how = s ? [`temperature ${s.temperature ?? 0}`, ...(s.topK ? [`top-k ${s.topK}`] : []), ...(s.topP !== undefined && s.topP < 1 ? [`top-p ${s.topP}`] : []),
    ...(s.minP ? [`min-p ${s.minP}`] : []), ...(s.repetitionPenalty !== undefined && s.repetitionPenalty !== 1 ? [`repetition penalty ${s.repetitionPenalty}`] : []),
    `seed ${s.seed}${s.samples > 1 ? ` (sample j: seed + j)` : ''}`].join(', ') : 'sampled';
  return ` Sampled (${how}), ${row?.samples ?? s?.samples ?? 1} answers per request: n = requests × answers; the Wilson interval counts every answer as independent, `
    + `the per-prompt bootstrap (${row?.refusal.reps ?? 1000} resamples of the requests, each with all its answers, seed ${row?.refusal.seed ?? 0}) does not — read that one.`;
}

function behaviouralTable(res: AnalysisResults): Table | null {
  const b = res.behavioural;
  if (!b?.rows.length) return null;
  const columns = ['config', 'label', 'n', 'refusals', 'rate', 'lo', 'hi'];
  const rows: Cell[][] = b.rows.map((r) => [r.config, r.label, r.n, r.refusals, r.rate, r.lo, r.hi]);
  const title = 'Behavioural refusal — chatbot vs agent on harmful requests (§3.1)';
  const header = ['Configuration', 'n', 'Refusals', 'Refusal rate [95% CI]'];
  const pct = (x: number) => (100 * x).toFixed(1);
  const display = b.rows.map((r) => [r.label, String(r.n), String(r.refusals), `${pct(r.rate)}% [${pct(r.lo)}, ${pct(r.hi)}]`]);
  let note = `${b.requests}; greedy, up to ${b.maxNewTokens} new tokens; refusal by the outcome classifier's refusal-substring list. Intervals: Wilson 95%.`;
  const pt = paperNumbers()?.tables.section_3_1;
  if (pt) {
    header.push(`Paper refusal rate (${pt.models.join(', ')})`);
    b.rows.forEach((r, i) => display[i]!.push(r.config === 'chatbot' ? `${pt.refusal_percent.chatbot}%` : r.config === 'agent' ? `${pt.refusal_percent.agent}%` : '–'));
    note += ` Paper: ${pt.models.join(', ')} on ${pt.data}.`;
  }
  return { name: 'behavioural-refusal', title, columns, rows, header, display, note, json: { title, ...b, ...(pt ? { paper: pt } : {}) } };
}

/** Every table the results support, in report order. */
const rateText = (r: RateCI): string => (r.n === 0 ? '–' : `${(100 * r.p).toFixed(1)} [${(100 * r.lo).toFixed(1)}, ${(100 * r.hi).toFixed(1)}] (${r.k}/${r.n})`);

/** Refusal probes: AUROC next to the chatbot direction, rates at the threshold, and the guard comparison. */
function probeTables(res: AnalysisResults): Table[] {
  const pr = res.probe;
  if (!pr) return [];
  const out: Table[] = [];
  // a section holding only the leave-one-dataset-out table has no probes of its own to show
  if (pr.auroc.length > 0) {
    const title = 'Refusal probes — AUROC on the evaluation split, next to the chatbot refusal direction';
    const columns = ['config', 'probe', 'trained_on', 'layer', 'n', 'chatbot_auroc', 'chatbot_lo', 'chatbot_hi', 'probe_auroc', 'probe_lo', 'probe_hi', 'diff', 'diff_lo', 'diff_hi'];
    const rows: Cell[][] = pr.auroc.map((r) => [r.config, r.probe, r.trainedOn, r.layer, r.auroc.n, r.chatbot.auroc, r.chatbot.lo, r.chatbot.hi, r.auroc.auroc, r.auroc.lo, r.auroc.hi, r.diff.diff, r.diff.lo, r.diff.hi]);
    const header = ['Configuration', 'Probe (trained on)', 'ℓ', 'n', 'AUROC, chatbot direction [95% CI]', 'AUROC, probe [95% CI]', 'Δ probe − chatbot [95% CI]'];
    const display = pr.auroc.map((r) => [r.config, `${r.probe} (${r.trainedOn})`, String(r.layer), String(r.auroc.n), ciText(r.chatbot), ciText(r.auroc), diffText(r.diff)]);
    const note = 'Probes are fit on the extraction split only; the chatbot direction is the Table 1 scorer at the probe\'s layer. Paired bootstrap over pairs, percentile 95 %.';
    out.push({ name: 'probe-auroc', title, columns, rows, header, display, note, json: { title, rows: pr.auroc, probes: pr.probes } });
  }
  {
    const title = 'Refusal probes — decisions at the threshold on the evaluation split';
    const columns = ['config', 'probe', 'layer', 'threshold', 'target', 'benign_k', 'benign_n', 'benign_p', 'benign_lo', 'benign_hi', 'harmful_k', 'harmful_n', 'harmful_p', 'harmful_lo', 'harmful_hi'];
    const rows: Cell[][] = pr.rates.map((r) => [r.config, r.probe, r.layer, r.threshold, r.target, r.benignFlagged.k, r.benignFlagged.n, r.benignFlagged.p, r.benignFlagged.lo, r.benignFlagged.hi, r.harmfulFlagged.k, r.harmfulFlagged.n, r.harmfulFlagged.p, r.harmfulFlagged.lo, r.harmfulFlagged.hi]);
    const header = ['Configuration', 'Probe', 'ℓ', 'Threshold (target benign flagged)', 'Benign flagged % [95% CI]', 'Harmful flagged % [95% CI]'];
    const display = pr.rates.map((r) => [r.config, r.probe, String(r.layer), `${r.threshold.toPrecision(4)} (≤ ${(100 * r.target).toFixed(0)} %)`, rateText(r.benignFlagged), rateText(r.harmfulFlagged)]);
    const note = 'The threshold is chosen on the extraction split for the stated share of benign requests flagged; rates here are on the evaluation split (Wilson intervals).';
    out.push({ name: 'probe-threshold', title, columns, rows, header, display, note, json: { title, rows: pr.rates } });
  }
  const cmp = pr.comparison;
  if (cmp) {
    const cascade = cmp.rows.some((r) => r.method === 'probe-cascade' || r.method === 'probe-steer');
    const title = `Guards compared — ${cmp.bench}: base, SafeKeep, refusal probe, both (flag if either flags)${cascade ? ', probe→judge cascade, probe-steer' : ''}`;
    const columns = ['method', 'n', 'refusal_k', 'refusal_n', 'refusal_p', 'refusal_lo', 'refusal_hi', 'acc_k', 'acc_n', 'acc_p', 'acc_lo', 'acc_hi', 'flagged', 'agent_ms', 'guard_ms', 'judge_calls_per_request', 'guard_tokens_per_request', 'added_ms_p50', 'added_ms_p95'];
    const num = (x: number | undefined): number => (x === undefined ? Number.NaN : x);
    const rows: Cell[][] = cmp.rows.map((r) => [r.method, r.n, r.refusal.k, r.refusal.n, r.refusal.p, r.refusal.lo, r.refusal.hi, r.acc.k, r.acc.n, r.acc.p, r.acc.lo, r.acc.hi, r.flagged, r.agentMs, r.guardMs, num(r.judgeCalls), num(r.guardTokens), num(r.addedMsP50), num(r.addedMsP95)]);
    const header = ['Method', 'n', 'Refusal % [95% CI]', 'Acc % [95% CI]', 'Flagged', 'Agent call ms (mean)', 'Guard ms added in the request (mean)', 'Judge calls / request', 'Guard tokens / request', 'Added ms p50 / p95'];
    const fixed = (x: number | undefined, d: number) => (x !== undefined && Number.isFinite(x) ? x.toFixed(d) : '–');
    const display = cmp.rows.map((r) => [r.method, String(r.n), rateText(r.refusal), rateText(r.acc), `${r.flagged}/${r.n}`, Number.isFinite(r.agentMs) ? r.agentMs.toFixed(1) : '– (no agent call)', Number.isFinite(r.guardMs) ? r.guardMs.toFixed(2) : '–',
      fixed(r.judgeCalls, 2), fixed(r.guardTokens, 1), r.addedMsP50 === undefined ? '–' : `${fixed(r.addedMsP50, 1)} / ${fixed(r.addedMsP95, 1)}`]);
    const note = [`Backend ${cmp.backend}; probe ${cmp.probe}.`, ...cmp.notes].join(' ');
    out.push({ name: 'probe-guard-comparison', title, columns, rows, header, display, note, json: { title, ...cmp } });
  }
  const lodo = pr.lodo;
  if (lodo) {
    const title = 'Refusal probes on data sets they never saw — leave-one-dataset-out';
    const columns = ['test', 'train', 'in_distribution', 'probe', 'layer', 'auroc', 'auroc_lo', 'auroc_hi', 'tpr_at_1pct_fpr', 'tpr_lo', 'tpr_hi', 'n_test', 'test_groups', 'n_train'];
    const rows: Cell[][] = lodo.rows.map((r) => [r.test, r.train, r.inDistribution ? 1 : 0, r.kind, r.layer, r.auroc.est, r.auroc.lo, r.auroc.hi, r.tpr1.est, r.tpr1.lo, r.tpr1.hi, r.nTest, r.testGroups, r.nTrain]);
    const header = ['Held-out test set', 'Trained on', 'Probe', 'ℓ', 'AUROC [95% CI]', 'TPR at 1 % FPR [95% CI]', 'n test (groups)', 'n train'];
    const est = (e: { est: number; lo: number; hi: number }) => (Number.isFinite(e.est) ? `${e.est.toFixed(3)} [${e.lo.toFixed(3)}, ${e.hi.toFixed(3)}]` : '–');
    const display = lodo.rows.map((r) => [r.test, r.inDistribution ? `${r.train} — in-distribution` : r.train, r.kind, String(r.layer), est(r.auroc), est(r.tpr1), `${r.nTest} (${r.testGroups})`, String(r.nTrain)]);
    const note = `Every probe is scored on the same test half of the held-out set (groups split in sha256 order, seed ${lodo.seed}); in-distribution rows are trained on the other half of that set, the others never saw it. Layer: ${lodo.layerRule}. Intervals: ${lodo.reps} percentile bootstrap resamples over test groups. Data sets: ${lodo.sets.map((x) => `${x.name} ${x.rows} rows / ${x.groups} groups${x.dropped ? ` (${x.dropped.n} left out: ${x.dropped.why})` : ''}`).join('; ')}. Model: ${lodo.model}.`;
    out.push({ name: 'probe-lodo', title, columns, rows, header, display, note, json: { title, ...lodo } });
  }
  return out;
}

const meanText = (m: MeanCI, d: number): string => (m.n === 0 || !Number.isFinite(m.mean) ? '–' : `${m.mean.toFixed(d)} [${m.lo.toFixed(d)}, ${m.hi.toFixed(d)}]`);

/** S³ (`s3 eval`): per configuration ASR, benign completion, GIC, RSC, extra tokens, latency, and per task group. */
function s3Table(model: string, run: S3Run): Table {
  const groups = [...new Set(run.configs.flatMap((c) => Object.keys(c.groups)))].sort();
  const rate = (r: RateCI | undefined): Cell[] => (r ? [r.k, r.n, r.p, r.lo, r.hi] : [null, null, null, null, null]);
  const mean = (m: MeanCI): Cell[] => [m.mean, m.lo, m.hi];
  const columns = ['config', 'n', 'asr_k', 'asr_n', 'asr', 'asr_lo', 'asr_hi', 'benign_k', 'benign_n', 'benign', 'benign_lo', 'benign_hi',
    'gic', 'gic_lo', 'gic_hi', 'rsc', 'rsc_lo', 'rsc_hi', 'extra_tokens', 'extra_tokens_lo', 'extra_tokens_hi', 'latency_ms', 'latency_ms_lo', 'latency_ms_hi',
    ...groups.flatMap((g) => ['asr', 'benign'].flatMap((m) => ['k', 'n', 'p', 'lo', 'hi'].map((x) => `${g}:${m}_${x}`)))];
  const rows: Cell[][] = run.configs.map((c) => [c.config, c.n, ...rate(c.asr), ...rate(c.benign), ...mean(c.gic), ...mean(c.rsc), ...mean(c.extraTokens), ...mean(c.latencyMs),
    ...groups.flatMap((g) => [...rate(c.groups[g]?.asr), ...rate(c.groups[g]?.benign)])]);
  const title = `S³ multi-stage defense — ${run.bench}`;
  const header = ['Configuration', 'n', 'ASR % [95% CI]', 'Benign completion % [95% CI]', 'GIC / task', 'RSC / task', 'Extra tokens / task', 'Latency ms / task',
    ...groups.flatMap((g) => [`${g} ASR %`, `${g} benign %`])];
  const display = run.configs.map((c) => [c.config, String(c.n), rateText(c.asr), rateText(c.benign), meanText(c.gic, 2), meanText(c.rsc, 2), meanText(c.extraTokens, 1), meanText(c.latencyMs, 0),
    ...groups.flatMap((g) => { const r = c.groups[g]; return r ? [rateText(r.asr), rateText(r.benign)] : ['–', '–']; })]);
  const note = `${run.tasks} tasks per configuration on ${run.backend}${run.settings.length ? `; InjecAgent settings ${run.settings.join(', ')}` : ''}; guard agent ${run.guardDecision ? 'on' : 'off (every skill that passes its filter runs)'}; mitigation ${run.mitigation}. ` +
    'ASR = hazardous component carried out, benign = benign component completed (Wilson 95 %); per-task means with 95 % normal-approximation intervals. GIC = guard invocations, RSC = recovery signals, extra tokens = guard LLM + refusal-prefill tokens.';
  return { name: `s3-${run.bench}`, title, columns, rows, header, display, note, json: { title, model, ...run } };
}

export function buildTables(res: AnalysisResults): Table[] {
  return [
    res.table1.length ? formatTable(res, 'table1') : null,
    res.table2.length ? formatTable(res, 'table2') : null,
    res.curves.length ? curvesTable(res) : null,
    schemaCosineTable(res),
    firstTokenTable(res),
    res.norms.directions.length || res.norms.meanHidden.length ? normsTable(res) : null,
    steeringTable(res),
    behaviouralTable(res),
    ...probeTables(res),
    ...(res.s3?.runs ?? []).map((r) => s3Table(res.model, r)),
  ].filter((t): t is Table => t !== null);
}
