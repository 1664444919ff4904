/**
 * A rate over prompts × samples (behavioural refusal with K sampled answers per prompt): the pooled rate Σk / Σn,
 * with two 95 % intervals —
 * - Wilson over all the answers, as if they were independent (it is the right interval for K = 1, and what the
 *   greedy tables always showed); with K > 1 the answers to one prompt agree with each other, so it is too narrow;
 * - a per-prompt (cluster) bootstrap: resample the prompts with replacement, each bringing all its samples, and take
 *   the percentile interval of Σk / Σn over the resamples. Prompts are the independent units, so this is the one to
 *   read when K > 1 (Field & Welsh 2007, "Bootstrapping clustered data").
 */
import { makeRng } from '../util/rng.ts';
import { percentileInterval, wilsonInterval, type Interval } from './stats.ts';

/** one prompt's outcomes: k of its n answers had the outcome (e.g. refused) */
export interface PromptCount { k: number; n: number }

export interface SampledRate {
  /** answers with the outcome, answers, prompts */
  k: number;
  n: number;
  prompts: number;
  /** k / n (0 when n = 0) */
  rate: number;
  wilson: Interval;
  /** per-prompt bootstrap percentile interval ([0, 1] with no prompts) */
  bootstrap: Interval;
  reps: number;
  seed: number;
  level: number;
}

export function sampledRate(perPrompt: readonly PromptCount[], opts: { reps?: number; seed?: number; level?: number } = {}): SampledRate {
  const reps = opts.reps ?? 1000, seed = opts.seed ?? 0, level = opts.level ?? 0.95;
  let k = 0, n = 0;
  for (const p of perPrompt) {
    if (!Number.isInteger(p.k) || !Number.isInteger(p.n) || p.k < 0 || p.k > p.n) throw new Error(`sampledRate: bad counts k=${p.k} n=${p.n}`);
    k += p.k;
    n += p.n;
  }
  const P = perPrompt.length;
  const base = { k, n, prompts: P, rate: n ? k / n : 0, wilson: wilsonInterval(k, n), reps, seed, level };
  if (P === 0 || n === 0) return { ...base, bootstrap: { lo: 0, hi: 1 } };
  const rng = makeRng(seed);
  const boot = new Float64Array(reps);
  for (let r = 0; r < reps; r++) {
    let bk = 0, bn = 0;
    for (let i = 0; i < P; i++) { const p = perPrompt[rng.int(P)]!; bk += p.k; bn += p.n; }
    boot[r] = bn ? bk / bn : 0;
  }
  return { ...base, bootstrap: percentileInterval(boot, level) };
}
