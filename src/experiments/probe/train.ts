/**
 * `safekeep probe train`: a refusal probe on one cached condition (default the full agent with JSON schemas), fit on
 * the EXTRACTION split only.
 * - mean-diff (the paper's): w = r̂(ℓ) = unit(mean(harmful) − mean(benign)), bias 0: the projection on the direction.
 * - logistic: L2-regularised logistic regression on the same features hidden[ℓ] (analysis/logistic.ts).
 * ℓ: `auto` = k-fold CV over pairs of the mean-difference direction on this condition's extraction split
 * (analysis/crossval.ts), or a given layer. The threshold flags at most `target` of the benign extraction rows
 * (analysis/threshold.ts). Writes results/<model>/probe/<condition>.<kind>.{safetensors,json} (data/probe-file.ts).
 */
import { join } from 'node:path';
import { hiddenAt } from '../../analysis/activations.ts';
import { chooseLayerByCV } from '../../analysis/crossval.ts';
import { directionAt, meanDifference } from '../../analysis/direction.ts';
import { fitLogistic } from '../../analysis/logistic.ts';
import { thresholdForBenignRate } from '../../analysis/threshold.ts';
import { loadCheckpoint } from '../../checkpoint/load.ts';
import { SafekeepError } from '../../util/errors.ts';
import { sha256Hex } from '../../util/hash.ts';
import { conditionName, ENGINE_VERSION, extractCondition, openContext, promptCacheName, type Condition, type ContextOptions, type ExtractContext } from '../extract.ts';
import { type Probe, type ProbeKind, readProbe, weightsFingerprint, writeProbe } from '../../data/probe-file.ts';
import { cachedRows, type CachedRows } from './rows.ts';
import { writeProbeSkill } from './skill.ts';
import { calibrationSplit, cascadeBandFor, searchSteerAlpha, type CalibrateOptions } from './calibrate.ts';
import { callFormatOf, type CallFormat } from '../../outcome/types.ts';

interface ProbeTrainOptions {
  condition?: Condition;
  kinds?: readonly ProbeKind[];
  layer?: 'auto' | number;
  /** share of benign extraction rows the threshold may flag (default 0.05) */
  target?: number;
  /** logistic λ = 1/C (default 1) */
  l2?: number;
  /** output folder (default results/<model>/probe) */
  out?: string;
  /** the kind whose `refusal-probe` skill folder is written to <out>/skill/ (default: mean-diff if trained, else the first) */
  skillKind?: ProbeKind;
  /**
   * hold a calibration split out of the extraction pairs: the probe is fit on the rest, and the cascade band and
   * probe-steer's α are calibrated on it (calibrate.ts) and stored in the probe file
   */
  calibrate?: CalibrateOptions;
}

interface TrainedProbe {
  path: string;
  probe: Probe;
  /** the refusal-probe skill folder, for the probe it was written for */
  skill?: string;
}

const round = (x: number): number => Math.round(x * 1e6) / 1e6;

/** Probe weights and bias of one kind at `layer` from the extraction rows. */
function fitProbe(rows: CachedRows, kind: ProbeKind, layer: number, l2: number): { w: Float32Array; bias: number; fit?: { l2: number; iterations: number; converged: boolean } } {
  if (kind === 'mean-diff') {
    const v = directionAt(meanDifference(rows.acts, rows.labels, rows.extraction), layer);
    let nn = 0;
    for (const x of v) nn += x * x;
    if (!(nn > 0)) throw new SafekeepError(`mean-difference direction at layer ${layer} is zero`);
    return { w: Float32Array.from(v, (x) => x / Math.sqrt(nn)), bias: 0 };
  }
  const X = rows.extraction.map((r) => hiddenAt(rows.acts, r, layer));
  const y = rows.extraction.map((r) => rows.labels[r]!);
  const f = fitLogistic(X, y, { l2 });
  if (!f.converged) process.stderr.write(`probe train: logistic fit at layer ${layer} did not converge in ${f.iterations} Newton steps (|∇J| = ${f.gradMax.toExponential(2)})\n`);
  return { w: Float32Array.from(f.w), bias: f.b, fit: { l2, iterations: f.iterations, converged: f.converged } };
}

