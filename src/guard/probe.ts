/**
 * The refusal-probe guard: a trained probe (src/experiments/probe/) reads hidden[ℓ] at the last prompt position of
 * the agent's OWN prefill (ChatCall.inspect → engine haltAfterPrefill), so judging the request costs one dot product
 * and no model call. score = w·hidden[ℓ] + bias; score > threshold (or NaN) → unsafe, generation stops after the prefill and
 * the request takes SafeKeep's refusal path.
 */
import { probeScore, type Probe } from '../data/probe-file.ts';

export interface ProbeVerdict {
  score: number;
  threshold: number;
  unsafe: boolean;
  /** time spent scoring inside the agent call (ms) */
  latencyMs: number;
}

/** What the guard needs of a probe (a probe file, or a probe skill's direction). */
export type ProbeParams = Pick<Probe, 'w' | 'bias' | 'layer' | 'dModel'> & { threshold: { value: number } };

export class ProbeGuard {
  constructor(readonly probe: ProbeParams) {}

  /** An `inspect` hook for one agent call and a reader of the verdict it left (null until the prefill ran). */
  hook(): { inspect: (promptLastHidden: Float32Array) => boolean; verdict: () => ProbeVerdict | null } {
    let v: ProbeVerdict | null = null;
    return {
      inspect: (h) => {
        const t0 = performance.now();
        const score = probeScore(this.probe, h);
        // a score that is no number (NaN hidden states: an f16 overflow) is unsafe: the guard fails closed
        const unsafe = !(score <= this.probe.threshold.value);
        v = { score, threshold: this.probe.threshold.value, unsafe, latencyMs: performance.now() - t0 };
        return unsafe;
      },
      verdict: () => v,
    };
  }
}
