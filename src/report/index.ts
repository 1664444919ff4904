/** Tables, figures and report.html from an `AnalysisResults` object. */
export { type ReportFiles, type WriteReportOptions, buildFigures, writeReport } from './write-report.ts';
export { readResults, validateResults } from './results-file.ts';
export { renderSvg, svgToPng } from './render.ts';
export { buildTables, tableMarkdown, toCsv } from './tables.ts';
export { summaryLines } from './summary.ts';
export { steeringBarsFigure } from './figures/steering-bars.ts';
export { CONFIG as FIGURE_CONFIG, COLORS as FIGURE_COLORS } from './theme.ts';
