/**
 * The evaluation runner (src/harness/runner.ts): N calls in flight with --concurrency N (against a scripted endpoint
 * that records how many requests it holds at once, through the real CLI of guard eval and s3 eval), results in item
 * order whatever the finishing order, and resume from the partial file of an interrupted run.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTask, type Task } from '../src/harness/runner.ts';
import { readEvalLog } from '../src/harness/log.ts';
import { completion, startMockUpstream, type MockAnswer } from './helpers/guard-mock.ts';
import { runCli, table4Script } from './helpers/harness-scenarios.ts';
import { s3Script } from './helpers/s3-mock.ts';
import { s3Data } from './helpers/s3-data.ts';
import { repoRoot } from './helpers/shared.ts';
import { SAFEPROMPT_SYSTEM, SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** An endpoint that holds every request `holdMs` and records the most it held at once. */
async function countingEndpoint(script: (b: Record<string, unknown> | null) => MockAnswer, holdMs: number) {
  let now = 0;
  let peak = 0;
  const up = await startMockUpstream(async (body) => {
    now++;
    peak = Math.max(peak, now);
    await sleep(holdMs);
    now--;
    return script(body);
  });
  return { up, peak: () => peak };
}

for (const n of [1, 3, 6]) {
  test(`guard eval --concurrency ${n}: ${n} requests in flight at the endpoint`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'harness-conc-'));
    const e = await countingEndpoint(table4Script({ assessor: SAFETY_ASSESSOR_ROLE, safeprompt: SAFEPROMPT_SYSTEM }, /\$5,000|election/), 60);
    t.after(async () => { await e.up.close(); rmSync(dir, { recursive: true, force: true }); });
    // 4 cases × 4 methods = 16 items, more than any n here
    const r = await runCli(repoRoot, ['guard', 'eval', '--endpoint', e.up.url, '--endpoint-model', 'mock', '--bench', 'agentharm', '--data', s3Data().agentharm,
      '--results', dir, '--no-cache', '--concurrency', String(n)]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(e.peak(), n);
  });
}

test('s3 eval --concurrency 4: 4 requests in flight at the endpoint', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'harness-conc-s3-'));
  const e = await countingEndpoint(s3Script, 40);
  t.after(async () => { await e.up.close(); rmSync(dir, { recursive: true, force: true }); });
  const r = await runCli(repoRoot, ['s3', 'eval', '--endpoint', e.up.url, '--endpoint-model', 'mock', '--bench', 'mixed', '--settings', 'base', '--configs', 'none,full',
    '--injecagent', s3Data().injecagent, '--agentharm', s3Data().agentharm, '--out', dir, '--no-cache', '--concurrency', '4']);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(e.peak(), 4);
  // the per-sample log: every agent and guard call of every item, each with what it saw
  const log = readEvalLog(join(dir, 'log-mixed.jsonl'));
  assert.equal(log.header.task, 's3-eval/mixed');
  assert.equal(log.samples.length, 2 * 6);
  const full = log.samples.filter((s) => s.solver === 'full');
  // the guard's calls (guard agent, LLM checks) sit in each guarded sample beside the agent's; the plain loop has none
  assert.ok(full.every((s) => s.calls.some((c) => c.purpose === 'judge')), 'guard calls are logged');
  assert.ok(log.samples.filter((s) => s.solver === 'none').every((s) => s.calls.length > 0 && s.calls.every((c) => c.purpose === 'agent')));
  // flagged at input (the AgentHarm pairs): the guard's calls come first, then input recovery rewrites the request
  // without its harmful part and the agent carries on with the rest (no refusal)
  const flagged = full.filter((s) => s.sample.startsWith('ah-'));
  assert.equal(flagged.length, 2);
  for (const s of flagged) {
    assert.equal(s.calls[0]!.purpose, 'judge', s.sample);
    assert.equal(s.calls.at(-1)!.purpose, 'agent', s.sample);
    assert.ok(!s.calls.some((c) => c.purpose === 'refusal'), s.sample);
  }
  assert.ok(full.every((s) => s.scores.some((x) => x.scorer === 's3-hazardous') && s.scores.some((x) => x.scorer === 's3-benign')));
});

/** A task whose solver finishes in reverse order (later items sooner) and counts its runs. */
function reverseTask(runs: number[]): Task<number, string> {
  return {
    name: 'toy',
    key: (i) => `item ${i}`,
    solve: async (i) => { runs.push(i); await sleep(5 * (10 - i)); return `r${i}`; },
    samples: (i, r) => [{ format: 'safekeep-sample', id: `item ${i}`, sample: String(i), solver: 'toy', calls: [], scores: [{ scorer: 'toy', value: r }], output: r, tokens: { prompt: 0, completion: 0 }, latencyMs: 0, row: r }],
  };
}

