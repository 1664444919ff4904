/**
 * What report.html and the summaries say, beyond the numbers: intervals from few groups carry a caveat (the group
 * count is the evaluation split's, computed here independently), Figure 3 says where its permutation band is
 * uninformative, Table 3's heading names the steered requests once, the manifest prints vectors on one line (and
 * parses back to itself), and the prose protocol table is not styled as a numeric one.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { analyze } from '../src/analysis/analyze.ts';
import { summarizeResults } from '../src/experiments/summary.ts';
import { compactJson } from '../src/report/compact-json.ts';
import { fewGroupsCaveat, MIN_BOOTSTRAP_GROUPS } from '../src/report/few-groups.ts';
import { permutationCaveat, schemaCosineFigure } from '../src/report/figures/schema-cosine.ts';
import { steeringBarsFigure } from '../src/report/figures/steering-bars.ts';
import { buildHtml } from '../src/report/html.ts';
import { protocolTableHtml } from '../src/report/protocol.ts';
import { summaryLines } from '../src/report/summary.ts';
import { scenarioInput } from './helpers/analysis-scenario.ts';
import { syntheticResults } from './helpers/report-results.ts';

test('analyze records the number of evaluation groups the bootstrap resamples', () => {
  const input = scenarioInput({ reps: 20, pairs: 30 });
  const res = analyze(input);
  const c = input.chatbot;
  const expected = new Set(c.evaluation.map((i) => (c.groups ?? c.pairIds)[i])).size;
  assert.equal(res.bootstrap.groups, expected);
  assert.ok(expected >= 2);
});

test('few groups: one caveat line in the stdout summary, report.md lines and report.html; none with enough groups', () => {
  const res = syntheticResults();
  assert.ok(res.bootstrap.groups! >= MIN_BOOTSTRAP_GROUPS);
  assert.equal(fewGroupsCaveat(res), null);
  assert.doesNotMatch(summarizeResults(res), /Caveat/);
  assert.doesNotMatch(buildHtml(res, [], []), /class="caveat"/);
  res.bootstrap.groups = 3;
  const caveat = fewGroupsCaveat(res)!;
  assert.match(caveat, /^Caveat: the intervals resample only 3 evaluation groups \(fewer than 10\); .* --limit, or no --quick/);
  assert.equal(summarizeResults(res).split('\n').filter((l) => l === caveat).length, 1);
  assert.equal(summaryLines(res).filter((l) => l === caveat).length, 1);
  const html = buildHtml(res, [], []);
  assert.ok(html.includes(`<p class="caveat">${caveat}</p>`));
  assert.match(html, /1000|200 paired bootstrap resamples of 3 evaluation groups/);
  res.bootstrap.groups = 1;
  assert.match(fewGroupsCaveat(res)!, /only 1 evaluation group \(/);
});

test('Figure 3: layers whose permutation band spans nearly [−1, 1] are named in the caption', () => {
  assert.equal(permutationCaveat({ lo: [0, -0.3, -0.2], hi: [0, 0.3, 0.25] }), '');
  assert.equal(permutationCaveat(undefined), '');
  const s = permutationCaveat({ lo: [0, -1, -0.99996, -0.99996, -0.99996], hi: [0, 1, 0.9999, 0.9999, 0.9999] });
  assert.match(s, /^ At layers 1–4 the permutation band spans nearly all of \[−1, 1\]: .* read those layers against the random-direction band\.$/);
  assert.match(permutationCaveat({ lo: [-0.9, 0, -0.9], hi: [0.9, 0, 0.9] }), /At layers 0, 2 /);
  const res = syntheticResults();
  const fig = schemaCosineFigure(res)!;
  const band = res.schemaCosines!.permutationBand!;
  const wide = band.lo.some((lo, l) => band.hi[l]! - lo >= 1.5);
  assert.equal(/spans nearly all/.test(fig.caption), wide);
});

test('Table 3 heading: the steered requests once, then the direction with its own parenthesis', () => {
  const res = syntheticResults();
  const s = { ...res.steering![0]!, direction: 'Schema Direction (harmful requests, all pairs)', requests: 'benign' };
  const title = steeringBarsFigure(res, s, 0).title;
  assert.equal(title, 'Table 3 — benign requests steered against the Schema Direction (harmful requests, all pairs)');
  assert.doesNotMatch(title, /\) \(/);
});

test('manifest: vectors on one line (wrapped at the width), the text parses back to the same value', () => {
  const m = { model: { dir: 'models/x', layers: 4 }, vector: [0.1, -2, 3e-7, 4], ids: ['a', 'b'], nested: [{ v: [1, 2] }], empty: [], none: {} };
  const text = compactJson(m);
  assert.ok(text.includes('"vector": [0.1, -2, 3e-7, 4]'));
  assert.ok(text.includes('"ids": ["a", "b"]'));
  assert.deepEqual(JSON.parse(text), m);
  const long = compactJson({ v: Array.from({ length: 200 }, (_, i) => i / 4) }, 80);
  const lines = long.split('\n');
  assert.ok(lines.length > 3 && lines.length < 40, `${lines.length} lines for 200 numbers`);
  for (const l of lines) assert.ok(l.length <= 80, l);
  fc.assert(fc.property(fc.jsonValue(), (v) => {
    assert.deepEqual(JSON.parse(compactJson(v, 40)), JSON.parse(JSON.stringify(v)));
  }), { numRuns: 300 });
  const html = buildHtml({ ...syntheticResults(), manifest: { direction: [0.25, 0.5] } }, [], []);
  assert.ok(html.includes('&quot;direction&quot;: [0.25, 0.5]'));
});

test('the protocol table is prose: not in the numeric tables\' class (right-aligned, nowrap)', () => {
  const t = protocolTableHtml()!;
  assert.match(t, /^<table class="protocol">/);
  const html = buildHtml(syntheticResults(), [], []);
  assert.match(html, /\.protocol th, \.protocol td \{[^}]*text-align: left;[^}]*white-space: normal;/);
});