/** Trains the probes on an open context (caches are extracted when missing). */
async function trainProbesIn(ctx: ExtractContext, o: ProbeTrainOptions): Promise<TrainedProbe[]> {
  const condition = o.condition ?? { config: 'agent', repr: 'schema' };
  const kinds = o.kinds ?? ['mean-diff', 'logistic'];
  const target = o.target ?? 0.05;
  const l2 = o.l2 ?? 1;
  await extractCondition(ctx, condition);
  const cached = cachedRows(ctx.cacheDir, promptCacheName(condition), ctx.split);
  if (cached.extraction.length === 0) throw new SafekeepError('probe train: the extraction split is empty');
  // --calibrate: the probe (layer, weights, threshold) is fit on the extraction pairs outside the calibration split
  const cal = o.calibrate ? calibrationSplit(ctx.split.extraction, o.calibrate.share ?? 0.25, ctx.split.seed) : null;
  const calSet = new Set(cal?.calibration ?? []);
  const rows: CachedRows = cal ? { ...cached, extraction: cached.extraction.filter((r) => !calSet.has(cached.pairIds[r]!)) } : cached;
  const calRows = cached.extraction.filter((r) => calSet.has(cached.pairIds[r]!));
  let layer: number;
  let layerChoice: { method: string; cvAuroc?: (number | null)[] };
  if (o.layer === undefined || o.layer === 'auto') {
    const c = chooseLayerByCV(rows.acts, rows.labels, rows.pairIds, rows.extraction, { k: 5, seed: 0 });
    layer = c.layer;
    layerChoice = { method: `5-fold CV over pairs of the mean-difference direction on the ${conditionName(condition)} extraction split${cal ? ' less its calibration pairs' : ''}, seed 0`, cvAuroc: c.cvAuroc.map((x) => (Number.isNaN(x) ? null : round(x))) };
  } else {
    layer = o.layer;
    if (!Number.isInteger(layer) || layer < 0 || layer >= rows.acts.layers) throw new SafekeepError(`--layer ${layer}: must be auto or 0..${rows.acts.layers - 1}`);
    layerChoice = { method: 'given (--layer)' };
  }
  const ckpt = await loadCheckpoint(ctx.modelDir);
  const model = ctx.baseManifest.model as { dir: string; family: string };
  const out = o.out ?? join(ctx.cacheDir, '..', 'probe');
  const provenance = {
    model: { dir: model.dir, family: model.family, configHash: ckpt.configHash, weightsFingerprint: weightsFingerprint(ckpt), numLayers: ctx.engine.numLayers, dModel: ctx.engine.dModel },
    templateHash: ctx.builder.manifest().templateHash,
    condition: conditionName(condition),
    dataset: { name: ctx.set.name, hash: ctx.set.hash },
    split: {
      // the whole extraction split (with --calibrate the fit used it less the calibration pairs named in cascade / steer)
      seed: ctx.split.seed, used: 'extraction' as const, extractionPairs: ctx.split.extraction.length, evaluationPairs: ctx.split.evaluation.length,
      extractionIdsHash: sha256Hex([...ctx.split.extraction].sort().join('\n')),
    },
    engine: ENGINE_VERSION,
    cache: promptCacheName(condition),
    created: new Date().toISOString(),
  };
  const trained: TrainedProbe[] = [];
  for (const kind of kinds) {
    const { w, bias, fit } = fitProbe(rows, kind, layer, l2);
    const scores = rows.extraction.map((r) => {
      let s = bias;
      const h = hiddenAt(rows.acts, r, layer);
      for (let j = 0; j < h.length; j++) s += w[j]! * h[j]!;
      return s;
    });
    const t = thresholdForBenignRate(scores, rows.extraction.map((r) => rows.labels[r]!), target);
    const calibrated = cal ? await calibrateProbe(ctx, o.calibrate!, cal.info, condition, rows, calRows, { w, bias, layer, threshold: t.threshold }, format(ctx, ckpt.config.family)) : null;
    const path = writeProbe(join(out, `${conditionName(condition)}.${kind}`), {
      kind, layer, dModel: rows.acts.d, bias,
      threshold: { value: t.threshold, target, benignFlagged: round(t.benignFlagged), harmfulFlagged: round(t.harmfulFlagged), nBenign: t.nBenign, nHarmful: t.nHarmful },
      layerChoice, ...(fit ? { fit } : {}), provenance, ...(calibrated ? calibrated.meta : {}),
    }, w, calibrated?.steerVector);
    trained.push({ path, probe: readProbe(path) });
  }
  const skillKind = o.skillKind ?? (kinds.includes('mean-diff') ? 'mean-diff' : kinds[0]!);
  const forSkill = trained.find((t) => t.probe.kind === skillKind);
  if (forSkill) forSkill.skill = writeProbeSkill(join(out, 'skill'), forSkill.probe);
  return trained;
}