test('runTask: results and log lines in item order whatever the finishing order; resume skips what an interrupted run finished', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'harness-resume-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const items = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
  const runs: number[] = [];
  const all = await runTask(reverseTask(runs), items, { concurrency: 10 });
  assert.deepEqual(all.results, items.map((i) => `r${i}`));
  assert.deepEqual(all.samples.map((s) => s.id), items.map((i) => `item ${i}`));
  // an interrupted run: items 0..3 finished, then a line cut off mid-write
  const file = join(dir, 'log.partial');
  const done = all.samples.slice(0, 4).map((s, i) => JSON.stringify({ id: s.id, result: `r${i}`, samples: [s] }));
  writeFileSync(file, [JSON.stringify({ key: 'k1', task: 'toy' }), ...done, '{"id":"item 4","res'].join('\n'));
  runs.length = 0;
  const resumed = await runTask(reverseTask(runs), items, { concurrency: 3, resume: { file, key: 'k1' } });
  assert.equal(resumed.resumed, 4);
  assert.deepEqual(runs.sort(), [4, 5, 6, 7, 8, 9]);
  assert.deepEqual(resumed.results, all.results);
  assert.equal(readFileSync(file, 'utf8').trim().split('\n').length, 1 + 10);
  // another key (other data or options): nothing is reused
  runs.length = 0;
  const other = await runTask(reverseTask(runs), items, { resume: { file, key: 'k2' } });
  assert.equal(other.resumed, 0);
  assert.equal(runs.length, 10);
  assert.ok(existsSync(file));
});

