/**
 * writeReport(outDir, results): everything a reader needs from one `AnalysisResults`:
 *   tables/<name>.md|csv|json   figures/<name>.svg|png|vl.json   results.json   manifest.json   report.md
 *   report.html
 * All files are written atomically.
 */
import { join } from 'node:path';
import type { AnalysisResults } from '../analysis/results.ts';
import { SafekeepError } from '../util/errors.ts';
import { writeFileAtomic } from '../util/atomic.ts';
import { aurocLayersFigure } from './figures/auroc-layers.ts';
import { firstTokenFigure } from './figures/first-token.ts';
import { schemaCosineFigure } from './figures/schema-cosine.ts';
import type { Figure } from './figures/spec.ts';
import { steeringBarsFigure } from './figures/steering-bars.ts';
import { behaviouralRefusalFigure } from './figures/behavioural-refusal.ts';
import { s3BarsFigure } from './figures/s3-bars.ts';
import { tableBarsFigure } from './figures/table-bars.ts';
import { lodoBarsFigure } from './figures/lodo-bars.ts';
import { saeDirectionFeaturesFigure } from './figures/sae-direction-features.ts';
import { steeringByFeatureFigure } from './figures/steering-by-feature.ts';
import { buildHtml } from './html.ts';
import { saeSectionMarkdown } from './sae-section.ts';
import { renderSvg, svgToPng } from './render.ts';
import { summaryLines } from './summary.ts';
import { type Table, buildTables, tableMarkdown, toCsv } from './tables.ts';

export interface ReportFiles {
  tables: string[];
  figures: string[];
  html: string;
  markdown: string;
}

export function buildFigures(res: AnalysisResults): Figure[] {
  return [
    schemaCosineFigure(res),
    firstTokenFigure(res),
    aurocLayersFigure(res, 'chatbot'),
    aurocLayersFigure(res, 'own'),
    tableBarsFigure(res, 'table1'),
    tableBarsFigure(res, 'table2'),
    ...(res.steering ?? []).map((s, i) => steeringBarsFigure(res, s, i)),
    steeringByFeatureFigure(res),
    saeDirectionFeaturesFigure(res),
    behaviouralRefusalFigure(res),
    lodoBarsFigure(res),
    ...(res.s3?.runs ?? []).map((r) => s3BarsFigure(r.bench, res.model, r.configs)),
  ].filter((f): f is Figure => f !== null);
}

function checkResults(res: AnalysisResults): void {
  if (res.version !== 1) throw new SafekeepError(`results: unsupported version ${String(res.version)} (expected 1)`);
  if (!Number.isInteger(res.layers) || res.layers < 1) throw new SafekeepError(`results: bad layer count ${res.layers}`);
  if (res.lStar.layer < 0 || res.lStar.layer >= res.layers) throw new SafekeepError(`results: ℓ* = ${res.lStar.layer} outside 0..${res.layers - 1}`);
  for (const c of res.curves) {
    if (c.perLayer.length !== res.layers) throw new SafekeepError(`results: curve '${c.config}' has ${c.perLayer.length} layers, expected ${res.layers}`);
  }
}

export interface WriteReportOptions {
  /** progress lines (the CLI passes a stderr writer) */
  log?: (line: string) => void;
}

export async function writeReport(outDir: string, res: AnalysisResults, opts: WriteReportOptions = {}): Promise<ReportFiles> {
  const log = opts.log ?? (() => {});
  checkResults(res);
  const tables: Table[] = buildTables(res);
  const written: ReportFiles = { tables: [], figures: [], html: join(outDir, 'report.html'), markdown: join(outDir, 'report.md') };
  for (const t of tables) {
    const base = join(outDir, 'tables', t.name);
    writeFileAtomic(`${base}.md`, tableMarkdown(t));
    writeFileAtomic(`${base}.csv`, toCsv(t.columns, t.rows));
    writeFileAtomic(`${base}.json`, JSON.stringify(t.json, null, 2) + '\n');
    written.tables.push(`${base}.md`, `${base}.csv`, `${base}.json`);
  }
  const figures = buildFigures(res);
  for (const [i, f] of figures.entries()) {
    log(`figure ${i + 1}/${figures.length}: ${f.name}`);
    const base = join(outDir, 'figures', f.name);
    const svg = await renderSvg(f.spec);
    writeFileAtomic(`${base}.svg`, svg);
    writeFileAtomic(`${base}.png`, svgToPng(svg));
    writeFileAtomic(`${base}.vl.json`, JSON.stringify(f.spec, null, 2) + '\n');
    written.figures.push(`${base}.svg`, `${base}.png`);
  }
  writeFileAtomic(join(outDir, 'results.json'), JSON.stringify(res, null, 2) + '\n');
  writeFileAtomic(join(outDir, 'manifest.json'), JSON.stringify(res.manifest, null, 2) + '\n');
  const md = [
    `# safekeep report — ${res.model}`,
    '',
    ...(res.synthetic ? ['**SYNTHETIC: planted activations with a known answer, not a real model.**', ''] : []),
    ...summaryLines(res).map((l) => `- ${l}`),
    '',
    '## Figures',
    '',
    ...figures.map((f) => `### ${f.title}\n\n![${f.title}](figures/${f.name}.png)\n\n${f.caption}\n`),
    '## Tables',
    '',
    ...tables.map(tableMarkdown),
    '',
    ...saeSectionMarkdown(res),
  ].join('\n');
  writeFileAtomic(written.markdown, md);
  log('report.html');
  writeFileAtomic(written.html, buildHtml(res, figures, tables));
  return written;
}
