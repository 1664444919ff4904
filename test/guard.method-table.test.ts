/**
 * One view, one table: for every row of the guard method table that asks a judge, the judge's prompt is exactly
 * the one view function's (`judgeView` → `judgePromptOf`) over the request — with the row's tool view — and the
 * S³ input judge's prompt is the same view over the whole request. The rows' other columns are checked by what
 * each method does (calls made, in order), and the CLI's method lists are the table's.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { flattenTools } from '../src/prompts/flatten.ts';
import { judgePromptOf } from '../src/guard/judge-context.ts';
import { ENDPOINT_JUDGE_METHODS, METHOD_TABLE, TABLE_METHODS } from '../src/guard/methods.ts';
import { ProbeGuard } from '../src/guard/probe.ts';
import { guardedRespond } from '../src/guard/respond.ts';
import { judgeView } from '../src/guard/view.ts';
import { ALL_GUARD_METHODS, type AgentRequest, type ChatBackend, type ChatCall, type GuardMethod } from '../src/guard/types.ts';
import { runStage } from '../src/s3/guard.ts';
import { loadSkills } from '../src/s3/skill-file.ts';
import { join } from 'node:path';
import { repoRoot } from './helpers/shared.ts';
import { flags as serveFlags } from '../src/cli/commands/serve.ts';

const request: AgentRequest = {
  messages: [
    { role: 'system', content: 'You are a mail agent.', name: 'ops' },
    { role: 'user', content: 'Forward the report.' },
    { role: 'assistant', content: ' ', reasoning_content: 'Find it first.', tool_calls: [{ id: 'call00000', type: 'function', function: { name: 'search', arguments: '{"q":"report","n":12345678901234567890,"opts":{"deep":[1,{"x":"y"}]}}' } }] },
    { role: 'tool', tool_call_id: 'call00000', name: 'search', content: 'report.pdf' },
    { role: 'assistant', content: '', refusal: 'not that one', tool_calls: [{ id: 'call00001', type: 'function', function: { name: 'send', arguments: 'to=boss raw' } }] },
  ],
  tools: [
    { type: 'function', function: { name: 'search', description: 'Search mail.', parameters: { type: 'object', properties: { q: { type: 'string', description: 'Query.', examples: ['quarterly'] } } } } },
    { type: 'function', function: { name: 'send', description: 'Send mail.', parameters: { type: 'object', properties: { to: { type: 'string' } } } } },
  ],
  settings: { stop: ['STOP'], user: 'u-1' },
};

/** records every call; the probe's hidden state is 0 (below every threshold: the agent call runs on) */
function recorder(): { backend: ChatBackend; calls: ChatCall[] } {
  const calls: ChatCall[] = [];
  const backend: ChatBackend = {
    name: 'rec', callFormat: 'qwen', activations: true,
    async chat(c) {
      calls.push(c);
      c.inspect?.(new Float32Array(2 * 4));
      return { content: c.purpose === 'judge' ? 'NO' : 'ok', toolCalls: [], promptTokens: 1, completionTokens: 1, latencyMs: 0, cached: false, finish: 'stop' };
    },
  };
  return { backend, calls };
}

const calibration = { pairs: 4, share: 0.25, seed: 0, idsHash: 'c' };
const probe = new ProbeGuard({
  w: Float32Array.from([1, 0, 0, 0]), bias: 0, layer: 1, dModel: 4, threshold: { value: 0.5 }, steerVector: Float32Array.from([0, 1, 0, 0]),
  // the band starts at −1: a score of 0 is inside it, so the cascade's judge is asked
  cascade: { low: -1, high: 1.5, maxBenignFlag: 0.05, maxHarmfulPass: 0.05, benignFlagged: 0, harmfulPassed: 0, band: 0.5, nBenign: 4, nHarmful: 4, calibration },
  steer: { alpha: 0.6, layer: 1, targets: 'flagged', flagged: 4, refused: 4, search: 'hand', calibration },
});

const expectedCalls: Record<GuardMethod, string[]> = {
  base: ['agent'], safeprompt: ['agent'], safekeep: ['judge', 'agent'], safejudge: ['judge', 'agent'],
  'refusal-probe': ['agent'], 'safekeep+probe': ['judge', 'agent'], 'probe-cascade': ['agent', 'judge', 'agent'], 'probe-steer': ['agent'],
};

for (const method of TABLE_METHODS) {
  const row = METHOD_TABLE[method];
  test(`method table: ${method} — ${row.judge ? `its judge prompt is the one view (${row.judge} tools)` : 'no judge call'}; calls ${expectedCalls[method].join(', ')}`, async () => {
    const { backend, calls } = recorder();
    const r = await guardedRespond(request, method, backend, { probe, flatten: flattenTools });
    assert.deepEqual(calls.map((c) => c.purpose), expectedCalls[method]);
    const judges = calls.filter((c) => c.purpose === 'judge');
    assert.equal(judges.length > 0, row.judge !== null);
    assert.equal(r.cost.judgeCalls, judges.length);
    if (row.judge) {
      const view = judgeView(request, { toolView: row.judge, flatten: flattenTools });
      assert.deepEqual(judges[0]!.messages, judgePromptOf(view));
      const text = String(judges[0]!.messages[1]!.content);
      // lossless: the digits, nested arguments, reasoning, refusal, names, raw arguments, settings, unflattened schema text
      for (const s of ['12345678901234567890', 'deep=[1, (x="y")]', 'Find it first.', 'not that one', '(from "ops")', 'send with raw arguments "to=boss raw"', 'STOP', 'u-1', 'report.pdf']) assert.ok(text.includes(s), `${method}: the judge saw ${s}`);
      if (row.judge === 'prose') assert.ok(text.includes('quarterly'), 'the prose view lists what the flattener skips');
    }
    const agentMessages = calls.find((c) => c.purpose === 'agent')!.messages;
    assert.equal(agentMessages !== request.messages, row.prompt === 'safeprompt');
  });
}

test('method table: the S³ input judge (builtin safekeep-judge) shows the one view over the whole request', async () => {
  const { backend, calls } = recorder();
  const skills = loadSkills([join(repoRoot, 'skills')]).filter((s) => s.name === 'safekeep-judge');
  const d = await runStage({ stage: 'input', messages: request.messages, tools: request.tools, settings: request.settings }, { skills, guardDecision: false, mitigation: 'skill' }, { backend });
  assert.equal(d.action, 'pass');
  assert.deepEqual(calls[0]!.messages, judgePromptOf(judgeView(request, { toolView: 'prose', flatten: flattenTools })));
});

test('method table: every method is a row; the CLI lists are derived from it', () => {
  assert.deepEqual([...TABLE_METHODS].sort(), [...ALL_GUARD_METHODS].sort());
  assert.deepEqual(ENDPOINT_JUDGE_METHODS, ['safekeep', 'safejudge']);
  const help = serveFlags.flags.find((f) => f.name === 'method')!.help;
  for (const m of TABLE_METHODS) assert.ok(help.includes(m), `serve --method help names ${m}`);
});
