/**
 * Pipeline flags are refused up front, with the reason, before any model work: `--limit` must be a positive integer,
 * the pairs after `--limit`/`--quick` must feed the run's stages (≥ 5 extraction groups for ℓ* by 5-fold CV, ≥ 1
 * evaluation group; the refusal names the smallest --limit that works, checked here against the split itself), and
 * an `--alphas` item must be a number (`x` alone was Number('') = 0, a second α = 0 row). The model folder is empty, so
 * a check that let the run through would fail later on the missing config.json instead.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run as reproduce } from '../src/cli/commands/reproduce.ts';
import { run as steer } from '../src/cli/commands/steer.ts';
import { numberValue, parseArgs } from '../src/cli/args.ts';
import { parseAlphas } from '../src/experiments/steer/conditions.ts';
import { loadPairSet } from '../src/data/load.ts';
import { splitGroupCounts, splitPairs } from '../src/data/split.ts';
import { stratifiedSubset } from '../src/experiments/extract.ts';

function scratch(t: { after: (f: () => void) => void }): { model: string; results: string } {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-limits-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'empty-model'));
  return { model: join(dir, 'empty-model'), results: join(dir, 'results') };
}

test('--limit: zero, negative, fractional and empty values are refused by name', async (t) => {
  const { model, results } = scratch(t);
  for (const [v, msg] of [['-3', /--limit must be a positive integer, got -3/], ['0', /positive integer, got 0/], ['2.5', /positive integer, got 2.5/], ['', /--limit must be a number, got ''/]] as const) {
    await assert.rejects(reproduce(['--model', model, '--results', results, `--limit=${v}`]), msg);
    await assert.rejects(steer(['--model', model, '--results', results, `--limit=${v}`]), msg);
  }
  assert.ok(!existsSync(results), 'nothing written');
});

test('too few pairs for 5-fold CV: one line with the split\'s numbers and the smallest --limit that works', async (t) => {
  const { model, results } = scratch(t);
  // the expected numbers from the split itself
  const set = await loadPairSet('pairs');
  const counts = (n: number) => { const s = stratifiedSubset(set.pairs, n); return splitGroupCounts(s, splitPairs(s, 0)); };
  const six = counts(6);
  assert.ok(six.extraction < 5);
  let smallest = 7;
  while (counts(smallest).extraction < 5 || counts(smallest).evaluation < 1) smallest++;
  const expected = new RegExp(`^6 pairs from 'pairs' \\(--limit 6\\): the 7:3 group split \\(seed 0\\) leaves ${six.extraction} extraction and ${six.evaluation} evaluation groups; choosing ℓ\\* by 5-fold cross-validation needs ≥ 5 extraction groups and ≥ 1 evaluation group — use --limit ${smallest} or more$`);
  await assert.rejects(steer(['--model', model, '--results', results, '--limit', '6']), { message: expected });
  await assert.rejects(reproduce(['--model', model, '--results', results, '--limit', '6']), { message: expected });
  // an explicit layer needs no CV: 6 pairs pass the check and the run goes on to the (empty) model folder
  await assert.rejects(steer(['--model', model, '--results', results, '--limit', '6', '--layer', '3']), /config\.json/);
  // one pair leaves no evaluation group even for an explicit layer
  await assert.rejects(steer(['--model', model, '--results', results, '--limit', '1', '--layer', '3']), /leaves 1 extraction and 0 evaluation groups; a direction from the extraction split needs/);
  // enough pairs: past the check to the model
  await assert.rejects(steer(['--model', model, '--results', results, '--limit', String(smallest)]), /config\.json/);
  assert.ok(!existsSync(results), 'nothing written');
});

test('--alphas: an item that is not a number is refused (x alone, empty items, garbage); 0.5x and 4 parse', async (t) => {
  for (const bad of ['0,x', '0,,4', '0,four', 'x', '0,1y']) assert.throws(() => parseAlphas(bad), /--alphas: '.*' is not a number \(use 4 or 0\.5x\)/, bad);
  assert.deepEqual(parseAlphas('0, 4,0.5x'), [{ kind: 'absolute', value: 0 }, { kind: 'absolute', value: 4 }, { kind: 'relative', value: 0.5 }]);
  const { model, results } = scratch(t);
  await assert.rejects(steer(['--model', model, '--results', results, '--alphas', '0,x']), /--alphas: 'x' is not a number/);
});

test('numberValue: an empty or blank value is not 0', () => {
  const table = { values: ['n'] };
  assert.throws(() => numberValue(parseArgs(['--n='], table), 'n'), /--n must be a number, got ''/);
  assert.throws(() => numberValue(parseArgs(['--n', ' '], table), 'n'), /got ' '/);
  assert.equal(numberValue(parseArgs(['--n', '3'], table), 'n'), 3);
});
