/**
 * `guard eval --model` on the planted model with every method, probe-cascade and probe-steer included, on the
 * miniature AgentHarm set: Table 4 carries the cost columns for every method (judge calls, guard tokens, added
 * latency p50 / p95) and the cascade's band counts, each recomputed here from the per-request rows; the cascade
 * reaches the judge exactly for the requests whose score falls inside its band (the band placed between the scores a
 * first run measured, so every side is exercised); `rescore` keeps the cost columns.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { writePlantedProbe } from './helpers/planted-probe.ts';
import { s3Data } from './helpers/s3-data.ts';
import { repoRoot } from './helpers/shared.ts';

type Row = { caseId: string; method: string; verdict: string | null; probeScore: number | null; probeBand?: string; steered?: boolean; blocked: boolean; judgeCalls: number; guardTokens: number; guardMs: number; judgeTokens: number | null };
type Summary = { method: string; n: number; cost: { judgeCallsPerRequest: number; guardTokensPerRequest: number; addedMs: { n: number; p50: number; p95: number } }; bands?: { run: number; judge: number; refuse: number }; steered?: number };

test('guard eval: probe-cascade and probe-steer end to end, cost columns for every method, kept by rescore', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-eval-cascade-'));
  const env = { ...process.env, SAFEKEEP_CACHE: join(dir, '.cache'), SAFEKEEP_QUIET: '1' };
  const cli = (args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { env, encoding: 'utf8' });
  const rows = (out: string) => readFileSync(join(out, 'outputs-agentharm.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Row);
  try {
    const model = join(dir, 'planted');
    const truth = await writePlantedModel(model, { lexiconPairs: (await loadPairSet('pairs')).pairs });
    const evalArgs = ['guard', 'eval', '--model', model, '--bench', 'agentharm', '--data', s3Data().agentharm, '--max-tokens', '12', '--unparseable', 'safe'];
    // a first run measures each request's probe score (w = r at ℓ = 2)
    const { probeJson: first } = await writePlantedProbe(join(dir, 'p0'), model, truth.r, { harmful: 1, benign: 1 });
    const r0 = cli([...evalArgs, '--methods', 'refusal-probe', '--probe', first, '--out', join(dir, 'g0')]);
    assert.equal(r0.status, 0, r0.stderr);
    const scores = [...new Set(rows(join(dir, 'g0')).map((r) => r.probeScore!))].sort((a, b) => a - b);
    assert.ok(scores.length >= 3, `${scores.length} distinct scores`);
    const mid = (k: number) => (scores[k]! + scores[k + 1]!) / 2;
    // band: the lowest score below it, the highest above it; the steering flag between the two highest
    const low = mid(0);
    const high = mid(scores.length - 2);
    const t = mid(scores.length - 2);
    const { probeJson } = await writePlantedProbe(join(dir, 'p1'), model, truth.r, { harmful: t, benign: t }, { low, high, alpha: 2 });

    const out = join(dir, 'guard');
    const methods = ['base', 'safejudge', 'safeprompt', 'safekeep', 'refusal-probe', 'probe-cascade', 'probe-steer'];
    // --no-cache: every method's calls computed (none answered from another method's identical call)
    const r = cli([...evalArgs, '--methods', methods.join(','), '--probe', probeJson, '--out', out, '--no-cache']);
    assert.equal(r.status, 0, r.stderr);
    const got = rows(out);
    const table = JSON.parse(readFileSync(join(out, 'table4-agentharm.json'), 'utf8')) as { methods: Summary[] };
    assert.deepEqual(table.methods.map((m) => m.method), methods);
    for (const m of table.methods) {
      const mine = got.filter((x) => x.method === m.method);
      assert.equal(m.cost.judgeCallsPerRequest, mine.filter((x) => x.verdict !== null).length / mine.length, m.method);
      assert.equal(m.cost.judgeCallsPerRequest, mine.reduce((a, x) => a + x.judgeCalls, 0) / mine.length, m.method);
      assert.ok(Math.abs(m.cost.guardTokensPerRequest - mine.reduce((a, x) => a + x.guardTokens, 0) / mine.length) < 1e-6, m.method);
      assert.equal(m.cost.addedMs.n, mine.length);
    }
    const cost = (method: string) => table.methods.find((m) => m.method === method)!.cost;
    assert.equal(cost('base').judgeCallsPerRequest, 0);
    assert.equal(cost('safekeep').judgeCallsPerRequest, 1);
    // the cascade: judge exactly inside the band
    const casc = got.filter((x) => x.method === 'probe-cascade');
    for (const x of casc) {
      const band = x.probeScore! > high ? 'refuse' : x.probeScore! < low ? 'run' : 'judge';
      assert.equal(x.probeBand, band, x.caseId);
      assert.equal(x.judgeCalls, band === 'judge' ? 1 : 0, x.caseId);
      assert.equal(x.blocked, band === 'refuse' || (band === 'judge' && x.verdict === 'yes'), x.caseId);
    }
    const bands = table.methods.find((m) => m.method === 'probe-cascade')!.bands!;
    assert.deepEqual(bands, { run: casc.filter((x) => x.probeBand === 'run').length, judge: casc.filter((x) => x.probeBand === 'judge').length, refuse: casc.filter((x) => x.probeBand === 'refuse').length });
    assert.ok(bands.run > 0 && bands.refuse > 0, JSON.stringify(bands));
    assert.ok(cost('probe-cascade').judgeCallsPerRequest < cost('safekeep').judgeCallsPerRequest);
    const steer = got.filter((x) => x.method === 'probe-steer');
    for (const x of steer) assert.equal(x.steered === true, x.probeScore! > t, x.caseId);
    assert.equal((table.methods.find((m) => m.method === 'probe-steer') as unknown as { flagged: number }).flagged, steer.filter((x) => x.steered).length);
    assert.equal(table.methods.find((m) => m.method === 'probe-steer')!.steered, steer.filter((x) => x.steered).length);
    const md = readFileSync(join(out, 'table4-agentharm.md'), 'utf8');
    assert.match(md, /\| Judge calls \/ request \| Guard tokens \/ request \| Added ms p50 \/ p95 \|/);
    // a probe method's flagged count is over all its requests (not over the judged ones)
    assert.match(md, new RegExp(`\\| probe-cascade \\|.*\\| ${bands.judge + bands.refuse - casc.filter((x) => x.probeBand === 'judge' && !x.blocked).length}/${casc.length} \\|`));
    assert.match(md, new RegExp(`probe-cascade: the probe let ${bands.run} of ${casc.length} requests run unjudged, sent ${bands.judge} to the judge and refused ${bands.refuse} itself`));
    assert.match(readFileSync(join(out, 'table4.md'), 'utf8'), /AgentHarm Judge calls \/ request/);
    // which kind of model produced the numbers, and the band and α the probe methods read
    assert.match(md, /\nModel: the planted synthetic model/);
    assert.match(md, new RegExp(`\\nProbe: .*cascade band \\[${low.toPrecision(4).replace('.', '\\.').replace('-', '\\-')}, .*steering α = 2\\.000 at ℓ = 2`));
    assert.match(readFileSync(join(out, 'table4-agentharm.csv'), 'utf8').split('\n')[0]!, /,judge_calls_per_request,guard_tokens_per_request,added_ms_p50,added_ms_p95$/);

    // rescore: no model, the same cost columns
    const rs = cli(['rescore', out]);
    assert.equal(rs.status, 0, rs.stderr);
    const again = JSON.parse(readFileSync(join(out, 'rescored', 'table4-agentharm.json'), 'utf8')) as { methods: Summary[] };
    assert.deepEqual(again.methods.map((m) => [m.method, m.cost, m.bands, m.steered]), table.methods.map((m) => [m.method, m.cost, m.bands, m.steered]));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
