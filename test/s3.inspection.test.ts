/**
 * The SKILL.md "inspection" field: the parts of the stage event a skill reads — declared, validated against the
 * stage, the prompt's placeholders and the rules' predicates, and enforced: the check receives only those parts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CheckFn } from '../src/s3/check.ts';
import type { StageEvent } from '../src/s3/event.ts';
import { runStage } from '../src/s3/guard.ts';
import { loadSkill, SkillFileError } from '../src/s3/skill-file.ts';
import type { ChatBackend } from '../src/guard/types.ts';

function skillDir(t: { after: (f: () => void) => void }, front: string[], files: Record<string, string> = {}): string {
  const root = mkdtempSync(join(tmpdir(), 'safekeep-insp-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'demo');
  mkdirSync(dir);
  for (const [k, v] of Object.entries(files)) writeFileSync(join(dir, k), v);
  writeFileSync(join(dir, 'SKILL.md'), ['---', 'name: demo', 'description: A demo risk.', 'mitigation: recover', 'recovery: "removed"', ...front, '---', 'Check it.', ''].join('\n'));
  return dir;
}

test('inspection: default = every part of the stage; unknown parts, parts absent at the stage, undeclared reads are errors', (t) => {
  const prompt = { 'p.md': '{{request}}\n{{observation}}' };
  const llm = ['check: llm', 'resources: [p.md]', 'prompt: p.md'];
  assert.deepEqual(loadSkill(skillDir(t, ['stage: tool_observation', ...llm], prompt)).inspection, ['request', 'history', 'observation']);
  assert.deepEqual(loadSkill(skillDir(t, ['stage: tool_observation', 'inspection: [observation, request]', ...llm], prompt)).inspection, ['observation', 'request']);
  const bad = (front: string[], files: Record<string, string>, re: RegExp) => assert.throws(() => loadSkill(skillDir(t, front, files)), (e: unknown) => e instanceof SkillFileError && /field "inspection"/.test(e.message) && re.test(e.message), re.source);
  bad(['stage: tool_observation', 'inspection: [screen]', ...llm], prompt, /unknown part 'screen'/);
  bad(['stage: input', 'inspection: [answer]', ...llm], { 'p.md': '{{request}}' }, /'answer' does not exist at stage input/);
  bad(['stage: tool_observation', 'inspection: [observation]', ...llm], prompt, /shows \{\{request\}\}, which reads 'request', not declared/);
  bad(['stage: tool_observation', 'inspection: [request]', ...llm], { 'p.md': 'result of {{tool}}' }, /\{\{tool\}\}, which reads 'observation'/);
  bad(['stage: input', 'inspection: [history]', 'check: llm', 'prompt: builtin:safekeep-judge'], {}, /builtin:safekeep-judge judges the request/);
  const rules = { 'r.txt': 'rule x\n  trigger *\n  check read_before "Get"\n  reason "x"\nend\n' };
  bad(['stage: tool_selection', 'inspection: [calls, request]', 'check: rules', 'resources: [r.txt]', 'rules: r.txt'], rules, /rule x: read_before reads history, not declared/);
  assert.deepEqual(loadSkill(skillDir(t, ['stage: tool_selection', 'inspection: [calls, history]', 'check: rules', 'resources: [r.txt]', 'rules: r.txt'], rules)).inspection, ['calls', 'history']);
});

test('inspection limits what the check receives: undeclared request and history never reach it', async (t) => {
  const dir = skillDir(t, ['stage: tool_observation', 'inspection: [observation]', 'check: llm', 'resources: [p.md]', 'prompt: p.md'], { 'p.md': '{{observation}}' });
  const skill = loadSkill(dir);
  const seen: StageEvent[] = [];
  const spy: CheckFn = async (_s, e) => { seen.push(e); return { risky: false, reason: '', evidence: [], verdict: 'no', score: null, raw: '', tokens: 0, latencyMs: 0 }; };
  const e: StageEvent = {
    stage: 'tool_observation', tools: [],
    messages: [
      { role: 'system', content: 'You are an agent.' }, { role: 'user', content: 'my PIN is 4242' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'r', type: 'function', function: { name: 'ReadMail', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'r', name: 'ReadMail', content: 'earlier secret result' },
    ],
    observation: { callId: 'r2', name: 'ReadMail', content: 'the result under check' },
  };
  const none: ChatBackend = { name: 'none', callFormat: 'llama3', chat: () => Promise.reject(new Error('no model')) };
  await runStage(e, { skills: [skill], guardDecision: false, mitigation: 'skill', checks: { llm: spy } }, { backend: none });
  const got = JSON.stringify(seen[0]);
  assert.ok(got.includes('the result under check'));
  assert.ok(!got.includes('4242') && !got.includes('earlier secret result') && !got.includes('tool_calls'), got);
  // declared: it arrives
  const full = loadSkill(skillDir(t, ['stage: tool_observation', 'check: llm', 'resources: [p.md]', 'prompt: p.md'], { 'p.md': '{{observation}}' }));
  await runStage(e, { skills: [full], guardDecision: false, mitigation: 'skill', checks: { llm: spy } }, { backend: none });
  assert.ok(JSON.stringify(seen[1]).includes('4242') && JSON.stringify(seen[1]).includes('earlier secret result'));
});
