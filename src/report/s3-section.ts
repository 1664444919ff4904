/**
 * `s3 eval` in the model's report: the S³ figure beside the run's tables (results/<name>/s3/s3-<bench>.{svg,png,
 * vl.json}), and the run as the `s3` section of results/<name>/results.json — the reproduce results when they exist,
 * else a results shell — with report.html re-rendered, so the S³ table and figure appear there as the probe section's
 * do. One run per bench: a later run of the same bench replaces it.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { S3_BENCHES, type AnalysisResults, type S3ConfigRow, type S3Run } from '../analysis/results.ts';
import { writeFileAtomic } from '../util/atomic.ts';
import { s3BarsFigure } from './figures/s3-bars.ts';
import { renderSvg, svgToPng } from './render.ts';
import { readResults } from './results-file.ts';
import { writeReport } from './write-report.ts';

/** What a results shell needs when the model has no results.json yet (no reproduce run). */
interface ResultsShell {
  model: string;
  /** L+1 of a local model; an endpoint run passes 1 with dModel 0 (no activations known) */
  layers: number;
  dModel: number;
  synthetic: boolean;
  /** shown in the report where ℓ* would be */
  note: string;
  manifest: Record<string, unknown>;
}

function resultsShell(s: ResultsShell): AnalysisResults {
  return {
    version: 1, model: s.model, layers: s.layers, dModel: s.dModel, synthetic: s.synthetic,
    lStar: { layer: 0, method: s.note, cvAuroc: [] }, bootstrap: { reps: 0, seed: 0, level: 0.95 },
    curves: [], table1: [], table2: [], norms: { directions: [], meanHidden: [] }, manifest: s.manifest,
  };
}

/** The run's section merged into `results` (same bench replaced; benches in S3_BENCHES order). */
function withS3Run(res: AnalysisResults, run: S3Run, protocol: Record<string, unknown>): AnalysisResults {
  const order = (b: string) => (S3_BENCHES as readonly string[]).indexOf(b);
  const runs = [...(res.s3?.runs ?? []).filter((r) => r.bench !== run.bench), run].sort((a, b) => order(a.bench) - order(b.bench));
  return { ...res, s3: { runs }, manifest: { ...res.manifest, [`s3-${run.bench}`]: protocol } };
}

interface S3ReportFiles {
  /** the figure beside the tables, without extension (.svg, .png, .vl.json) */
  figure: string;
  html: string;
}

export async function writeS3Report(o: { resultsDir: string; out: string; run: S3Run; shell: ResultsShell; protocol: Record<string, unknown> }): Promise<S3ReportFiles> {
  const fig = s3BarsFigure(o.run.bench, o.shell.model, o.run.configs);
  const svg = await renderSvg(fig.spec);
  const figure = join(o.out, fig.name);
  writeFileAtomic(`${figure}.vl.json`, JSON.stringify(fig.spec, null, 2) + '\n');
  writeFileAtomic(`${figure}.svg`, svg);
  writeFileAtomic(`${figure}.png`, svgToPng(svg));
  const path = join(o.resultsDir, 'results.json');
  const base = existsSync(path) ? readResults(path) : resultsShell(o.shell);
  const files = await writeReport(o.resultsDir, withS3Run(base, o.run, o.protocol));
  return { figure, html: files.html };
}

/** What the report part of an S³ run reads from the run's options (the evaluation's merge options carry these). */
export interface S3ReportSource {
  name: string;
  /** the tables' folder (the figure goes beside them) and the results folder (results.json, report.html) */
  out: string;
  resultsDir: string;
  meta: Record<string, unknown>;
  run: Omit<S3Run, 'configs'>;
  shell: Omit<ResultsShell, 'model' | 'manifest'>;
}

/** The report part of an `s3 eval` run or merge: into the run's results folder (results/<name>, or `--out DIR` itself). */
export function writeS3ReportOf(m: S3ReportSource, configs: readonly S3ConfigRow[]): Promise<S3ReportFiles> {
  return writeS3Report({
    resultsDir: m.resultsDir, out: m.out, run: { ...m.run, configs: [...configs] },
    shell: { ...m.shell, model: m.name, manifest: {} }, protocol: m.meta,
  });
}
