/**
 * `s3 eval --shard i/n` + `safekeep merge` against the scripted S³ endpoint on the fixture data: the merged tables,
 * trajectories and report section equal a single-process run (up to the measured latencies); the partition balances
 * estimated tokens; a missing shard is refused by name.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockUpstream } from './helpers/guard-mock.ts';
import { s3Script } from './helpers/s3-mock.ts';
import { repoRoot } from './helpers/shared.ts';
import { s3Data } from './helpers/s3-data.ts';
import { s3Tasks } from '../src/eval/s3/tasks.ts';
import { parseConfigs, s3Items } from '../src/eval/s3/eval.ts';
import { itemTokens } from '../src/eval/s3/shard.ts';
import { loadSkills } from '../src/s3/skill-file.ts';
import { partitionByCost } from '../src/util/shard.ts';
import { runCli } from './helpers/cli.ts';

const fixtures = s3Data();
const data = ['--injecagent', fixtures.injecagent, '--agentharm', fixtures.agentharm];

/** Drops every measured time (latencyMs, in trajectories, decisions, guard-agent calls and the summaries). */
function stripTiming(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(stripTiming);
  if (x && typeof x === 'object') return Object.fromEntries(Object.entries(x).filter(([k]) => !/latency/i.test(k)).map(([k, v]) => [k, stripTiming(v)]));
  return x;
}
const jsonl = (p: string): unknown[] => readFileSync(p, 'utf8').trim().split('\n').map((l) => stripTiming(JSON.parse(l)));
const json = (p: string): unknown => stripTiming(JSON.parse(readFileSync(p, 'utf8')));

test('s3 eval items are balanced on estimated tokens: guarded configurations cost more than none', () => {
  const skills = loadSkills([join(repoRoot, 'skills')]);
  const tasks = s3Tasks('mixed', { injecagent: fixtures.injecagent, agentharm: fixtures.agentharm });
  const items = s3Items(tasks, parseConfigs('none,single:tool-rules,full', skills, true));
  assert.equal(items.length, 3 * 10);
  const prompt = (i: number) => Math.ceil(JSON.stringify({ messages: items[i]!.task.messages, tools: items[i]!.task.tools }).length / 4);
  // none: one agent turn; tool-rules: + the guard agent's copy; full: + the guard agent and the three llm skills
  // (safekeep-judge, rule-memory, parse-data; tool-rules and output-leak are rules)
  assert.equal(itemTokens(items[0]!, 256), prompt(0) + 256);
  assert.equal(itemTokens(items[10]!, 256), prompt(10) + 256 + prompt(10));
  assert.equal(itemTokens(items[20]!, 256), prompt(20) + 256 + 4 * prompt(20));
  const costs = items.map((it) => itemTokens(it, 256));
  const owner = partitionByCost(costs, 3);
  const total = costs.reduce((a, b) => a + b, 0);
  const per = [0, 1, 2].map((s) => costs.filter((_, k) => owner[k] === s).reduce((a, b) => a + b, 0));
  // contiguous, and no shard further from T/3 than the largest item
  assert.deepEqual([...owner].sort((a, b) => a - b), owner);
  for (const p of per) assert.ok(Math.abs(p - total / 3) <= Math.max(...costs), `${per} vs ${total / 3}`);
  // by count the none items (the cheapest) would fill the first shard; by tokens it takes more of them
  assert.ok(owner.filter((s) => s === 0).length > 10, String(owner));
});

test('s3 eval: 3 shards + merge = one process (json table, trajectories, report section); a missing shard is named', async (t) => {
  const up = await startMockUpstream(s3Script);
  const dir = mkdtempSync(join(tmpdir(), 'shard-s3-'));
  t.after(async () => { await up.close(); rmSync(dir, { recursive: true, force: true }); });
  const base = ['s3', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', 'mixed', ...data, '--configs', 'none,single:parse-data,no-recovery,full', '--no-cache'];
  const one = await runCli([...base, '--results', join(dir, 'one')]);
  assert.equal(one.code, 0, one.stderr);
  for (const i of [0, 1, 2]) {
    const r = await runCli([...base, '--results', join(dir, 'three'), '--shard', `${i}/3`]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`shard ${i}/3: \\d+ items \\(~\\d+ tokens\\)`));
  }
  // shards write only their part files: no tables, no report before the merge
  assert.deepEqual(readdirSync(join(dir, 'three', 'mock')).sort(), ['shards']);
  const parts = [0, 1, 2].map((i) => readFileSync(join(dir, 'three', 'mock', 'shards', 's3-eval', `shard-${i}-of-3`, 'samples-mixed.jsonl'), 'utf8').trim().split('\n').length);
  assert.equal(parts.reduce((a, b) => a + b, 0), 4 * 10);
  assert.ok(parts.every((n) => n > 0), String(parts));

  const lost = await runCli([...base, '--results', join(dir, 'lost'), '--shard', '2/3']);
  assert.equal(lost.code, 0, lost.stderr);
  const m0 = await runCli(['merge', join(dir, 'lost', 'mock')]);
  assert.equal(m0.code, 2);
  assert.match(m0.stderr, /missing shards: 0\/3 \(not started\), 1\/3 \(not started\)/);

  const m = await runCli(['merge', join(dir, 'three', 'mock')]);
  assert.equal(m.code, 0, m.stderr);
  assert.match(m.stdout, /s3-eval: 3 shards → .*s3-mixed\.md/);
  const trajectories = jsonl(join(dir, 'one', 'mock', 's3', 'trajectories-mixed.jsonl'));
  assert.equal(trajectories.length, 4 * 10);
  assert.deepEqual(jsonl(join(dir, 'three', 'mock', 's3', 'trajectories-mixed.jsonl')), trajectories);
  const table = json(join(dir, 'one', 'mock', 's3', 's3-mixed.json')) as { configs: { config: string; asr: { k: number }; benign: { k: number } }[] };
  // the pinned numbers of the base setting, twice (the mock treats the enhanced setting alike); full completes every
  // benign task, the mixed tasks' benign halves included, since input recovery drops only their harmful part
  assert.deepEqual(table.configs.map((c) => [c.config, c.asr.k, c.benign.k]), [['none', 10, 10], ['single:parse-data', 2, 10], ['no-recovery', 0, 0], ['full', 0, 10]]);
  assert.deepEqual(json(join(dir, 'three', 'mock', 's3', 's3-mixed.json')), table);
  // the Markdown table too, without its measured column (latency per task, the 8th)
  const md = (p: string) => readFileSync(p, 'utf8').split('\n').map((l) => (l.startsWith('| ') ? l.split(' | ').filter((_, k) => k !== 7).join(' | ') : l));
  assert.deepEqual(md(join(dir, 'three', 'mock', 's3', 's3-mixed.md')), md(join(dir, 'one', 'mock', 's3', 's3-mixed.md')));
  // the report section: the same rows in results.json, the table and figure in report.html
  const section = (p: string) => (json(p) as { s3: unknown }).s3;
  assert.deepEqual(section(join(dir, 'three', 'mock', 'results.json')), section(join(dir, 'one', 'mock', 'results.json')));
  const html = readFileSync(join(dir, 'three', 'mock', 'report.html'), 'utf8');
  assert.match(html, /id="table-s3-mixed"/);
  assert.match(html, /data-name="s3-mixed"/);
  assert.match(readFileSync(join(dir, 'three', 'mock', 's3', 's3-mixed.svg'), 'utf8'), /^<svg/);
});
