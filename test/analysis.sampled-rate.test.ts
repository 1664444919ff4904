/**
 * sampledRate (src/analysis/sampled-rate.ts): Wilson over prompts × samples and the per-prompt bootstrap. The
 * bootstrap is checked against the exact distribution of the resampled rate (every resample of 4 prompts enumerated
 * with its multinomial weight), and against the property that motivates it: when the samples of a prompt agree, the
 * per-prompt interval is much wider than Wilson's, which counts them as independent.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sampledRate, type PromptCount } from '../src/analysis/sampled-rate.ts';
import { wilsonInterval } from '../src/analysis/stats.ts';

/** the exact bootstrap distribution of Σk/Σn over resamples of the prompts: [value, probability][] */
function exactBootstrap(ps: readonly PromptCount[]): [number, number][] {
  const P = ps.length;
  const out = new Map<number, number>();
  const idx = new Array<number>(P).fill(0);
  for (let c = 0; c < P ** P; c++) {
    let x = c, k = 0, n = 0;
    for (let i = 0; i < P; i++) { idx[i] = x % P; x = Math.floor(x / P); k += ps[idx[i]!]!.k; n += ps[idx[i]!]!.n; }
    const v = Math.round((k / n) * 1e12) / 1e12;
    out.set(v, (out.get(v) ?? 0) + P ** -P);
  }
  return [...out].sort((a, b) => a[0] - b[0]);
}

/** the atoms of the exact distribution either side of its q-quantile */
function bracket(dist: [number, number][], q: number): [number, number] {
  let acc = 0;
  for (let i = 0; i < dist.length; i++) {
    acc += dist[i]![1];
    if (acc >= q - 1e-12) return [dist[Math.max(0, i - 1)]![0], dist[Math.min(dist.length - 1, i + 1)]![0]];
  }
  return [dist.at(-1)![0], dist.at(-1)![0]];
}

test('pooled rate and Wilson over all the answers', () => {
  const ps = [{ k: 3, n: 5 }, { k: 0, n: 5 }, { k: 5, n: 5 }];
  const r = sampledRate(ps);
  assert.equal(r.k, 8);
  assert.equal(r.n, 15);
  assert.equal(r.prompts, 3);
  assert.equal(r.rate, 8 / 15);
  assert.deepEqual(r.wilson, wilsonInterval(8, 15));
  // the README's greedy figure: 0 of 8 → Wilson [0, 32.4 %]
  assert.equal((100 * sampledRate(Array.from({ length: 8 }, () => ({ k: 0, n: 1 }))).wilson.hi).toFixed(1), '32.4');
});

test('the per-prompt bootstrap matches the exact resampling distribution (4 prompts, every resample enumerated)', () => {
  const ps = [{ k: 0, n: 4 }, { k: 1, n: 4 }, { k: 4, n: 4 }, { k: 2, n: 3 }];
  const dist = exactBootstrap(ps);
  const r = sampledRate(ps, { reps: 40_000, seed: 3 });
  const [loA, loB] = bracket(dist, 0.025), [hiA, hiB] = bracket(dist, 0.975);
  assert.ok(r.bootstrap.lo >= loA - 1e-12 && r.bootstrap.lo <= loB + 1e-12, `lo ${r.bootstrap.lo} not in [${loA}, ${loB}]`);
  assert.ok(r.bootstrap.hi >= hiA - 1e-12 && r.bootstrap.hi <= hiB + 1e-12, `hi ${r.bootstrap.hi} not in [${hiA}, ${hiB}]`);
  // and the mean of the resampled rates is the exact distribution's mean (ratio estimator: not exactly k/n)
  const exactMean = dist.reduce((a, [v, p]) => a + v * p, 0);
  assert.ok(Math.abs(exactMean - r.rate) < 0.05);
});

test('samples of a prompt that agree widen the per-prompt interval far beyond Wilson\'s; independent answers do not', () => {
  // 10 prompts × 20 samples: 3 prompts always refuse, 7 never (rate 0.3 either way)
  const clustered = sampledRate([...Array(3).fill({ k: 20, n: 20 }), ...Array(7).fill({ k: 0, n: 20 })]);
  const width = (i: { lo: number; hi: number }) => i.hi - i.lo;
  assert.equal(clustered.rate, 0.3);
  assert.ok(width(clustered.bootstrap) > 2.5 * width(clustered.wilson), `bootstrap ${width(clustered.bootstrap)} vs Wilson ${width(clustered.wilson)}`);
  // 200 prompts × 1 sample, 60 refusals: both intervals describe the same binomial; widths agree within 25 %
  const single = sampledRate([...Array(60).fill({ k: 1, n: 1 }), ...Array(140).fill({ k: 0, n: 1 })]);
  assert.ok(Math.abs(width(single.bootstrap) / width(single.wilson) - 1) < 0.25);
});

test('deterministic under a seed; degenerate inputs', () => {
  const ps = [{ k: 1, n: 3 }, { k: 2, n: 3 }, { k: 0, n: 3 }];
  assert.deepEqual(sampledRate(ps, { seed: 5 }), sampledRate(ps, { seed: 5 }));
  assert.deepEqual(sampledRate([]).bootstrap, { lo: 0, hi: 1 });
  assert.deepEqual(sampledRate([{ k: 2, n: 4 }]).bootstrap, { lo: 0.5, hi: 0.5 });
  assert.throws(() => sampledRate([{ k: 3, n: 2 }]), /bad counts/);
});