test('guard eval writes its per-sample log and Table 4 is what the log says', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'harness-log-'));
  const up = await startMockUpstream(table4Script({ assessor: SAFETY_ASSESSOR_ROLE, safeprompt: SAFEPROMPT_SYSTEM }, /\$5,000|election/));
  t.after(async () => { await up.close(); rmSync(dir, { recursive: true, force: true }); });
  const r = await runCli(repoRoot, ['guard', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', 'agentharm', '--data', s3Data().agentharm, '--results', dir, '--no-cache']);
  assert.equal(r.code, 0, r.stderr);
  const log = readEvalLog<{ method: string; label: string; verdict: string | null }>(join(dir, 'mock', 'guard', 'log-agentharm.jsonl'));
  assert.equal(log.header.task, 'guard-eval/agentharm');
  assert.equal(log.samples.length, 16);
  const sk = log.samples.filter((s) => s.solver === 'safekeep');
  // the judge saw the prose view, answered YES on the two harmful requests; their refusal call is logged after it
  for (const s of sk) {
    const judge = s.calls.find((c) => c.purpose === 'judge')!;
    assert.ok(judge && !JSON.stringify(judge.messages).includes('"properties"'));
    const verdict = s.scores.find((x) => x.scorer === 'judge')!;
    assert.equal(verdict.explanation, judge.content);
    assert.deepEqual(s.calls.map((c) => c.purpose), verdict.value === 'yes' ? ['judge', 'refusal'] : ['judge', 'agent']);
  }
  assert.equal(sk.filter((s) => s.scores.find((x) => x.scorer === 'judge')!.value === 'yes').length, 2);
  const tbl = JSON.parse(readFileSync(join(dir, 'mock', 'guard', 'table4-agentharm.json'), 'utf8')) as { methods: { method: string; metrics: { refusal: { k: number } } }[] };
  const refusals = (m: string) => log.samples.filter((s) => s.solver === m && s.sample.startsWith('harmful') && s.scores[0]!.value === 'refusal').length;
  for (const m of tbl.methods) assert.equal(m.metrics.refusal.k, refusals(m.method), m.method);
  // the trajectory browser: a cell per (sample, method) opening that sample's trajectory, which holds its calls
  const page = readFileSync(join(dir, 'mock', 'guard', 'samples-agentharm.html'), 'utf8');
  const links = [...page.matchAll(/<td><a href="#(s-\d+)">([^<]*)<\/a><\/td>/g)];
  assert.equal(links.length, 16);
  for (const [, id] of links) assert.ok(page.includes(`<details id="${id}">`), id);
  const k = log.samples.findIndex((s) => s.solver === 'safekeep' && s.sample === 'harmful/1-1');
  const block = page.slice(page.indexOf(`<details id="s-${k}">`), page.indexOf('</details>', page.indexOf(`<details id="s-${k}">`)));
  assert.match(block, /call 1: judge/);
  assert.match(block, /call 2: refusal — prefix “I&#39;m sorry|call 2: refusal — prefix “I'm sorry/);
  void completion;
});

test('safekeep rescore: Table 4 from the per-sample logs with no model equals the run\'s own (AgentHarm and InjecAgent)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'harness-rescore-'));
  const up = await startMockUpstream(table4Script({ assessor: SAFETY_ASSESSOR_ROLE, safeprompt: SAFEPROMPT_SYSTEM }, /\$5,000|election/));
  t.after(async () => { rmSync(dir, { recursive: true, force: true }); });
  for (const [bench, data] of [['agentharm', s3Data().agentharm], ['injecagent', s3Data().injecagent]] as const) {
    const r = await runCli(repoRoot, ['guard', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', bench, ...(bench === 'injecagent' ? ['--injecagent-format', 'native'] : []), '--data', data, '--results', dir, '--no-cache']);
    assert.equal(r.code, 0, r.stderr);
  }
  await up.close(); // no model from here on: the endpoint is gone
  const guard = join(dir, 'mock', 'guard');
  const r = await runCli(repoRoot, ['rescore', guard]);
  assert.equal(r.code, 0, r.stderr);
  for (const bench of ['agentharm', 'injecagent']) {
    // the cost columns (judge calls, guard tokens, added latency) are the run's: rescore keeps them
    const counts = (p: string) => (JSON.parse(readFileSync(p, 'utf8')) as { methods: { method: string; metrics: unknown; n: number; flagged: number; unparseable: number; cost: unknown }[] })
      .methods.map((m) => [m.method, m.metrics, m.n, m.flagged, m.unparseable, m.cost]);
    assert.deepEqual(counts(join(guard, 'rescored', `table4-${bench}.json`)), counts(join(guard, `table4-${bench}.json`)), bench);
    const outputs = (p: string) => readFileSync(p, 'utf8').trim().split('\n').map((l) => { const { label, step1, step2, reasons } = JSON.parse(l) as Record<string, unknown>; return [label, step1, step2, reasons]; });
    assert.deepEqual(outputs(join(guard, 'rescored', `outputs-${bench}.jsonl`)), outputs(join(guard, `outputs-${bench}.jsonl`)), bench);
  }
  // the scores come from the logged replies: a reply edited into a refusal is rescored as one
  const logFile = join(guard, 'log-agentharm.jsonl');
  const lines = readFileSync(logFile, 'utf8').trim().split('\n');
  const k = lines.findIndex((l) => l.includes('"id":"base × harmful/1-1"'));
  const sample = JSON.parse(lines[k]!) as { calls: { purpose: string; content: string; toolCalls: unknown[] }[] };
  sample.calls = sample.calls.map((c) => (c.purpose === 'agent' ? { ...c, content: "I'm sorry, I cannot help with that.", toolCalls: [] } : c));
  lines[k] = JSON.stringify(sample);
  writeFileSync(logFile, lines.join('\n') + '\n');
  const again = await runCli(repoRoot, ['rescore', logFile, '--out', join(dir, 'edited')]);
  assert.equal(again.code, 0, again.stderr);
  const edited = JSON.parse(readFileSync(join(dir, 'edited', 'table4-agentharm.json'), 'utf8')) as { methods: { method: string; metrics: { refusal: { k: number; n: number } } }[] };
  assert.deepEqual(edited.methods.map((m) => [m.method, m.metrics.refusal.k]), [['base', 1], ['safejudge', 0], ['safeprompt', 2], ['safekeep', 2]]);
  const bad = await runCli(repoRoot, ['rescore', join(dir, 'nothing-here')]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /no such folder or log/);
});

test('guard eval --results ROOT like every other command; --out DIR still works with a deprecation note; both is refused', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'harness-flags-'));
  const up = await startMockUpstream(table4Script({ assessor: SAFETY_ASSESSOR_ROLE, safeprompt: SAFEPROMPT_SYSTEM }, /\$5,000|election/));
  t.after(async () => { await up.close(); rmSync(dir, { recursive: true, force: true }); });
  const base = ['guard', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', 'agentharm', '--data', s3Data().agentharm, '--methods', 'base'];
  const a = await runCli(repoRoot, [...base, '--results', join(dir, 'root')]);
  assert.equal(a.code, 0, a.stderr);
  assert.ok(existsSync(join(dir, 'root', 'mock', 'guard', 'table4-agentharm.md')));
  assert.doesNotMatch(a.stderr, /deprecated/);
  const b = await runCli(repoRoot, [...base, '--out', join(dir, 'old')]);
  assert.equal(b.code, 0, b.stderr);
  assert.ok(existsSync(join(dir, 'old', 'table4-agentharm.md')));
  assert.match(b.stderr, /guard eval: --out is deprecated \(every other command says --results\); use --results ROOT/);
  const c = await runCli(repoRoot, [...base, '--out', join(dir, 'x'), '--results', join(dir, 'y')]);
  assert.equal(c.code, 2);
  assert.match(c.stderr, /^safekeep: give --results ROOT .* or the deprecated --out DIR, not both\n$/);
});
