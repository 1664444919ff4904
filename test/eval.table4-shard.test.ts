/**
 * `guard eval --shard i/n` + `safekeep merge` against a scripted endpoint: the merged Table 4 and outputs equal a
 * single-process run (up to judge latencies, which are measured); a missing shard is refused by name.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { completion, startMockUpstream } from './helpers/guard-mock.ts';
import { needShared } from './helpers/shared.ts';
import { SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { runCli } from './helpers/cli.ts';

type Msg = { role: string; content: string };

test('guard eval: 3 shards + merge = one process (Table 4 counts, every output); a missing shard is named', async (t) => {
  const data = needShared(t, 'data', 'agentharm');
  if (!data) return;
  // judge: YES iff the request text has an odd length; agent: echoes a digest of its last message (deterministic)
  const up = await startMockUpstream((body) => {
    const msgs = body!.messages as Msg[];
    const last = msgs[msgs.length - 1]!.content;
    if (msgs[0]!.content === SAFETY_ASSESSOR_ROLE) return { json: completion(last.length % 2 ? 'YES' : 'NO') };
    return { json: completion(last.length % 3 ? `Done: ${last.length}` : "I'm sorry, but I can't help with that.") };
  });
  const dir = mkdtempSync(join(tmpdir(), 'shard-guard-'));
  t.after(async () => { await up.close(); rmSync(dir, { recursive: true, force: true }); });
  const base = ['guard', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', 'agentharm', '--limit', '4', '--data', data, '--no-cache'];
  const one = await runCli([...base, '--out', join(dir, 'one', 'guard')]);
  assert.equal(one.code, 0, one.stderr);
  for (const i of [0, 1, 2]) {
    const r = await runCli([...base, '--out', join(dir, 'three', 'guard'), '--shard', `${i}/3`]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`shard ${i}/3: \\d+ items`));
  }
  // without shard 1: refused, naming it
  const lost = await runCli([...base, '--out', join(dir, 'lost', 'guard'), '--shard', '0/3']);
  assert.equal(lost.code, 0, lost.stderr);
  const m0 = await runCli(['merge', join(dir, 'lost')]);
  assert.equal(m0.code, 2);
  assert.match(m0.stderr, /missing shards: 1\/3 \(not started\), 2\/3 \(not started\)/);

  const m = await runCli(['merge', join(dir, 'three')]);
  assert.equal(m.code, 0, m.stderr);
  const strip = (p: string): unknown[] => readFileSync(p, 'utf8').trim().split('\n').map((l) => {
    // latencies are measured, not reproduced
    const { judgeLatencyMs: _l, agentMs: _a, probeMs: _p, guardMs: _g, ...rest } = JSON.parse(l) as Record<string, unknown>;
    return rest;
  });
  const outputs = strip(join(dir, 'one', 'guard', 'outputs-agentharm.jsonl'));
  assert.equal(outputs.length, 4 * 8);
  assert.deepEqual(strip(join(dir, 'three', 'guard', 'outputs-agentharm.jsonl')), outputs);
  const counts = (p: string): unknown => (JSON.parse(readFileSync(p, 'utf8')) as { methods: { method: string; metrics: unknown; n: number; flagged: number }[] })
    .methods.map((x) => [x.method, x.metrics, x.n, x.flagged]);
  assert.deepEqual(counts(join(dir, 'three', 'guard', 'table4-agentharm.json')), counts(join(dir, 'one', 'guard', 'table4-agentharm.json')));
});
