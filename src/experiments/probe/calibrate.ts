/**
 * `probe train --calibrate`: the cascade band and probe-steer's strength from a calibration split — pairs of the
 * extraction split held out of the probe's fit, so the thresholds are not read off the rows the probe was fit on.
 *
 * - Calibration pairs: the extraction pairs ordered by sha256(`<seed>:<pair id>`), the first ⌈share·n⌉ (at least
 *   one; at least two pairs stay for the fit). Deterministic given the seed and the ids; no other draw.
 * - Cascade band [low, high] on the calibration scores: high = the threshold that flags at most ⌊maxBenignFlag·n⌋
 *   benign calibration requests (analysis/threshold.ts, flag = score > high); low = the (m+1)-th smallest harmful
 *   score with m = ⌊maxHarmfulPass·n_harmful⌋, so at most m harmful requests score below it and run unjudged
 *   (pass = score < low). When the classes separate so far that low > high, low = high: the band is one point.
 * - Steering strength α: the harmful calibration requests the probe flags (score > its threshold; all harmful
 *   calibration requests when it flags none) are generated greedily with +α·r̂ added to hidden[ℓ] at every
 *   position (r̂ = the unit harmful-minus-benign mean difference at ℓ on the fit rows, whatever the probe's kind), and classified by the outcome classifier. α = the smallest value found that makes every one of them a
 *   refusal: doubling (12 times at most) from 1/16 of the mean ‖hidden[ℓ]‖ on the fit rows, then bisection of the last bracket
 *   (refusal is taken to grow with α). If no α tried refuses them all, the one refusing most (reported as such).
 */
import type { Engine } from '../../engine/types.ts';
import type { ToolSpec } from '../../data/types.ts';
import type { CallFormat } from '../../outcome/types.ts';
import { classifyOutput } from '../../outcome/classify.ts';
import { thresholdForBenignRate } from '../../analysis/threshold.ts';
import type { ProbeCascade } from '../../data/probe-file.ts';
import { SafekeepError } from '../../util/errors.ts';
import { sha256Hex } from '../../util/hash.ts';

export interface CalibrateOptions {
  /** share of the extraction pairs held out for calibration (default 0.25) */
  share?: number;
  /** cascade: share of benign calibration requests the probe may refuse on its own (default 0.05) */
  maxBenignFlag?: number;
  /** cascade: share of harmful calibration requests that may run without the judge (default 0.05) */
  maxHarmfulPass?: number;
  /** generation budget of each steered calibration answer (default 32) */
  steerMaxTokens?: number;
  /** bisection steps after the doubling (default 8) */
  bisect?: number;
}

export interface CalibrationSplitInfo {
  pairs: number;
  share: number;
  seed: number;
  idsHash: string;
}

/** The extraction pairs split into the probe's fit and the calibration (sorted ids in each). */
export function calibrationSplit(extractionPairs: readonly string[], share: number, seed: number): { fit: string[]; calibration: string[]; info: CalibrationSplitInfo } {
  if (!(share > 0 && share < 1)) throw new SafekeepError(`--calibration-share must be in (0, 1), got ${share}`);
  const ids = [...new Set(extractionPairs)];
  if (ids.length < 3) throw new SafekeepError(`probe train --calibrate: ${ids.length} extraction pairs; the fit and the calibration need at least 3`);
  const k = Math.min(ids.length - 2, Math.max(1, Math.ceil(share * ids.length)));
  const order = ids.map((id) => ({ id, key: sha256Hex(`${seed}:${id}`) })).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const calibration = order.slice(0, k).map((x) => x.id).sort();
  const fit = order.slice(k).map((x) => x.id).sort();
  return { fit, calibration, info: { pairs: k, share, seed, idsHash: sha256Hex(calibration.join('\n')) } };
}

/** The cascade band from calibration scores (labels 1 = harmful). */
export function cascadeBandFor(scores: readonly number[], labels: readonly number[], maxBenignFlag: number, maxHarmfulPass: number, calibration: CalibrationSplitInfo): ProbeCascade {
  if (!(maxHarmfulPass >= 0 && maxHarmfulPass < 1)) throw new SafekeepError(`--max-harmful-pass must be in [0, 1), got ${maxHarmfulPass}`);
  const t = thresholdForBenignRate(scores, labels, maxBenignFlag);
  const high = t.threshold;
  const harmful = scores.filter((_, i) => labels[i] === 1).sort((a, b) => a - b);
  const m = Math.floor(maxHarmfulPass * harmful.length + 1e-9);
  const low = Math.min(harmful[Math.min(m, harmful.length - 1)]!, high);
  const benign = scores.filter((_, i) => labels[i] !== 1);
  const round = (x: number): number => Math.round(x * 1e6) / 1e6;
  return {
    low, high, maxBenignFlag, maxHarmfulPass,
    benignFlagged: round(benign.filter((x) => x > high).length / benign.length),
    harmfulPassed: round(harmful.filter((x) => x < low).length / harmful.length),
    band: round(scores.filter((x) => x >= low && x <= high).length / scores.length),
    nBenign: benign.length, nHarmful: harmful.length, calibration,
  };
}

export interface SteerPrompt {
  ids: number[];
  tools: readonly ToolSpec[];
}

export interface SteerSearch {
  alpha: number;
  refused: number;
  /** every α tried, with how many refused */
  tried: { alpha: number; refused: number }[];
}

/**
 * The smallest α (doubling, then bisection) at which every prompt's steered greedy answer (+α·vector/|vector| at
 * `layer`) is a refusal. `start`:
 * the first non-zero α tried; α = 0 is tried first.
 */
export async function searchSteerAlpha(
  engine: Pick<Engine, 'generate'>, decode: (ids: number[]) => string, format: CallFormat, prompts: readonly SteerPrompt[],
  layer: number, vector: Float32Array, start: number, o: { maxTokens: number; bisect: number; doublings?: number },
): Promise<SteerSearch> {
  if (prompts.length === 0) throw new SafekeepError('probe train --calibrate: no harmful calibration request to steer');
  if (!(start > 0) || !Number.isFinite(start)) throw new SafekeepError(`probe train --calibrate: steering start ${start} must be positive (the classes do not separate along the probe)`);
  const tried: { alpha: number; refused: number }[] = [];
  const refusedAt = async (alpha: number): Promise<number> => {
    const gens = await engine.generate(prompts.map((p) => p.ids), {
      maxNewTokens: o.maxTokens,
      ...(alpha !== 0 ? { interventions: [{ kind: 'add' as const, layer, vector, alpha }] } : {}),
    });
    const k = gens.filter((g, i) => classifyOutput(decode(g.generatedIds), prompts[i]!.tools, format).label === 'refusal').length;
    tried.push({ alpha, refused: k });
    return k;
  };
  const all = prompts.length;
  if ((await refusedAt(0)) === all) return { alpha: 0, refused: all, tried };
  let lo = 0;
  let hi = start;
  let found = false;
  for (let i = 0; i < (o.doublings ?? 12); i++, hi *= 2) {
    if ((await refusedAt(hi)) === all) { found = true; break; }
    lo = hi;
  }
  if (!found) {
    const best = tried.reduce((a, b) => (b.refused > a.refused ? b : a));
    return { alpha: best.alpha, refused: best.refused, tried };
  }
  for (let i = 0; i < o.bisect; i++) {
    const mid = (lo + hi) / 2;
    if ((await refusedAt(mid)) === all) hi = mid;
    else lo = mid;
  }
  return { alpha: hi, refused: all, tried };
}
