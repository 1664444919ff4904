/**
 * The agent's sampling at the chat layer (src/chat/sampling.ts): an endpoint gets OpenAI's fields and vLLM's extras;
 * without settings the body is exactly the greedy body it always was (temperature 0, so cached answers still match);
 * `guard eval --temperature …` samples the agent's calls only — its judge stays greedy — on an endpoint and through
 * the CLI, and a bad flag stops it before any request.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { agentHarmCases, AGENT_SYSTEM, type GuardCase } from '../src/benchmarks/cases.ts';
import { OpenAIBackend } from '../src/chat/openai.ts';
import { samplingBody, withAgentSampling } from '../src/chat/sampling.ts';
import { runGuardEval } from '../src/eval/table4/eval.ts';
import { SAFETY_ASSESSOR_ROLE } from '../src/guard/prompts.ts';
import { runCli } from './helpers/cli.ts';
import { completion, startMockUpstream, type MockAnswer } from './helpers/guard-mock.ts';
import { needShared } from './helpers/shared.ts';

const settings = { temperature: 0.7, topP: 0.9, topK: 40, minP: 0.05, repetitionPenalty: 1.1, seed: 5 };

test('samplingBody: greedy is temperature 0; every setting maps to its OpenAI / vLLM field', () => {
  assert.deepEqual(samplingBody(undefined), { temperature: 0 });
  assert.deepEqual(samplingBody({ ...settings, frequencyPenalty: 0.5, presencePenalty: -0.5, logitBias: { 7: -100 } }), {
    temperature: 0.7, top_p: 0.9, top_k: 40, min_p: 0.05, repetition_penalty: 1.1, frequency_penalty: 0.5, presence_penalty: -0.5, logit_bias: { 7: -100 }, seed: 5,
  });
  const b = new OpenAIBackend({ baseUrl: 'http://127.0.0.1:9/v1', model: 'm' });
  const call = { messages: [{ role: 'user' as const, content: 'hi' }], maxTokens: 4, purpose: 'agent' as const };
  // the greedy body, byte for byte as before sampling existed (the response cache is keyed by it)
  assert.equal(JSON.stringify(b.body(call)), JSON.stringify({ model: 'm', messages: call.messages, max_tokens: 4, temperature: 0 }));
  assert.deepEqual(b.body({ ...call, sampling: { temperature: 1, seed: 3 } }), { model: 'm', messages: call.messages, max_tokens: 4, temperature: 1, seed: 3 });
});

/** the scripted endpoint: the judge says NO, the agent answers in text */
const answer = (body: Record<string, unknown> | null): MockAnswer => {
  const msgs = body!.messages as { content: string }[];
  return { json: completion(msgs[0]!.content === SAFETY_ASSESSOR_ROLE ? 'NO' : 'Done.') };
};
const isJudge = (body: Record<string, unknown> | null) => (body!.messages as { content: string }[])[0]!.content === SAFETY_ASSESSOR_ROLE;

test('withAgentSampling: agent calls carry the sampling, judge calls stay greedy', async (t) => {
  const up = await startMockUpstream(answer);
  t.after(() => up.close());
  const backend = withAgentSampling(new OpenAIBackend({ baseUrl: up.url, model: 'mock', retries: 0 }), settings);
  const cases: GuardCase[] = [{
    bench: 'agentharm', id: 'harmful/1', kind: 'harmful', category: 'x', targetFunctions: [],
    request: { messages: [{ role: 'system', content: AGENT_SYSTEM }, { role: 'user', content: 'Do it.' }], tools: [] },
  }];
  await runGuardEval(cases, { methods: ['base', 'safejudge'], backend, concurrency: 1 });
  const agent = up.requests.filter((r) => !isJudge(r.body)), judge = up.requests.filter((r) => isJudge(r.body));
  assert.ok(agent.length >= 1 && judge.length >= 1);
  for (const r of agent) assert.deepEqual([r.body!.temperature, r.body!.top_p, r.body!.top_k, r.body!.min_p, r.body!.repetition_penalty, r.body!.seed], [0.7, 0.9, 40, 0.05, 1.1, 5]);
  for (const r of judge) {
    assert.equal(r.body!.temperature, 0);
    assert.equal(r.body!.seed, undefined);
  }
});

test('guard eval --temperature --seed --top-p (CLI, an endpoint): the agent\'s requests carry them, the judge\'s do not', async (t) => {
  const dir = needShared(t, 'data', 'agentharm');
  if (!dir) return;
  assert.ok(agentHarmCases(dir, 1).length > 0);
  const up = await startMockUpstream(answer);
  const out = mkdtempSync(join(tmpdir(), 'safekeep-sampled-guard-'));
  t.after(async () => { await up.close(); rmSync(out, { recursive: true, force: true }); });
  const r = await runCli(['guard', 'eval', '--endpoint', up.url, '--endpoint-model', 'mock', '--bench', 'agentharm', '--limit', '1', '--data', dir, '--out', out,
    '--methods', 'base,safejudge', '--temperature', '0.7', '--seed', '5', '--top-p', '0.9', '--no-cache']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /guard eval: agent sampled: temperature 0\.7, top-p 0\.9, seed 5/);
  const agent = up.requests.filter((x) => !isJudge(x.body)), judge = up.requests.filter((x) => isJudge(x.body));
  assert.ok(agent.length > 0 && judge.length > 0);
  for (const x of agent) assert.deepEqual([x.body!.temperature, x.body!.top_p, x.body!.seed], [0.7, 0.9, 5]);
  for (const x of judge) assert.deepEqual([x.body!.temperature, x.body!.seed], [0, undefined]);
});

test('guard eval / s3 eval: a filter without --temperature, --samples, or --shard without --seed are one error line before any request', async () => {
  const base = ['--endpoint', 'http://127.0.0.1:9/v1', '--endpoint-model', 'm', '--bench', 'agentharm'];
  const a = await runCli(['guard', 'eval', ...base, '--top-k', '5']);
  assert.equal(a.code, 2);
  assert.match(a.stderr, /--top-k needs --temperature above 0/);
  const b = await runCli(['guard', 'eval', ...base, '--samples', '3']);
  assert.equal(b.code, 2);
  assert.match(b.stderr, /unknown flag --samples/);
  const c = await runCli(['s3', 'eval', ...base, '--temperature', '0.5', '--shard', '0/2']);
  assert.equal(c.code, 2);
  assert.match(c.stderr, /--shard with --temperature needs --seed/);
});
