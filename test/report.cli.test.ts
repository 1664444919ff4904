import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { validateResults } from '../src/report/results-file.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { repoRoot } from './helpers/shared.ts';
import { syntheticResults } from './helpers/report-results.ts';

function cli(...args: string[]) {
  return spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'report', ...args], { encoding: 'utf8', cwd: repoRoot });
}

test('safekeep report: from a results file to tables, figures and report.html', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-cli-report-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const res = syntheticResults();
  writeFileSync(join(dir, 'results.json'), JSON.stringify(res));
  const r = cli('--results', join(dir, 'results.json'), '--out', join(dir, 'out'));
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^7 tables, 7 figures; report at /);
  assert.ok(r.stdout.includes(`synthetic-planted (SYNTHETIC): ℓ* = ${res.lStar.layer} of ${res.layers - 1}`));
  const full = res.table1.find((x) => x.config === 'agent-full')!;
  assert.ok(r.stdout.includes(`+ tools (full agent) ${full.cross.auroc.toFixed(3)} [${full.cross.lo.toFixed(3)}, ${full.cross.hi.toFixed(3)}]`), r.stdout);
  assert.match(r.stderr, /report: figure 1\/7/);
  for (const f of ['report.html', 'report.md', 'tables/table1.md', 'figures/figure3-schema-cosine.png']) assert.ok(existsSync(join(dir, 'out', f)), f);
});

test('safekeep report: bad files are one-line user errors with exit 2', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-cli-bad-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const bad = join(dir, 'bad.json');
  const cases: [string, RegExp][] = [
    ['{not json', /not valid JSON/],
    [JSON.stringify({ version: 2 }), /version must be 1/],
  ];
  for (const [text, msg] of cases) {
    writeFileSync(bad, text);
    const r = cli('--results', bad, '--out', join(dir, 'out'));
    assert.equal(r.status, 2);
    assert.match(r.stderr, msg);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.ok(!/\n\s+at /.test(r.stderr), 'no stack');
  }
  const missing = cli('--results', join(dir, 'nope.json'), '--out', dir);
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /nope\.json: cannot read/);
  assert.equal(cli('--out', dir).status, 2);
});

test('validateResults names the field that is wrong', () => {
  const res = syntheticResults();
  const broken = JSON.parse(JSON.stringify(res));
  broken.curves[2].perLayer.pop();
  assert.throws(() => validateResults(broken, 'r.json'), (e) => e instanceof SafekeepError && e.message === `r.json: curves[2].perLayer must have ${res.layers} entries`);
  const steer = JSON.parse(JSON.stringify(res));
  steer.steering[0].rows[1].counts.valid += 1;
  assert.throws(() => validateResults(steer, 'r.json'), /steering\[0\]\.rows\[1\] counts add up to 41, n is 40/);
  assert.deepEqual(validateResults(JSON.parse(JSON.stringify(res))), res);
});
