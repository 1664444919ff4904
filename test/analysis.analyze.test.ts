import assert from 'node:assert/strict';
import { test } from 'node:test';
import { analyze } from '../src/analysis/analyze.ts';
import { SCENARIO, scenarioInput } from './helpers/analysis-scenario.ts';

test('analyze() on the planted scenario recovers what the construction implies', () => {
  const t0 = Date.now();
  const res = analyze(scenarioInput());
  const ms = Date.now() - t0;
  assert.equal(res.layers, SCENARIO.layers);
  assert.equal(res.dModel, SCENARIO.d);
  assert.ok((SCENARIO.planted as readonly number[]).includes(res.lStar.layer), `ℓ* = ${res.lStar.layer}`);
  assert.equal(res.lStar.cvAuroc[0], null);

  const row = (name: string, rows = res.table1) => rows.find((r) => r.config === name)!;
  // chatbot on chatbot at a planted layer: near-perfect separation
  assert.ok(row('chatbot').cross.auroc > 0.99);
  // schema push of −8u against a +10u contrast leaves a 2σ separation: AUROC ≈ Φ(2/√2) ≈ 0.92 < chatbot
  const full = row('agent-full');
  assert.ok(full.cross.auroc < 0.97 && full.cross.auroc > 0.8, `agent-full ${full.cross.auroc}`);
  assert.ok(full.crossDiff.hi < 0, 'paired CI of the drop excludes 0');
  assert.ok(row('agent-role').cross.auroc > 0.98, 'role only: no suppression');
  // within-format direction also separates (the contrast is still along u)
  assert.ok(full.within.auroc > 0.8);
  // Table 2: flattened restores, schema suppresses, pseudoword (0.9 of the push) in between
  const t2 = (n: string) => row(n, res.table2).cross.auroc;
  assert.ok(t2('flattened') > t2('pseudoword') && t2('pseudoword') > t2('schema'), `${t2('flattened')} ${t2('pseudoword')} ${t2('schema')}`);
  for (const r of [...res.table1, ...res.table2]) {
    assert.ok(r.cross.lo <= r.cross.auroc && r.cross.auroc <= r.cross.hi);
    assert.equal(r.cross.n, 2 * SCENARIO.pairs / 2);
  }

  // Schema Direction: harmful points against r at the planted layers, beyond the random band; benign does not
  const sc = res.schemaCosines!;
  for (const l of SCENARIO.planted) {
    assert.ok(sc.harmful[l]! < sc.randomBand.lo[l]! && sc.harmful[l]! < -0.5, `harmful cos ${sc.harmful[l]} at ${l}`);
    assert.ok(Math.abs(sc.benign[l]!) < 0.5, `benign cos ${sc.benign[l]} at ${l}`);
    assert.ok(sc.permutationBand!.lo[l]! <= sc.permutationBand!.hi[l]!);
  }
  // the paper's Eq. 2: every pair of the category (default), not only the extraction split
  assert.deepEqual(sc.n, { harmful: 80, benign: 80 });
  assert.equal(sc.pairs, 'all');
  assert.equal(res.lStar.rule, 'cv');

  // first-token projections: harmful/flattened ≈ +10 at planted layers, harmful/schema ≈ +2, benign ≈ 0
  const ft = (c: string, r: string) => res.firstToken!.find((f) => f.category === c && f.representation === r)!;
  const l = res.lStar.layer;
  assert.ok(Math.abs(ft('harmful', 'flattened').mean[l]! - 10) < 1);
  assert.ok(Math.abs(ft('harmful', 'schema').mean[l]! - 2) < 1);
  assert.ok(Math.abs(ft('benign', 'schema').mean[l]!) < 1);
  assert.ok(Math.abs(ft('benign', 'flattened').sd[l]! - 1) < 0.4, 'unit noise along r̂');

  // norms: refusal direction ≈ 10 at planted layers, mean ‖h‖ ≈ √d for pure noise layers
  const rn = res.norms.directions.find((n) => n.name.startsWith('refusal'))!;
  assert.ok(Math.abs(rn.norm[3]! - 10) < 1.5);
  // the full agent's own direction: the contrast left after the schema push, 10 − 8 = 2 along u (+ noise)
  const own = res.norms.directions.find((n) => n.name === 'refusal (+ tools (full agent))')!;
  assert.ok(Math.abs(own.norm[3]! - 2) < 1, `own-direction norm ${own.norm[3]}`);
  const hn = res.norms.meanHidden.find((n) => n.name === 'Chatbot')!;
  assert.ok(Math.abs(hn.norm[0]! - Math.sqrt(SCENARIO.d)) < 1);

  // plain JSON (what writeReport and files take)
  assert.deepEqual(JSON.parse(JSON.stringify(res)), res);
  assert.ok(ms < 20000, `analyze took ${ms} ms`);
});

test('analyze() refuses two different activation sets under one configuration name, accepts one set twice', () => {
  const input = scenarioInput();
  const clash = { ...input.table2[0]!, name: 'agent-full' };
  assert.throws(() => analyze({ ...input, table2: [clash] }), /configuration name 'agent-full' is used for two different activation sets/);
  // the same activations under the same name in both tables (another label) are fine
  const full = input.table1.find((c) => c.name === 'agent-full')!;
  const copy = { ...full.acts, data: Float32Array.from(full.acts.data) }; // the same cache loaded twice
  const res = analyze({ ...input, table2: [{ ...full, acts: copy, label: 'JSON schemas' }], schemaPair: undefined, firstToken: undefined });
  assert.equal(res.table2[1]!.label, 'JSON schemas');
  assert.equal(res.table2[1]!.cross.auroc, res.table1.find((r) => r.config === 'agent-full')!.cross.auroc);
});

test('analyze() options: Schema Direction over the extraction split only (marked); ℓ* by peak chatbot AUROC (the paper)', () => {
  const input = scenarioInput();
  const res = analyze({ ...input, options: { ...input.options, schemaPairs: 'extraction', layerRule: 'peak' } });
  assert.deepEqual(res.schemaCosines!.n, { harmful: 40, benign: 40 });
  assert.equal(res.schemaCosines!.pairs, 'extraction');
  assert.equal(res.lStar.rule, 'peak');
  assert.match(res.lStar.method, /peak chatbot AUROC/);
  // independent: argmax over layers 1..L of the chatbot-on-chatbot evaluation AUROC curve
  const curve = res.curves.find((c) => c.config === 'chatbot' && c.direction === 'chatbot')!.perLayer.map((e) => e.auroc);
  let best = 1;
  for (let l = 1; l < curve.length; l++) if (curve[l]! > curve[best]!) best = l;
  assert.equal(res.lStar.layer, best);
  assert.ok(res.table1.every((r) => r.layer === best));
});
