/**
 * `s3 eval --guard-model / --guard-endpoint`: the guard agent is a different model. Every guard call (guard agent,
 * judge, llm checks) goes to the guard's endpoint and model, every agent call (turns, refusal prefill) to the
 * agent's; both models are recorded in the results. The --no-filter / --no-guidance flags reach every configuration.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { S3_CHECK_ROLE } from '../src/s3/checks/llm.ts';
import { S3_REWRITE_ROLE } from '../src/s3/rewrite.ts';
import { GUARD_AGENT_ROLE } from '../src/s3/guard-agent.ts';
import { startMockUpstream } from './helpers/guard-mock.ts';
import { s3Data } from './helpers/s3-data.ts';
import { s3Script } from './helpers/s3-mock.ts';
import { repoRoot } from './helpers/shared.ts';

const fixtures = s3Data();
const data = ['--injecagent', fixtures.injecagent, '--agentharm', fixtures.agentharm, '--settings', 'base'];
let root = '';
before(() => { root = mkdtempSync(join(tmpdir(), 'safekeep-s3-guard-')); });
after(() => rmSync(root, { recursive: true, force: true }));

function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 's3', 'eval', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, OPENAI_API_KEY: '' } });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

const GUARD_ROLES = new Set([GUARD_AGENT_ROLE, SAFETY_ASSESSOR_ROLE, S3_CHECK_ROLE, S3_REWRITE_ROLE]);
type Body = { model?: string; messages?: { content: string }[] } | null;
const isGuard = (b: Body) => GUARD_ROLES.has(b?.messages?.[0]?.content ?? '');

test('s3 eval --guard-endpoint/--guard-model: guard calls to the guard model, agent calls to the agent model, both recorded', async (t) => {
  const agent = await startMockUpstream(s3Script);
  const guard = await startMockUpstream(s3Script);
  t.after(async () => { await agent.close(); await guard.close(); });
  const out = join(root, 'two');
  const r = await cli(['--endpoint', agent.url, '--endpoint-model', 'agent-m', '--guard-endpoint', guard.url, '--guard-model', 'guard-m', '--bench', 'mixed', ...data, '--configs', 'none,full', '--out', out, '--no-cache']);
  assert.equal(r.code, 0, r.stderr);
  const a = agent.requests.map((q) => q.body as Body);
  const g = guard.requests.map((q) => q.body as Body);
  assert.ok(a.length > 0 && g.length > 0);
  assert.ok(a.every((b) => !isGuard(b) && b?.model === 'agent-m'), 'the agent endpoint saw only agent calls');
  assert.ok(g.every((b) => isGuard(b) && b?.model === 'guard-m'), 'the guard endpoint saw only guard calls');
  const j = JSON.parse(readFileSync(join(out, 's3-mixed.json'), 'utf8')) as { models: { agent: string; guard: string }; configs: { config: string; asr: { k: number }; benign: { k: number } }[] };
  assert.match(j.models.agent, /agent-m/);
  assert.match(j.models.guard, /guard-m/);
  // the scripted guard behaves identically at either endpoint: the same table as with one model
  assert.deepEqual(j.configs.map((c) => [c.config, c.asr.k, c.benign.k]), [['none', 6, 6], ['full', 0, 6]]);
  assert.match(r.stdout, /agent .*agent-m.*, guard .*guard-m/);
  // the rules' false-positive rate is printed with the table
  assert.match(r.stdout, /\*\*benign, all \(false-positive rate\)\*\* \| \d+ \| 0\.0 %/);
});

test('s3 eval --guard-model on the agent endpoint; --guard-model without any endpoint is one error; --no-filter/--no-guidance', async (t) => {
  const up = await startMockUpstream(s3Script);
  t.after(() => up.close());
  const out = join(root, 'one');
  const r = await cli(['--endpoint', up.url, '--endpoint-model', 'agent-m', '--guard-model', 'guard-m', '--bench', 'mixed', ...data, '--configs', 'full', '--out', out, '--no-cache', '--no-filter', '--no-guidance']);
  assert.equal(r.code, 0, r.stderr);
  const bodies = up.requests.map((q) => q.body as Body);
  assert.ok(bodies.filter(isGuard).every((b) => b?.model === 'guard-m') && bodies.filter((b) => !isGuard(b)).every((b) => b?.model === 'agent-m'));
  const j = JSON.parse(readFileSync(join(out, 's3-mixed.json'), 'utf8')) as { ablation: unknown; configs: { gic: { mean: number }; n: number }[] };
  assert.deepEqual(j.ablation, { filter: false, guidance: false });
  assert.equal(Math.round(j.configs[0]!.gic.mean * j.configs[0]!.n), 32, 'without the filter every stage with a skill invokes the guard');
  const lines = readFileSync(join(out, 'trajectories-mixed.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { messages: { role: string; content: string }[] });
  assert.ok(lines.every((l) => l.messages.every((m) => m.role !== 'tool' || !String(m.content).includes('[guard:'))), 'no guidance note');
  const bad = await cli(['--model', join(root, 'nope'), '--guard-model', 'g', '--bench', 'mixed', ...data]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--guard-model needs an endpoint/);
});
