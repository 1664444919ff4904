/**
 * `safekeep probe eval`, the white-box part: every probe scores the EVALUATION split of each condition (its own and
 * the other representations), next to the chatbot refusal direction (Table 1's cross-format scorer, at the probe's
 * layer), AUROC with paired-bootstrap intervals and the paired difference; and at the probe's threshold, the share
 * of benign and harmful evaluation requests flagged (Wilson intervals). `writeProbeSection` merges the outcome (and
 * the guard comparison, computed by the guard stage) into results/<model>/results.json and re-renders the report.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { hiddenAt } from '../../analysis/activations.ts';
import { bootstrapAuroc } from '../../analysis/bootstrap.ts';
import { refusalDirection } from '../../analysis/direction.ts';
import { projections } from '../../analysis/projection.ts';
import type { AnalysisResults, LodoSection, ProbeAurocRow, ProbeRateRow, ProbeSection, RateCI } from '../../analysis/results.ts';
import { wilsonInterval } from '../../analysis/stats.ts';
import { loadCheckpoint } from '../../checkpoint/load.ts';
import { writeReport, type ReportFiles } from '../../report/write-report.ts';
import { conditionName, extractCondition, parseCondition, promptCacheName, type Condition, type ExtractContext } from '../extract.ts';
import { checkProbeFits, type Probe } from '../../data/probe-file.ts';
import { cachedRows } from './rows.ts';

interface ProbeEvalOptions {
  probes: readonly Probe[];
  /** conditions scored (default: agent.schema and agent.flattened, plus each probe's own) */
  conditions?: readonly Condition[];
  /** bootstrap resamples (default 1000) */
  reps?: number;
  seed?: number;
}

const round = (x: number): number => Math.round(x * 1e6) / 1e6;

function rateCI(k: number, n: number): RateCI {
  const w = wilsonInterval(k, n);
  return { k, n, p: n ? round(k / n) : Number.NaN, lo: round(w.lo), hi: round(w.hi) };
}

/** Probe scores of `rows` from all-layer activations. [rows.length] */
function scoresOf(p: Probe, acts: Parameters<typeof hiddenAt>[0], rows: readonly number[]): Float64Array {
  const out = new Float64Array(rows.length);
  rows.forEach((r, i) => {
    const h = hiddenAt(acts, r, p.layer);
    let s = p.bias;
    for (let j = 0; j < h.length; j++) s += p.w[j]! * h[j]!;
    out[i] = s;
  });
  return out;
}

export async function evaluateProbesIn(ctx: ExtractContext, o: ProbeEvalOptions): Promise<Omit<ProbeSection, 'comparison'>> {
  const ckpt = await loadCheckpoint(ctx.modelDir);
  for (const p of o.probes) checkProbeFits(p, { configHash: ckpt.configHash, numLayers: ctx.engine.numLayers, dModel: ctx.engine.dModel });
  const wanted = new Map<string, Condition>();
  for (const c of o.conditions ?? [parseCondition('agent.schema'), parseCondition('agent.flattened')]) wanted.set(conditionName(c), c);
  for (const p of o.probes) wanted.set(p.provenance.condition, parseCondition(p.provenance.condition));
  const chatbotCond: Condition = { config: 'chatbot', repr: null };
  for (const c of [chatbotCond, ...wanted.values()]) await extractCondition(ctx, c);
  const chatbot = cachedRows(ctx.cacheDir, promptCacheName(chatbotCond), ctx.split);
  const r = refusalDirection(chatbot.acts, chatbot.labels, chatbot.extraction);
  const reps = o.reps ?? 1000;
  const seed = o.seed ?? 0;
  const auroc: ProbeAurocRow[] = [];
  const rates: ProbeRateRow[] = [];
  const ci = (e: { auroc: number; lo: number; hi: number; n: number }) => ({ auroc: round(e.auroc), lo: round(e.lo), hi: round(e.hi), n: e.n });
  for (const [name, c] of wanted) {
    const rows = cachedRows(ctx.cacheDir, promptCacheName(c), ctx.split);
    const ev = rows.evaluation;
    const labels = ev.map((i) => rows.labels[i]!);
    const pairIds = ev.map((i) => rows.pairIds[i]!);
    for (const p of o.probes) {
      const chat = projections(rows.acts, r, p.layer, ev);
      const mine = scoresOf(p, rows.acts, ev);
      const b = bootstrapAuroc([{ scores: chat, labels, pairIds }, { scores: mine, labels, pairIds }], { reps, seed });
      const d = b.differences[1]!;
      auroc.push({
        config: name, probe: p.kind, trainedOn: p.provenance.condition, layer: p.layer,
        chatbot: ci(b.estimates[0]!), auroc: ci(b.estimates[1]!), diff: { diff: round(d.diff), lo: round(d.lo), hi: round(d.hi) },
      });
      if (name === p.provenance.condition) {
        let fb = 0;
        let fh = 0;
        mine.forEach((s, i) => {
          if (s > p.threshold.value) {
            if (labels[i] === 1) fh++;
            else fb++;
          }
        });
        const nh = labels.filter((y) => y === 1).length;
        rates.push({
          config: name, probe: p.kind, layer: p.layer, threshold: p.threshold.value, target: p.threshold.target,
          benignFlagged: rateCI(fb, labels.length - nh), harmfulFlagged: rateCI(fh, nh),
        });
      }
    }
  }
  return {
    probes: o.probes.map((p) => ({ kind: p.kind, layer: p.layer, condition: p.provenance.condition, threshold: p.threshold.value, target: p.threshold.target, file: p.path })),
    auroc,
    rates,
  };
}

/** results.json of the model (from `reproduce` when present, else a shell) with the probe section; re-rendered report. */
export async function writeProbeSection(ctx: ExtractContext, section: ProbeSection): Promise<{ results: AnalysisResults; files: ReportFiles }> {
  return updateProbeSection(ctx, (old) => ({ ...section, ...(old?.lodo && !section.lodo ? { lodo: old.lodo } : {}) }), section.probes[0]?.layer ?? 0);
}

/** Adds the leave-one-dataset-out table to results.json's probe section (the rest kept) and re-renders the report. */
export async function writeLodoSection(ctx: ExtractContext, lodo: LodoSection): Promise<{ results: AnalysisResults; files: ReportFiles }> {
  return updateProbeSection(ctx, (old) => ({ ...(old ?? { probes: [], auroc: [], rates: [] }), lodo }), lodo.rows[0]?.layer ?? 0);
}

async function updateProbeSection(ctx: ExtractContext, update: (old: ProbeSection | undefined) => ProbeSection, layer: number): Promise<{ results: AnalysisResults; files: ReportFiles }> {
  const outDir = join(ctx.cacheDir, '..');
  const resultsPath = join(outDir, 'results.json');
  const res: AnalysisResults = existsSync(resultsPath)
    ? (JSON.parse(readFileSync(resultsPath, 'utf8')) as AnalysisResults)
    : {
      version: 1, model: ctx.modelName, layers: ctx.engine.numLayers + 1, dModel: ctx.engine.dModel,
      synthetic: existsSync(join(ctx.modelDir, 'PLANTED.json')),
      lStar: { layer, method: 'the probe layer (no reproduce run yet)', cvAuroc: [] },
      bootstrap: { reps: 0, seed: 0, level: 0.95 },
      curves: [], table1: [], table2: [], norms: { directions: [], meanHidden: [] }, manifest: ctx.baseManifest,
    };
  res.probe = update(res.probe);
  const files = await writeReport(outDir, res);
  return { results: res, files };
}


