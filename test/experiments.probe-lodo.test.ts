/**
 * Leave-one-dataset-out (src/experiments/probe/lodo.ts, `probe eval --lodo`):
 * - the metric pieces on hand-made scores (TPR at 1 % FPR, the group halves, the group bootstrap);
 * - on the planted model with our pairs, AgentHarm and InjecAgent (the miniature copies): the table's shape (each held-out
 *   set scored by its in-distribution probe, each other set and their union, both probe kinds, on the same test rows),
 *   every AUROC a Mann–Whitney count and every TPR a count over the scores it was computed from, and — the planted
 *   truth — a mean-difference probe trained on InjecAgent alone ranks the held-out pairs as hidden[2]·r does (the
 *   direction it found is the planted r), computed from a separate forward pass;
 * - through the CLI: the table printed, the files and the report; bad flags are one error, exit 2.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { groupBootstrap, halves, injecAgentRows, pairRows, runLodo, tprAtFpr } from '../src/experiments/probe/lodo.ts';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { agentHarmPairs, readAgentHarm } from '../src/data/agentharm.ts';
import { readInjecAgentCases } from '../src/data/injecagent.ts';
import { loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { PromptBuilder } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { createEngine } from '../src/engine/engine.ts';
import { s3Data } from './helpers/s3-data.ts';
import { repoRoot } from './helpers/shared.ts';

function mannWhitney(s: readonly number[], l: readonly number[]): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < s.length; i++) for (let j = 0; j < s.length; j++) {
    if (l[i] === 1 && l[j] === 0) { den++; num += s[i]! > s[j]! ? 1 : s[i] === s[j] ? 0.5 : 0; }
  }
  return num / den;
}

test('lodo pieces: TPR at 1 % FPR, group halves, group bootstrap', () => {
  // 100 benign 0..99, harmful 50.5, 98.5, 99.5, 200: at most 1 benign above the threshold → t = 98, TPR = 3/4
  const benign = Array.from({ length: 100 }, (_, i) => i);
  const s = [...benign, 50.5, 98.5, 99.5, 200];
  const l = [...benign.map(() => 0), 1, 1, 1, 1];
  assert.equal(tprAtFpr(s, l, 0.01), 0.75);
  assert.equal(tprAtFpr(s, l, 0), 0.5); // t = 99
  const [a, b] = halves(['g1', 'g2', 'g3', 'g4', 'g5', 'g1'], 0);
  assert.equal(a.size, 2);
  assert.equal(b.size, 3);
  const order = ['g1', 'g2', 'g3', 'g4', 'g5'].sort((x, y) => (createHash('sha256').update(`0:${x}`).digest('hex') < createHash('sha256').update(`0:${y}`).digest('hex') ? -1 : 1));
  assert.deepEqual([...a].sort(), order.slice(0, 2).sort());
  // perfectly separated groups: AUROC 1 in every resample
  const g = groupBootstrap([0, 1, 0.1, 0.9, 0.2, 0.8], [0, 1, 0, 1, 0, 1], ['a', 'a', 'b', 'b', 'c', 'c'], 50, 0);
  assert.deepEqual(g.auroc, { est: 1, lo: 1, hi: 1 });
  assert.throws(() => halves(['only'], 0), /at least 2 groups/);
});

test('lodo on the planted model: held-out table, counts, and the planted direction found from another data set', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-lodo-'));
  try {
    const set = await loadPairSet('pairs');
    const truth = await writePlantedModel(join(dir, 'planted'), { lexiconPairs: set.pairs });
    const model = join(dir, 'planted');
    const tok = await loadPromptTokenizer(model);
    const builder = new PromptBuilder(tok, { texts: loadPromptTexts() });
    const engine = await createEngine(model, { cacheDir: join(dir, '.cache') });
    try {
      const render = (m: Parameters<typeof tok.render>[0], tools: readonly unknown[]) => tok.encode(tok.render(m, { tools: tools as never, addGenerationPrompt: true }));
      const sets = [
        pairRows('pairs', set, builder, 20),
        pairRows('agentharm', { pairs: agentHarmPairs(readAgentHarm(s3Data().agentharm, ['test_public'])) }, builder),
        injecAgentRows(readInjecAgentCases(s3Data().injecagent, 'base'), builder, render),
      ];
      const r = await runLodo(engine, sets, { reps: 100, layer: 2 });
      assert.equal(r.rows.length, 3 * 4 * 2);
      for (const test of ['pairs', 'agentharm', 'injecagent']) {
        const mine = r.rows.filter((x) => x.test === test);
        const others = ['pairs', 'agentharm', 'injecagent'].filter((x) => x !== test);
        assert.deepEqual([...new Set(mine.map((x) => x.train))], [`${test} (in-distribution)`, ...others, `union of ${others.join(' + ')}`]);
        assert.equal(new Set(mine.map((x) => x.nTest)).size, 1, 'every probe on the same test rows');
        const size = (n: string) => sets.find((s) => s.name === n)!.rows.length;
        const inDist = mine.find((x) => x.inDistribution)!;
        assert.equal(inDist.nTrain + inDist.nTest, size(test));
        for (const o of others) assert.equal(mine.find((x) => x.train === o)!.nTrain, size(o));
        assert.equal(mine.find((x) => x.train.startsWith('union'))!.nTrain, size(others[0]!) + size(others[1]!));
        for (const x of mine) {
          const sc = r.scores[`${test}|${x.train}|${x.kind}`]!;
          assert.ok(Math.abs(x.auroc.est - mannWhitney(sc.scores, sc.labels)) < 1e-6, `${test} ${x.train} ${x.kind}`);
          assert.ok(Math.abs(x.tpr1.est - tprAtFpr(sc.scores, sc.labels, 0.01)) < 1e-6);
          assert.ok(x.auroc.lo <= x.auroc.hi);
        }
      }
      // the planted truth: trained on InjecAgent only, the mean-difference probe scores the held-out pairs as r does
      const sc = r.scores['pairs|injecagent|mean-diff']!;
      const [, testHalf] = halves(sets[0]!.rows.map((x) => x.group), 0);
      const testRows = sets[0]!.rows.filter((x) => testHalf.has(x.group));
      assert.deepEqual(testRows.map((x) => x.group), sc.groups);
      const rh: number[] = [];
      for (const row of testRows) {
        const [f] = await engine.forward([row.ids], { hiddenAt: 'last', logitsAt: 'none' });
        rh.push(truth.r.reduce((acc, x, j) => acc + x * f!.hidden[2 * engine.dModel + j]!, 0));
      }
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
      const [ms, mr] = [mean(sc.scores), mean(rh)];
      let sxy = 0; let sxx = 0; let syy = 0;
      sc.scores.forEach((x, i) => { sxy += (x - ms) * (rh[i]! - mr); sxx += (x - ms) ** 2; syy += (rh[i]! - mr) ** 2; });
      const corr = sxy / Math.sqrt(sxx * syy);
      assert.ok(corr > 0.99, `corr(score, hidden[2]·r) = ${corr}`);
    } finally {
      await engine.dispose();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('probe eval --lodo through the CLI: table, files, report; bad flags exit 2', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-lodo-cli-'));
  const env = { ...process.env, SAFEKEEP_CACHE: join(dir, '.cache'), SAFEKEEP_QUIET: '1' };
  const cli = (args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { env, encoding: 'utf8' });
  try {
    await writePlantedModel(join(dir, 'planted'), { lexiconPairs: (await loadPairSet('pairs')).pairs });
    const common = ['probe', 'eval', '--model', join(dir, 'planted'), '--results', join(dir, 'results'), '--limit', '12'];
    const r = cli([...common, '--lodo', '--lodo-sets', 'pairs,injecagent', '--injecagent', s3Data().injecagent, '--reps', '50']);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /\| pairs \| \*\*pairs \(in-distribution\)\*\* \| mean-diff \|/);
    assert.match(r.stdout, /\| injecagent \| pairs \| logistic \|/);
    assert.match(r.stdout, /Model: the planted synthetic model/);
    const json = JSON.parse(readFileSync(join(dir, 'results', 'planted', 'tables', 'probe-lodo.json'), 'utf8')) as { rows: unknown[] };
    assert.equal(json.rows.length, 2 * 2 * 2);
    assert.ok(existsSync(join(dir, 'results', 'planted', 'figures', 'probe-lodo-bars.svg')));
    const html = readFileSync(join(dir, 'results', 'planted', 'report.html'), 'utf8');
    assert.match(html, /leave-one-dataset-out/);
    for (const [args, re] of [
      [['--lodo', '--lodo-sets', 'pairs'], /at least two data sets/],
      [['--lodo', '--lodo-sets', 'pairs,mmlu'], /unknown 'mmlu'/],
      [['--layer', '2'], /--layer needs --lodo/],
    ] as const) {
      const bad = cli([...common, ...args]);
      assert.equal(bad.status, 2, bad.stderr);
      assert.match(bad.stderr, re);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
