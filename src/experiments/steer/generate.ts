/**
 * How one condition of the sweep is generated and stored: the harness task (fixed batches, greedy or sampled, each
 * output classified), the generations file's name and key header, and its per-sample log.
 */
import { basename, dirname } from 'node:path';
import type { Pair } from '../../data/types.ts';
import type { SamplingSettings, SteerPositions } from '../../engine/types.ts';
import type { CallFormat, OutcomeLabel } from '../../outcome/types.ts';
import { generationTask, type GeneratedRow, type GenerationBatch } from '../../harness/generation.ts';
import { writeEvalLog, type EvalLog, type SampleLog } from '../../harness/log.ts';
import { writeInspectLog } from '../../harness/inspect-log.ts';
import { runTask, type Task } from '../../harness/runner.ts';
import type { ExtractContext } from '../extract.ts';
import { conditionName, round, type SteerCondition } from './conditions.ts';

/** One output of the sweep, as a generations file holds it (one JSON line each). */
export interface SteerGeneration {
  pairId: string;
  requests: 'harmful' | 'benign';
  alpha: number;
  /** the intervention set's label (absent on α rows) */
  condition?: string;
  text: string;
  generatedIds: number[];
  finish: string;
  label: OutcomeLabel;
  reasons: string[];
  /** a sampled sweep: which answer of the pair's request this is (0..K-1) and the seed it was drawn with */
  sample?: number;
  seed?: number;
}

/** How the sweep decodes: greedy (no sampling, one answer per request) or sampled, K answers per request. */
export interface SteerDecode {
  /** with a seed when sampled (the CLI draws one when none is given) */
  sampling?: SamplingSettings;
  samples: number;
}

export const GREEDY: SteerDecode = { samples: 1 };

/** what a sampled sweep's results record of its decoding (nothing for a greedy one: its results stay as they were) */
export const sampledSweep = (o: { sampling?: SamplingSettings; samples?: number }): { sampling?: SamplingSettings & { samples: number } } =>
  (o.sampling ? { sampling: { ...o.sampling, samples: o.samples ?? 1 } } : {});

/** Pairs per generation batch: fixed, so one process and every shard decode exactly the same batches. */
export const GEN_BATCH = 8;

/**
 * 'generated' gets its own files so both sweeps can sit side by side (intervention sets carry their own positions);
 * a sweep along an SAE feature's decoder row (`along` = `sae<j>`) too, beside the sweep along the direction
 */
export const generationsFile = (kind: string, cond: SteerCondition, positions: SteerPositions, along?: string): string => cond.set
  ? `generations.${kind}.intervene-${cond.set.label}.jsonl`
  : `generations.${kind}${along ? `.${along}` : ''}.alpha${round(cond.alpha)}${positions === 'generated' ? '.generated' : ''}.jsonl`;

/**
 * The header key of a generations file: the exact inputs, so a rerun with the same inputs reuses it — for an
 * intervention set its content hash, so an edited file is generated again.
 */
export function generationsKey(ctx: ExtractContext, pairs: readonly Pair[], ids: number[][], layer: number, cond: SteerCondition, maxNewTokens: number, unit: Float32Array, positions: SteerPositions, decode: SteerDecode = GREEDY): string {
  return JSON.stringify({
    ids: ids.map((x) => x.length), pairs: pairs.map((p) => p.id), layer, alpha: cond.alpha, maxNewTokens, dir: Array.from(unit.slice(0, 8)), model: ctx.baseManifest.model, positions,
    ...(cond.set ? { interventions: cond.set.hash } : {}),
    // only a sampled sweep's key names its decoding, so a greedy file written before sampling existed is still reused
    ...(decode.sampling ? { sampling: decode.sampling, samples: decode.samples } : {}),
  });
}

/** The harness task of one (requests, condition): fixed batches of prompts, greedy or sampled, each output classified. */
export function conditionTask(
  ctx: ExtractContext, kind: 'harmful' | 'benign', cond: SteerCondition, layer: number, unit: Float32Array, maxNewTokens: number, format: CallFormat, positions: SteerPositions,
  decode: SteerDecode = GREEDY,
): Task<GenerationBatch, GeneratedRow<SteerGeneration>[], SteerGeneration> {
  return generationTask<SteerGeneration>({
    name: `steer/${kind}`, solver: conditionName(cond), format,
    model: { generate: (ids, o) => ctx.engine.generate(ids, o), decode: (ids) => ctx.tok.decode(ids) },
    options: {
      maxNewTokens,
      ...(cond.alpha !== 0 ? { steer: { layer, vector: unit, alpha: cond.alpha, positions } } : {}),
      ...(cond.set ? { interventions: cond.set.interventions } : {}),
      ...(decode.sampling ? { sampling: decode.sampling } : {}),
    },
    samples: decode.samples,
    row: (p, g, at) => ({
      pairId: p.id, requests: kind, alpha: round(cond.alpha), ...(cond.set ? { condition: cond.set.label } : {}),
      text: g.text, generatedIds: g.generatedIds, finish: g.finish, label: g.label, reasons: g.reasons,
      ...(at.seed !== undefined ? { sample: at.sample, seed: at.seed } : {}),
    }),
  });
}

/** The prompts of one batch: the pairs' requests rendered in the agent format with JSON schemas. */
export const batchOf = (pairs: readonly Pair[], ids: number[][], texts: readonly string[], start: number): GenerationBatch =>
  ({ start, prompts: pairs.map((p, i) => ({ id: p.id, text: texts[i] ?? '', ids: ids[i]!, tools: p.tools })) });

/** Generations of one batch of pairs (steered unless α = 0; an intervention set's interventions), each classified. */
export async function generateChunk(
  ctx: ExtractContext, pairs: readonly Pair[], ids: number[][], texts: readonly string[], kind: 'harmful' | 'benign', cond: SteerCondition, layer: number,
  unit: Float32Array, maxNewTokens: number, format: CallFormat, positions: SteerPositions, decode: SteerDecode = GREEDY,
): Promise<{ gens: SteerGeneration[]; samples: SampleLog<SteerGeneration>[] }> {
  const r = await runTask(conditionTask(ctx, kind, cond, layer, unit, maxNewTokens, format, positions, decode), [batchOf(pairs, ids, texts, 0)]);
  return { gens: r.results.flat().map((x) => x.row), samples: r.samples };
}

/** The per-sample log beside a generations file (same name, `log.` for `generations.`). */
const logFileOf = (generations: string): string => generations.replace(/generations\.([^/]*)$/, 'log.$1');

/**
 * The condition's per-sample log beside its generations file, and its Inspect log (results/<name>/inspect/
 * steer-<requests>.<condition>.json; `file` is results/<name>/steering/generations.<requests>.<condition>.jsonl).
 */
export function writeConditionLog(file: string, key: string, kind: string, cond: SteerCondition, samples: readonly SampleLog<SteerGeneration>[]): void {
  const log: EvalLog = { header: { format: 'safekeep-log', task: `steer/${kind}`, protocol: { condition: conditionName(cond) }, context: { key } }, samples: [...samples] };
  writeEvalLog(logFileOf(file), log);
  const resultsDir = dirname(dirname(file));
  const name = `steer/${basename(file).replace(/^generations\./, '').replace(/\.jsonl$/, '')}`;
  writeInspectLog(resultsDir, log, { model: basename(resultsDir), args: { requests: kind, condition: conditionName(cond), alpha: cond.alpha } }, name);
}
