/**
 * Shared first cell of the notebooks: which model and data to use. By default the planted SYNTHETIC model
 * (written to a temporary folder, known refusal direction) and 40 bundled pairs, so every notebook runs offline in
 * about a minute; pass `--model DIR|hub-id`, `--data pairs|agentharm|PATH`, `--limit N` (0 = all) to run on a real
 * model. Run: `node --import tsx notebooks/01-locating-the-source.ts [--model ...]`.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { resolveModel } from '../src/hub/resolve.ts';
import { engineEnv } from '../src/cli/env.ts';
import { openContext, type ExtractContext } from '../src/experiments/extract.ts';

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

export interface NotebookSetup {
  ctx: ExtractContext;
  synthetic: boolean;
  /** the planted truth when synthetic */
  plantedR: number[] | null;
}

export async function setup(): Promise<NotebookSetup> {
  let model = flag('model');
  let plantedR: number[] | null = null;
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-notebook-'));
  if (!model) {
    model = join(tmp, 'planted');
    const truth = await writePlantedModel(model, { lexiconPairs: (await loadPairSet('pairs')).pairs });
    plantedR = truth.r;
    console.log(`model: planted SYNTHETIC model in ${model} (refusal direction r planted at layers ${truth.plantedLayers.join(', ')})`);
  } else {
    model = await resolveModel(model);
    console.log(`model: ${model}`);
  }
  const limitArg = Number(flag('limit') ?? (plantedR ? 40 : 0));
  const ctx = await openContext({
    model,
    engine: engineEnv(), // SAFEKEEP_CACHE etc., as the CLI reads them
    data: flag('data') ?? 'pairs',
    results: flag('results') ?? join(tmp, 'results'),
    ...(limitArg > 0 ? { limit: limitArg } : {}),
  });
  console.log(`data: ${ctx.set.name}, ${ctx.set.pairs.length} pairs (${ctx.split.extraction.length} extraction / ${ctx.split.evaluation.length} evaluation)`);
  return { ctx, synthetic: plantedR !== null, plantedR };
}

/** A compact per-layer printout. */
export function row(label: string, xs: ArrayLike<number>, digits = 3): string {
  return `${label.padEnd(28)} ${Array.from(xs, (x) => (Number.isFinite(x) ? x.toFixed(digits) : '  -  ').padStart(digits + 4)).join('')}`;
}
