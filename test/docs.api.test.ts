/**
 * docs/api.md's examples run as written (imports of 'safekeep' pointed at src/index.ts, run under tsx), so the page
 * cannot rot; the activation-patching example prints the logit differences the Float64 oracle computes, the engine
 * example a steering shift of exactly −alpha along r̂.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { repoRoot } from '../src/data/locate.ts';
import { apiExamples, oraclePatching, parsePatchingLine } from './helpers/docs-examples.ts';

test('docs/api.md: every ts example runs; the patching example prints the oracle figures', async () => {
  const examples = apiExamples();
  assert.ok(examples.length >= 1, 'docs/api.md has runnable examples');
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-docs-'));
  try {
    let patching = null;
    let steering: RegExpExecArray | null = null;
    let guarded: RegExpExecArray | null = null;
    let sae: RegExpExecArray | null = null;
    let saeAblated: RegExpExecArray | null = null;
    let saeGenerated: RegExpExecArray | null = null;
    for (const [i, code] of examples.entries()) {
      const file = join(tmp, `example-${i}.mts`);
      writeFileSync(file, code.replaceAll("from 'safekeep'", `from '${pathToFileURL(join(repoRoot, 'src', 'index.ts')).href}'`));
      const out = execFileSync(process.execPath, ['--import', 'tsx', file], { cwd: repoRoot, encoding: 'utf8', timeout: 120_000 });
      patching ??= parsePatchingLine(out);
      steering ??= /^projection on r at hidden\[1\]: (\S+) steered: (\S+)/m.exec(out);
      guarded ??= /^verdict (\S+) blocked (\S+) judge calls (\d+) \| (.*)$/m.exec(out);
      sae ??= /^refusal direction = feature (\d+) \(cosine (\S+)\)$/m.exec(out);
      saeAblated ??= /^sorry − \{ logit: (\S+) with the refusal feature ablated: (\S+)$/m.exec(out);
      saeGenerated ??= /^generated (\S+) → with the refusal feature ablated (\S+)$/m.exec(out);
    }
    // steering subtracts 4·r̂ from hidden[1]: the projection on r̂ moves by exactly −4
    assert.ok(steering, 'the engine example prints its projections');
    assert.ok(Math.abs(Number(steering[1]) - Number(steering[2]) - 4) <= 2e-3, `projection ${steering[1]} → ${steering[2]}`);
    assert.ok(patching, 'the patching example prints its line');
    // the guard example: a YES from the judge is SafeKeep's refusal, one judge call, the refusal prefix as the answer
    assert.ok(guarded, 'the guard example prints its line');
    assert.deepEqual(guarded.slice(1, 4), ['yes', 'true', '1']);
    assert.match(guarded[4]!, /^I'm sorry/);
    // the planted dictionary: feature 0 is r; ablating it (error term kept) takes the refusal away
    assert.ok(sae && saeAblated, 'the SAE example prints its lines');
    assert.deepEqual([sae[1], sae[2]], ['0', '1.0000']);
    assert.ok(Number(saeAblated[1]) > 0 && Number(saeAblated[2]) < 0, `sorry − { ${saeAblated[1]} → ${saeAblated[2]}`);
    // and in generation: the harmful request's first token is "sorry", with feature 0 ablated "{"
    assert.ok(saeGenerated, 'the SAE example prints its generation');
    assert.deepEqual([saeGenerated[1], saeGenerated[2]], ['sorry', '{']);
    const ref = await oraclePatching(join(tmp, 'planted'));
    for (const k of ['clean', 'corrupted', 'patched'] as const) {
      assert.ok(Math.abs(patching[k] - ref[k]) <= 1.5e-4, `${k}: printed ${patching[k]}, oracle ${ref[k]}`);
    }
    assert.ok(Math.abs(patching.patched - patching.clean) < 1e-3 && patching.corrupted < 0 && patching.clean > 0, 'the patch restores the clean difference');
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('README: the library example (activation patching on the planted model) runs and prints the oracle figures', async () => {
  const [code, ...more] = apiExamples('README.md');
  assert.ok(code !== undefined && more.length === 0, 'the README has exactly one ts example');
  assert.ok(code.trim().split('\n').length <= 25, 'it stays a short example');
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-readme-'));
  try {
    const file = join(tmp, 'readme.mts');
    writeFileSync(file, code.replaceAll("from 'safekeep'", `from '${pathToFileURL(join(repoRoot, 'src', 'index.ts')).href}'`));
    const out = execFileSync(process.execPath, ['--import', 'tsx', file], { cwd: repoRoot, encoding: 'utf8', timeout: 120_000 });
    const printed = parsePatchingLine(out);
    assert.ok(printed, `the example prints its line:\n${out}`);
    assert.match(out, /^cached \d+ pattern \d+x\d+x\d+$/m);
    const ref = await oraclePatching(join(tmp, 'planted'));
    for (const k of ['clean', 'corrupted', 'patched'] as const) {
      assert.ok(Math.abs(printed[k] - ref[k]) <= 1.5e-4, `${k}: printed ${printed[k]}, oracle ${ref[k]}`);
    }
    // the figures the README quotes are the ones it prints
    const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
    const quoted = /`clean (\S+) corrupted (\S+) patched (\S+)`/.exec(readme);
    assert.ok(quoted, 'the README quotes the printed line');
    assert.deepEqual(quoted.slice(1).map(Number), [printed.clean, printed.corrupted, printed.patched]);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
