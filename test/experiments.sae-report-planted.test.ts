/**
 * `reproduce --sae` and `steer --sae` on the planted model with its planted dictionary (src/experiments/planted-sae.ts),
 * where every answer follows from the construction:
 * - the dictionary's features are ±Q_k (feature 2k = +Q_k, 2k+1 = −Q_k; W_enc = W_decᵀ, no biases) at hidden[2], so
 *   feature 0's activation on a row is relu(h·r) exactly, and the refusal direction (∥ r at the planted layers) has
 *   feature 0 first with cosine ≈ 1;
 * - a Schema Direction lies in span(r, Q4) with cos(R_c, r) < −0.99 (schema tokens carry −S on the harm feature, which
 *   block 1 writes into r; the last prompt token is the same template token in both representations): its first
 *   feature is 1 (decoder row −r), its second one of Q4's (8 / 9), and their squared cosines sum to 1;
 * - feature 0's top-activating prompts are the rows with the largest positive h·r, computed here from the cache
 *   itself; with the tools as flattened prose harmful requests fire it more on average (they are written with
 *   harm-lexicon words, whose embeddings carry +A) — though the lexicon is crude: a benign request may use a
 *   lexicon word ("keep the slur filter on") and rank among them, so only most of the top prompts are harmful;
 * - steering along feature 1's unit decoder row is steering along −r: with R̂ = −r the two sweeps generate the same.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compile } from 'vega-lite';
import { writePlantedModel, type PlantedTruth } from '../src/experiments/planted.ts';
import { PLANTED_SAE } from '../src/experiments/planted-sae.ts';
import { reproduce } from '../src/experiments/reproduce.ts';
import { saeFeaturesSection } from '../src/experiments/sae-features.ts';
import { readDirectionsFile } from '../src/experiments/directions-file.ts';
import { steerSweep } from '../src/experiments/steer/sweep.ts';
import { readActivationCache } from '../src/cache/store.ts';
import { loadPairSet } from '../src/data/load.ts';
import type { PairSet } from '../src/data/types.ts';
import type { AnalysisResults, SaeFeaturesSection } from '../src/analysis/results.ts';
import type { ReportFiles } from '../src/report/write-report.ts';
import type { Sae } from '../src/sae/types.ts';
import { loadSae } from '../src/sae/load.ts';
import { buildHtml } from '../src/report/html.ts';
import { buildFigures } from '../src/report/write-report.ts';
import { buildTables } from '../src/report/tables.ts';
import { syntheticResults } from './helpers/report-results.ts';
import { runCli } from './helpers/cli.ts';
import { run as reportCommand } from '../src/cli/commands/report.ts';
import { repoRoot } from './helpers/shared.ts';

const dot = (a: ArrayLike<number>, b: ArrayLike<number>, off = 0): number => {
  let s = 0;
  for (let i = 0; i < b.length; i++) s += a[off + i]! * b[i]!;
  return s;
};

describe('reproduce --sae and steer --sae on the planted model and its planted dictionary', () => {
  let dir: string, model: string, truth: PlantedTruth, sae: Sae, pairs: PairSet;
  let common: { model: string; data: string; results: string; limit: number; engine: { cacheDir: string; quiet: boolean } };
  let res: AnalysisResults, files: ReportFiles, s: SaeFeaturesSection;
  const runDir = () => join(dir, 'results', 'planted');

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sae-report-'));
    process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
    process.env.SAFEKEEP_QUIET = '1';
    pairs = await loadPairSet('pairs');
    model = join(dir, 'planted');
    truth = await writePlantedModel(model, { lexiconPairs: pairs.pairs, sae: true });
    sae = loadSae(join(model, 'sae'));
    common = { model, data: 'pairs', results: join(dir, 'results'), limit: 40, engine: { cacheDir: join(dir, '.graphs'), quiet: true } };
    ({ results: res, files } = await reproduce({ ...common, reps: 50, refusalTokens: 0, sae: { sae, source: 'planted/sae', top: 3, k: 3 } }));
    s = res.saeFeatures!;
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('the refusal direction is feature 0 (r), each Schema Direction feature 1 (−r) then a Q4 feature, in every condition', () => {
    assert.ok(s, 'the results carry the SAE section');
    assert.equal(s.hiddenRow, PLANTED_SAE.hiddenRow);
    assert.equal(s.note === undefined, res.lStar.layer === PLANTED_SAE.hiddenRow, `ℓ* = ${res.lStar.layer}, note: ${s.note}`);
    assert.deepEqual(s.conditions.map((c) => c.name), ['prompt.agent.schema', 'prompt.agent.flattened', 'first.schema', 'first.flattened']);
    assert.equal(s.panels.length, 4 * 3);
    for (const p of s.panels) {
      const [f0, f1] = p.byCosine;
      if (p.direction === 'refusal.chatbot') {
        assert.equal(f0!.index, PLANTED_SAE.refusalFeature, `${p.condition}: the refusal direction's first feature`);
        assert.ok(f0!.cosine > 0.99, `cosine ${f0!.cosine}`);
      } else {
        assert.equal(f0!.index, PLANTED_SAE.antiRefusalFeature, `${p.condition} ${p.direction}: the Schema Direction's first feature is −r`);
        assert.ok((PLANTED_SAE.q4Features as readonly number[]).includes(f1!.index), `${p.direction}: second feature ${f1!.index}`);
        assert.ok(Math.abs(f0!.cosine ** 2 + f1!.cosine ** 2 - 1) < 1e-4, `${p.direction}: cos² ${f0!.cosine ** 2} + ${f1!.cosine ** 2}`);
      }
      assert.equal(p.byAttribution.length, 3);
    }
  });

  test("feature 0's top prompts are the rows with the largest positive h·r of each cache; with flattened prose mostly harmful", () => {
    for (const c of s.conditions) {
      const cache = readActivationCache(join(runDir(), 'cache'), c.name);
      const keys = (cache.manifest.rows as { key: string }[]).map((r) => r.key);
      const proj = keys.map((key, i) => ({ key, a: dot(cache.data, truth.r, (i * cache.layers + PLANTED_SAE.hiddenRow) * cache.d) }));
      const expected = proj.filter((x) => x.a > 1e-6).sort((x, y) => y.a - x.a).slice(0, 3);
      const f0 = s.panels.find((p) => p.condition === c.name && p.direction === 'refusal.chatbot')!.byCosine[0]!;
      assert.deepEqual(f0.top.map((t) => t.key), expected.map((x) => x.key), c.name);
      f0.top.forEach((t, i) => assert.ok(Math.abs(t.activation - expected[i]!.a) < 1e-4, `${c.name}: ${t.activation} vs h·r ${expected[i]!.a}`));
      if (c.name !== 'prompt.agent.flattened') continue;
      assert.equal(f0.top.length, 3);
      assert.ok(f0.meanDiff > 0, `feature 0: harmful − benign mean activation ${f0.meanDiff}`);
      assert.ok(f0.top.filter((t) => t.key.endsWith(':harmful')).length >= 2, `top prompts ${f0.top.map((t) => t.key)}`);
      for (const t of f0.top) {
        const pair = pairs.pairs.find((p) => t.key.startsWith(`${p.id}:`))!;
        const text = t.key.endsWith(':harmful') ? pair.harmful.prompt : pair.benign.prompt;
        assert.equal(t.text, text.length > 160 ? `${text.slice(0, 159)}…` : text);
      }
    }
  });

  test('the report: its section (html and md) and the figure, valid vega-lite; report --sae recomputes it without the model', async () => {
    const html = readFileSync(files.html, 'utf8');
    assert.match(html, /id="sae-features"/);
    assert.match(html, /id="sae-refusal\.chatbot"/);
    assert.doesNotMatch(html, /sae-features-none/);
    assert.match(readFileSync(files.markdown, 'utf8'), /## SAE features of the refusal and Schema Directions[\s\S]*\| #0 \(/);
    const vl = join(runDir(), 'figures', 'sae-direction-features.vl.json');
    assert.ok(existsSync(vl) && existsSync(vl.replace('.vl.json', '.png')));
    assert.ok(compile(JSON.parse(readFileSync(vl, 'utf8'))).spec, 'the figure compiles');
    assert.equal(await reportCommand(['--results', join(runDir(), 'results.json'), '--out', join(dir, 'rep'), '--sae', join(model, 'sae'), '--sae-top', '2']), 0);
    const again = JSON.parse(readFileSync(join(dir, 'rep', 'results.json'), 'utf8')) as AnalysisResults;
    assert.deepEqual(again.saeFeatures!.panels.map((p) => p.byCosine.map((f) => f.index)), s.panels.map((p) => p.byCosine.slice(0, 2).map((f) => f.index)));
    assert.match(readFileSync(join(dir, 'rep', 'report.html'), 'utf8'), /id="sae-refusal\.chatbot"/);
  });

  test('an SAE off ℓ* runs with the mismatch said; one past the model\'s blocks fails before extraction', async () => {
    const { directions } = readDirectionsFile(join(runDir(), 'directions.safetensors'));
    const other = await saeFeaturesSection({
      sae, source: 'planted/sae', cacheDir: join(runDir(), 'cache'), directions: { 'refusal.chatbot': directions.get('refusal.chatbot')! },
      lStar: PLANTED_SAE.hiddenRow + 1, layers: res.layers,
    });
    assert.match(other.note ?? '', /reads hidden\[2\], but ℓ\* = 3/);
    await assert.rejects(reproduce({ ...common, reps: 50, refusalTokens: 0, sae: { sae: loadSae(join(model, 'sae'), { hookName: 'blocks.7.hook_resid_post' }), source: 'x' } }),
      /hook 'blocks\.7\.hook_resid_post' names layer 7; the model has blocks 0\.\.3/);
  });

  test('steer --sae: along feature 1 (= −r) the sweep generates what the sweep along R̂ = −r does; an SAE off the steered row is refused', async () => {
    // R̂ = −r: the sweep subtracts α·R̂, so it adds α·r and raises refusal
    const rFile = join(dir, 'minus-r.json');
    writeFileSync(rFile, JSON.stringify({ vector: truth.r.map((x) => -x) }));
    const alphas = [0, 0.8, 1.6];
    const st = await steerSweep({
      ...common, alphas: alphas.map((value) => ({ kind: 'absolute' as const, value })), layer: PLANTED_SAE.hiddenRow, direction: { file: rFile },
      maxNewTokens: 4, requests: ['harmful'], sae: { sae, source: 'planted/sae' },
    });
    assert.equal(st.sweeps.length, 2);
    const [byDir, byFeature] = st.sweeps as [typeof st.sweeps[0], typeof st.sweeps[0]];
    assert.equal(byFeature.feature?.index, PLANTED_SAE.antiRefusalFeature);
    assert.ok(byFeature.feature!.cosine > 1 - 1e-6, `cosine ${byFeature.feature!.cosine}`);
    byDir.rows.forEach((r, i) => assert.deepEqual(byFeature.rows[i]!.counts, r.counts, `α=${alphas[i]}`));
    // the sweep is not a no-op: adding α·r takes refusal from none to every request
    assert.equal(byDir.rows[0]!.counts.refusal, 0);
    assert.equal(byDir.rows[2]!.counts.refusal, byDir.rows[2]!.n);
    const gens = (f: string) => readFileSync(join(st.outDir, f), 'utf8').trim().split('\n').slice(1).map((l) => (JSON.parse(l) as { pairId: string; text: string }));
    // α = 0 steers nothing: the sweep by feature reuses the direction's unsteered generations
    assert.ok(!existsSync(join(st.outDir, 'generations.harmful.sae1.alpha0.jsonl')));
    for (const a of alphas.slice(1)) assert.deepEqual(gens(`generations.harmful.sae1.alpha${a}.jsonl`), gens(`generations.harmful.alpha${a}.jsonl`), `α=${a}`);
    assert.ok(compile(JSON.parse(readFileSync(join(runDir(), 'figures', 'steering-by-feature.vl.json'), 'utf8'))).spec);
    assert.match(readFileSync(st.report, 'utf8'), /along SAE feature #1/);
    await assert.rejects(steerSweep({ ...common, alphas: [{ kind: 'absolute', value: 1 }], layer: 3, direction: 'refusal', maxNewTokens: 2, requests: ['harmful'], sae: { sae, source: 'planted/sae' } }),
      /--sae: the SAE reads blocks\.1\.hook_resid_post = hidden\[2\], the sweep steers hidden\[3\]/);
  });
});

test('report without an SAE: the section says none was given; with a feature sweep: Table 3 rows and one figure with both curves', () => {
  const res = syntheticResults();
  const figures = buildFigures(res);
  assert.ok(!figures.some((f) => f.name === 'sae-direction-features' || f.name === 'steering-by-feature'));
  const html = buildHtml(res, figures, buildTables(res));
  assert.match(html, /<p class="missing" id="sae-features-none">No SAE was given/);
  // a sweep by feature beside the sweep by direction (input data: the counts are not computed here)
  const s0 = res.steering![0]!;
  res.steering!.push({ ...s0, direction: 'SAE feature #7', feature: { sae: 'x/sae', hook: 'blocks.2.hook_resid_post', index: 7, cosine: 0.9, of: s0.direction } });
  const fig = buildFigures(res).find((f) => f.name === 'steering-by-feature')!;
  const values = (fig.spec as { data: { values: { along: string; alpha: number }[] } }).data.values;
  assert.deepEqual([...new Set(values.map((v) => v.along))], ['along the direction R̂', 'along SAE feature #7']);
  assert.equal(values.length, 2 * s0.rows.length);
  assert.ok(compile(fig.spec).spec);
  const t3 = buildTables(res).find((t) => t.name === 'table3-steering')!;
  assert.equal(t3.display.filter((r) => r[0] === 'harmful, along SAE feature #7').length, s0.rows.length);
  assert.match(t3.note ?? '', /along SAE feature #7/);
});

test('reproduce: --sae-top without --sae, and --sae with --shard, are one line and exit 2', async () => {
  const a = await runCli(['reproduce', '--model', 'models/none', '--sae-top', '3']);
  assert.equal(a.code, 2);
  assert.match(a.stderr, /--sae-top needs --sae/);
  assert.equal(a.stderr.trim().split('\n').length, 1);
  const b = await runCli(['reproduce', '--model', 'models/none', '--sae', join(repoRoot, 'test', 'fixtures', 'sae', 'saelens-standard'), '--shard', '0/2']);
  assert.equal(b.code, 2);
  assert.match(b.stderr, /--sae: a sharded reproduce only extracts/);
});