/** The call format the outcome classifier reads the model's answers in (as steer's). */
function format(ctx: ExtractContext, family: keyof typeof callFormatOf): CallFormat {
  const t = ctx.tok.family;
  return t === 'llama3' || t === 'qwen' || t === 'mistral' ? t : callFormatOf[family];
}

const scoreRow = (rows: CachedRows, r: number, p: { w: Float32Array; bias: number; layer: number }): number => {
  let s = p.bias;
  const h = hiddenAt(rows.acts, r, p.layer);
  for (let j = 0; j < h.length; j++) s += p.w[j]! * h[j]!;
  return s;
};

/** The cascade band and the steering strength of one probe from the calibration rows (calibrate.ts). */
async function calibrateProbe(
  ctx: ExtractContext, c: CalibrateOptions, info: ReturnType<typeof calibrationSplit>['info'], condition: Condition,
  fitRows: CachedRows, calRows: readonly number[], p: { w: Float32Array; bias: number; layer: number; threshold: number }, fmt: CallFormat,
) {
  const scores = calRows.map((r) => scoreRow(fitRows, r, p));
  const labels = calRows.map((r) => fitRows.labels[r]!);
  const cascade = cascadeBandFor(scores, labels, c.maxBenignFlag ?? 0.05, c.maxHarmfulPass ?? 0.05, info);
  // the requests the steering must turn: harmful calibration requests the probe flags (all harmful ones if none)
  const scoreOf = new Map(calRows.map((r, i) => [r, scores[i]!]));
  const harmful = calRows.filter((_, i) => labels[i] === 1);
  const flagged = harmful.filter((r) => scoreOf.get(r)! > p.threshold);
  const targets = flagged.length ? flagged : harmful;
  const byId = new Map(ctx.set.pairs.map((x) => [x.id, x]));
  const prompts = targets.map((r) => {
    const pair = byId.get(fitRows.pairIds[r]!)!;
    return { ids: ctx.builder.render(pair.harmful.prompt, pair.tools, condition.config, condition.repr ?? 'schema').ids!, tools: condition.config === 'agent' ? pair.tools : [] };
  });
  // the start of the search: 1/16 of the mean residual norm ‖hidden[ℓ]‖ over the fit rows (the scale steering acts on)
  const norms = fitRows.extraction.map((r) => Math.hypot(...hiddenAt(fitRows.acts, r, p.layer)));
  const meanNorm = norms.reduce((a, x) => a + x, 0) / norms.length;
  const maxTokens = c.steerMaxTokens ?? 32;
  const bisect = c.bisect ?? 8;
  const start = meanNorm / 16;
  // the direction: r̂ = the unit harmful-minus-benign mean difference at ℓ on the fit rows (w itself for mean-diff)
  const v = directionAt(meanDifference(fitRows.acts, fitRows.labels, fitRows.extraction), p.layer);
  const nv = Math.hypot(...v);
  if (!(nv > 0)) throw new SafekeepError(`probe train --calibrate: the mean-difference direction at layer ${p.layer} is zero`);
  const vector = Float32Array.from(v, (x) => x / nv);
  const s = await searchSteerAlpha(ctx.engine, (ids) => ctx.tok.decode(ids), fmt, prompts, p.layer, vector, start, { maxTokens, bisect });
  const steer = {
    alpha: s.alpha, layer: p.layer, targets: flagged.length ? 'flagged' as const : 'harmful' as const, flagged: targets.length, refused: s.refused,
    search: `smallest α refusing all ${flagged.length ? 'flagged' : '(none flagged: all)'} harmful calibration requests: α = 0, then doubling from ${round(start)} (1/16 of the mean ‖hidden[ℓ]‖ on the fit rows), then ${bisect} bisection steps; greedy, ${maxTokens} new tokens, outcome classifier; tried ${s.tried.map((x) => `${round(x.alpha)}:${x.refused}/${targets.length}`).join(' ')}`,
    calibration: info,
  };
  return { meta: { cascade, steer }, steerVector: vector };
}

export async function trainProbes(o: ProbeTrainOptions & ContextOptions): Promise<TrainedProbe[]> {
  const ctx = await openContext(o);
  try {
    return await trainProbesIn(ctx, o);
  } finally {
    await ctx.engine.dispose();
  }
}
