/**
 * Table 3 of the paper from a finished sweep: the rows (outputs counted by label per condition), table3.md|csv|json
 * under steering/, and the sweep merged into results/<model>/results.json for the report.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AnalysisResults, SteeringResults, SteeringRow } from '../../analysis/results.ts';
import { sampledRate } from '../../analysis/sampled-rate.ts';
import { buildTables, tableMarkdown, toCsv } from '../../report/tables.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import type { ExtractContext } from '../extract.ts';
import { round, type SteerCondition } from './conditions.ts';
import type { SteerGeneration } from './generate.ts';

/**
 * One row of Table 3: the outputs' labels counted, under their α (absolute and × mean ‖hidden[ℓ*]‖) or set label;
 * a sampled sweep's row (generations with a `sample` index) also its refusal rate over prompts × samples with the
 * Wilson and per-prompt bootstrap intervals.
 */
export function steeringRow(gens: readonly SteerGeneration[], cond: SteerCondition, meanNorm: number): SteeringRow {
  const counts = { refusal: 0, valid: 0, invalid: 0 };
  for (const g of gens) counts[g.label]++;
  const sampled = gens.some((g) => g.sample !== undefined) ? { sampled: sampledRefusal(gens) } : {};
  if (cond.set) return { alpha: 0, condition: cond.set.label, interventionsSha256: cond.set.hash, n: gens.length, counts, ...sampled };
  return { alpha: round(cond.alpha), alphaRelative: round(cond.alpha / meanNorm), n: gens.length, counts, ...sampled };
}

/** refusals per prompt (its answers grouped by pair) → the rate with its Wilson and per-prompt bootstrap intervals */
function sampledRefusal(gens: readonly SteerGeneration[]): NonNullable<SteeringRow['sampled']> {
  const byPair = new Map<string, { k: number; n: number }>();
  for (const g of gens) {
    const c = byPair.get(g.pairId) ?? { k: 0, n: 0 };
    c.n++;
    if (g.label === 'refusal') c.k++;
    byPair.set(g.pairId, c);
  }
  const r = sampledRate([...byPair.values()]);
  return { prompts: r.prompts, samples: Math.max(0, ...[...byPair.values()].map((c) => c.n)), refusal: { rate: r.rate, wilson: r.wilson, bootstrap: r.bootstrap, reps: r.reps, seed: r.seed } };
}

/** What Table 3 and the results shell need from a run (no engine). */
export interface TableContext {
  cacheDir: string;
  modelDir: string;
  modelName: string;
  numLayers: number;
  dModel: number;
  baseManifest: Record<string, unknown>;
}

export const tableContext = (ctx: ExtractContext): TableContext => ({
  cacheDir: ctx.cacheDir, modelDir: ctx.modelDir, modelName: ctx.modelName, numLayers: ctx.engine.numLayers, dModel: ctx.engine.dModel, baseManifest: ctx.baseManifest,
});

/** Table 3 into steering/; returns the run's results (from `reproduce` when present) with the sweep merged in. */
export function writeTable3(ctx: TableContext, outDir: string, sweeps: SteeringResults[], protocol: Record<string, unknown>): AnalysisResults {
  const resultsPath = join(ctx.cacheDir, '..', 'results.json');
  const base: AnalysisResults | null = existsSync(resultsPath) ? (JSON.parse(readFileSync(resultsPath, 'utf8')) as AnalysisResults) : null;
  const res: AnalysisResults = base ?? minimalResults(ctx, sweeps[0]!.layer);
  res.steering = sweeps;
  // the protocol values of the steering run (docs/protocol.md)
  res.manifest = { ...res.manifest, steeringProtocol: protocol };
  const t = buildTables(res).find((x) => x.name === 'table3-steering')!;
  writeFileAtomic(join(outDir, 'table3.md'), tableMarkdown(t));
  writeFileAtomic(join(outDir, 'table3.csv'), toCsv(t.columns, t.rows));
  writeFileAtomic(join(outDir, 'table3.json'), JSON.stringify(t.json, null, 2) + '\n');
  return res;
}

/** Results shell for a model that has no `reproduce` run yet (the report then shows Table 3 only). */
function minimalResults(ctx: TableContext, layer: number): AnalysisResults {
  const L1 = ctx.numLayers + 1;
  return {
    version: 1, model: ctx.modelName, layers: L1, dModel: ctx.dModel, synthetic: existsSync(join(ctx.modelDir, 'PLANTED.json')),
    lStar: { layer, method: 'given by the steering run', cvAuroc: [] }, bootstrap: { reps: 0, seed: 0, level: 0.95 },
    curves: [], table1: [], table2: [], norms: { directions: [], meanHidden: [] }, manifest: ctx.baseManifest,
  };
}
