/**
 * The refusal-probe guard: a trained probe (src/experiments/probe/) reads hidden[ℓ] at the last prompt position of
 * the agent's OWN prefill (ChatCall.inspect → engine haltAfterPrefill), so judging the request costs one dot product
 * and no model call. score = w·hidden[ℓ] + bias; score > threshold (or NaN) → unsafe, generation stops after the prefill and
 * the request takes SafeKeep's refusal path.
 *
 * The cascade reads the same score against a calibrated band [low, high] (probe-file.ts `cascade`): above high the
 * probe refuses, below low the request runs, inside the band (ends included) the judge decides. A NaN score is
 * refused in both (the guard fails closed).
 */
import { probeScore, type Probe } from '../data/probe-file.ts';
import { SafekeepError } from '../util/errors.ts';

/** The cascade's decision for one score: the probe lets it run, the judge decides, or the probe refuses. */
export type CascadeBand = 'run' | 'judge' | 'refuse';

export interface ProbeVerdict {
  score: number;
  threshold: number;
  unsafe: boolean;
  /** time spent scoring inside the agent call (ms) */
  latencyMs: number;
  /** probe-cascade: where the score fell */
  band?: CascadeBand;
}

/** What the guard needs of a probe (a probe file, or a probe skill's direction). */
export type ProbeParams = Pick<Probe, 'w' | 'bias' | 'layer' | 'dModel'> & { threshold: { value: number } } & Partial<Pick<Probe, 'cascade' | 'steer' | 'steerVector' | 'path'>>;

/** The cascade's band for a score (NaN: refuse). */
export function cascadeBand(score: number, band: { low: number; high: number }): CascadeBand {
  if (!(score <= band.high)) return 'refuse';
  return score < band.low ? 'run' : 'judge';
}

export class ProbeGuard {
  constructor(readonly probe: ProbeParams) {}

  /** the calibrated cascade band, or one clear error naming what to run */
  cascade(): { low: number; high: number } {
    const c = this.probe.cascade;
    if (!c) throw new SafekeepError(`${this.probe.path ?? 'the probe'}: no cascade band — probe-cascade needs a probe trained with safekeep probe train --calibrate`);
    return c;
  }

  /** probe-steer's steering: +alpha·r̂ at the calibrated layer (r̂ stored with it), or one clear error */
  steering(): { layer: number; vector: Float32Array; alpha: number } {
    const st = this.probe.steer;
    if (!st || !this.probe.steerVector) throw new SafekeepError(`${this.probe.path ?? 'the probe'}: no steering strength — probe-steer needs a probe trained with safekeep probe train --calibrate`);
    return { layer: st.layer, vector: this.probe.steerVector, alpha: st.alpha };
  }

  /**
   * An `inspect` hook for one agent call and a reader of the verdict it left (null until the prefill ran). With
   * `cascade`, the call halts unless the score falls below the band (the judge or the refusal takes over).
   */
  hook(cascade?: { low: number; high: number }): { inspect: (promptLastHidden: Float32Array) => boolean; verdict: () => ProbeVerdict | null } {
    let v: ProbeVerdict | null = null;
    return {
      inspect: (h) => {
        const t0 = performance.now();
        const score = probeScore(this.probe, h);
        if (cascade) {
          const band = cascadeBand(score, cascade);
          v = { score, threshold: cascade.high, unsafe: band === 'refuse', band, latencyMs: performance.now() - t0 };
          return band !== 'run';
        }
        // a score that is no number (NaN hidden states: an f16 overflow) is unsafe: the guard fails closed
        const unsafe = !(score <= this.probe.threshold.value);
        v = { score, threshold: this.probe.threshold.value, unsafe, latencyMs: performance.now() - t0 };
        return unsafe;
      },
      verdict: () => v,
    };
  }
}
