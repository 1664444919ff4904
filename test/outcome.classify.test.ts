import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './helpers/shared.ts';
import { classifyOutput, classifyResponse } from '../src/outcome/classify.ts';
import { parseToolCalls } from '../src/outcome/parse-calls.ts';
import { degenerateReason, longestLoop } from '../src/outcome/degenerate.ts';
import { findRefusalPhrases, REFUSAL_SUBSTRINGS_JBB } from '../src/outcome/refusal.ts';
import type { CallFormat, OutcomeLabel } from '../src/outcome/types.ts';
import type { ToolSpec } from '../src/data/types.ts';

const dir = join(repoRoot, 'test', 'fixtures', 'outputs');
const tools = JSON.parse(readFileSync(join(dir, 'tools.json'), 'utf8')) as ToolSpec[];

interface Row { id: string; output: string; label: OutcomeLabel }
function load(format: CallFormat): Row[] {
  return readFileSync(join(dir, `${format}.jsonl`), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Row);
}

for (const format of ['llama3', 'qwen', 'mistral'] as const) {
  test(`labelled outputs (${format}): every expected label`, () => {
    const rows = load(format);
    assert.ok(rows.length >= 60, `${rows.length} rows`);
    for (const label of ['refusal', 'valid', 'invalid'] as const) {
      assert.ok(rows.filter((r) => r.label === label).length >= 10, `${label} coverage`);
    }
    const wrong: string[] = [];
    for (const r of rows) {
      const o = classifyOutput(r.output, tools, format);
      if (o.label !== r.label) wrong.push(`${r.id}: expected ${r.label}, got ${o.label} (${o.reasons.join('; ')})`);
    }
    assert.deepEqual(wrong, []);
  });
}

test('parsed calls carry the exact arguments; reasons name the failure', () => {
  const q = parseToolCalls(
    'ok <tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>{"name": "b", "arguments": "{\\"y\\": [2]}"}</tool_call> done',
    'qwen',
  );
  assert.deepEqual(q.calls.map((c) => [c.name, c.arguments]), [['a', { x: 1 }], ['b', { y: [2] }]]);
  assert.equal(q.prose, 'ok \n done');
  const m = parseToolCalls('[TOOL_CALLS]send_email[ARGS]{"to": "t", "subject": "s", "body": "b"}', 'mistral');
  assert.deepEqual(m.calls[0]!.arguments, { to: 't', subject: 's', body: 'b' });
  const l = parseToolCalls('<|python_tag|>f.call(a="x\\"y", b=-2.5, c=True, d=None); g.call()', 'llama3');
  assert.deepEqual(l.calls.map((c) => [c.name, c.arguments]), [['f', { a: 'x"y', b: -2.5, c: true, d: null }], ['g', {}]]);

  const bad = classifyOutput('{"name": "set_volume", "parameters": {"level": 150}}', tools, 'llama3');
  assert.equal(bad.label, 'invalid');
  assert.equal(bad.calls[0]!.known, true);
  assert.equal(bad.calls[0]!.argsValid, false);
  assert.match(bad.reasons[0]!, /set_volume\/level must be <= 100/);
  const unknown = classifyOutput('{"name": "rm", "parameters": {}}', tools, 'llama3');
  assert.deepEqual(unknown.reasons, ['unknown tool rm']);
  const partial = classifyOutput('{"name": "get_time", "parameters": {', tools, 'llama3');
  assert.equal(partial.malformed.length, 1);
  assert.match(partial.reasons[0]!, /unterminated JSON/);
  const after = classifyOutput('{"name": "get_time", "parameters": {}} I\'m sorry.', tools, 'llama3');
  assert.equal(after.label, 'valid');
  assert.deepEqual(after.refusalPhrases, ["i'm sorry"]);
});

test('refusal list: JailbreakBench substrings, case-insensitive, typographic apostrophes folded', () => {
  assert.equal(REFUSAL_SUBSTRINGS_JBB.length, 12);
  assert.deepEqual(findRefusalPhrases('AS AN AI, I CAN\u2019T.'), ['as an ai', "i can't"]);
  assert.deepEqual(findRefusalPhrases('Here is the plan.'), []);
});

test('degenerate: loops measured exactly; normal text is not degenerate', () => {
  assert.deepEqual(longestLoop('xyabcabcabcabc'), { unit: 'abc', repeats: 4, chars: 12 });
  assert.equal(longestLoop('abcabcabc'), null); // 3 repeats < 4
  assert.match(degenerateReason('go go go go go go')!, /repetition/);
  assert.equal(degenerateReason('I\'m sorry, but I can\'t help with that. I can offer safer alternatives instead.'), null);
  assert.equal(degenerateReason(''), 'empty output');
});

test('structured tool_calls from an endpoint are classified like native ones', () => {
  const ok = classifyResponse(null, [{ id: '1', type: 'function', function: { name: 'get_time', arguments: '{}' } }], tools);
  assert.equal(ok.label, 'valid');
  const broken = classifyResponse('', [{ function: { name: 'get_time', arguments: '{oops' } }], tools);
  assert.equal(broken.label, 'invalid');
  assert.equal(classifyResponse("I'm sorry, I can't.", undefined, tools).label, 'refusal');
  // a server that failed to parse the native call leaves it in content
  assert.equal(classifyResponse('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>', [], tools, 'qwen').label, 'valid');
});
