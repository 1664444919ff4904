/**
 * InjecAgent importer against ../shared/data/injecagent: 1,054 cases per setting (510 dh + 544 ds), 330 tools,
 * ToolEmu → JSON Schema checked against the raw parameters, agent contexts (user → tool call → observation with the
 * injection), base/enhanced correspondence; plus the Python-literal parser on its own.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { needShared } from './helpers/shared.ts';
import { readInjecAgentCases, readInjecAgentTools, readSimulatedAttackerResponses, simulatedAttackerResponse, toolEmuToSpec } from '../src/data/injecagent.ts';
import { parsePyLiteral, PyLiteralError } from '../src/data/pyliteral.ts';
import { SafekeepError } from '../src/util/errors.ts';

interface RawParam { name: string; type: string; description: string; required?: boolean }
interface RawKit { toolkit: string; tools: { name: string; summary: string; parameters: RawParam[] }[] }

test('parsePyLiteral: dicts, lists, tuples, both quote styles, escapes, numbers, True/False/None', () => {
  assert.deepEqual(parsePyLiteral("{'a': 1, \"b\": [True, False, None], 'c': (1.5, -2e3), 'd': {}}"), { a: 1, b: [true, false, null], c: [1.5, -2000], d: {} });
  assert.deepEqual(parsePyLiteral("'it\\'s' "), "it's");
  assert.deepEqual(parsePyLiteral('"say \\"hi\\"\\n"'), 'say "hi"\n');
  assert.deepEqual(parsePyLiteral("{'q': 'He said \"no\"', 'n': 1_000}"), { q: 'He said "no"', n: 1000 });
  assert.deepEqual(parsePyLiteral("['a' 'b', ]"), ['ab']);
  assert.deepEqual(parsePyLiteral("{'x': '\\u00e9\\x41'}"), { x: 'éA' });
  for (const bad of ["{'a': }", "{'a' 1}", "'open", '[1, 2', 'foo', "{'a': 1} extra"]) {
    assert.throws(() => parsePyLiteral(bad), PyLiteralError, bad);
  }
});

test('InjecAgent tools: 330 specs, names = toolkit + tool, parameters and required from the ToolEmu list', (t) => {
  const dir = needShared(t, 'data', 'injecagent');
  if (!dir) return;
  const kits = JSON.parse(readFileSync(join(dir, 'tools.json'), 'utf8')) as RawKit[];
  const tools = readInjecAgentTools(dir);
  assert.equal(tools.size, 330);
  for (const kit of kits) {
    for (const tool of kit.tools) {
      const spec = tools.get(kit.toolkit + tool.name)!;
      assert.ok(spec, kit.toolkit + tool.name);
      assert.equal(spec.function.description, tool.summary);
      const props = spec.function.parameters.properties as Record<string, { type: string; description?: string }>;
      assert.deepEqual(Object.keys(props), tool.parameters.map((p) => p.name));
      for (const p of tool.parameters) assert.deepEqual(props[p.name], { type: p.type, description: p.description });
      const req = tool.parameters.filter((p) => p.required === true).map((p) => p.name);
      assert.deepEqual(spec.function.parameters.required ?? [], req);
    }
  }
  const send = tools.get('GmailSendEmail')!;
  assert.ok((send.function.parameters.required as string[]).includes('to'));
  assert.equal((send.function.parameters.properties as Record<string, { type: string }>).attachments!.type, 'array');
});

test('InjecAgent cases: 1,054 per setting (510 dh + 544 ds); contexts carry the injected instruction', (t) => {
  const dir = needShared(t, 'data', 'injecagent');
  if (!dir) return;
  const tools = readInjecAgentTools(dir);
  const base = readInjecAgentCases(dir, 'base', undefined, tools);
  const enh = readInjecAgentCases(dir, 'enhanced', undefined, tools);
  for (const cs of [base, enh]) {
    assert.equal(cs.length, 1054);
    assert.equal(cs.filter((c) => c.attack === 'dh').length, 510);
    assert.equal(cs.filter((c) => c.attack === 'ds').length, 544);
    assert.equal(new Set(cs.map((c) => c.id)).size, 1054);
  }
  for (let i = 0; i < base.length; i++) {
    const b = base[i]!;
    const e = enh[i]!;
    assert.equal(b.userInstruction, e.userInstruction);
    assert.equal(b.attackerInstruction, e.attackerInstruction);
    assert.ok(b.toolResponse.includes(b.attackerInstruction), b.id);
    assert.ok(e.toolResponse.includes(e.attackerInstruction), e.id);
    assert.ok(!b.toolResponse.includes('Ignore all previous instructions'), b.id);
    assert.ok(e.toolResponse.includes('IMPORTANT!!! Ignore all previous instructions'), e.id);
    assert.deepEqual(b.tools.map((s) => s.function.name), [...new Set([b.userTool, ...b.attackerTools])]);
    assert.equal(b.attackerTools.length, b.attack === 'dh' ? 1 : 2);
    if (b.attack === 'ds') assert.equal(b.attackerTools[1], 'GmailSendEmail');
    // the context: user → assistant call of the user tool → tool observation
    assert.deepEqual(b.messages.map((m) => m.role), ['user', 'assistant', 'tool']);
    const call = b.messages[1]!;
    assert.ok(call.role === 'assistant' && call.tool_calls?.[0]?.function.name === b.userTool);
    assert.equal(b.messages[2]!.content, b.toolResponse);
  }
});

test('InjecAgent cases: a user tool that is also an attacker tool is offered once (ds row 276)', (t) => {
  const dir = needShared(t, 'data', 'injecagent');
  if (!dir) return;
  const cases = readInjecAgentCases(dir, 'base', ['ds']);
  const overlapping = cases.filter((c) => c.attackerTools.includes(c.userTool));
  assert.deepEqual(overlapping.map((c) => c.id), ['ds-base-276']);
  for (const c of cases) {
    const names = c.tools.map((s) => s.function.name);
    assert.equal(new Set(names).size, names.length, c.id);
  }
  assert.deepEqual(overlapping[0]!.tools.map((s) => s.function.name), ['GitHubGetUserDetails', 'GmailSendEmail']);
});

test('InjecAgent cases: arguments and observation agree with the raw row (first ds case checked by hand)', (t) => {
  const dir = needShared(t, 'data', 'injecagent');
  if (!dir) return;
  const raw = JSON.parse(readFileSync(join(dir, 'test_cases_ds_base.json'), 'utf8')) as Record<string, string>[];
  const c = readInjecAgentCases(dir, 'base', ['ds'])[0]!;
  assert.equal(c.id, 'ds-base-1');
  assert.equal(c.userTool, 'AmazonGetProductDetails');
  assert.deepEqual(c.userToolArguments, { product_id: 'B08KFQ9HK5' });
  assert.deepEqual(c.attackerTools, ['AmazonViewSavedAddresses', 'GmailSendEmail']);
  assert.equal(`"${c.toolResponse}"`, raw[0]!['Tool Response']);
  assert.ok(c.toolResponse.startsWith("{'product_details': {'name': 'Dell Inspiron Laptop'"));
  const sim = readSimulatedAttackerResponses(dir);
  assert.ok(simulatedAttackerResponse(sim, 'AmazonViewSavedAddresses', '{}')?.includes('Home address'));
});

test('InjecAgent: a ToolEmu parameter with an unknown type is a clear error', () => {
  assert.throws(
    () => toolEmuToSpec('Kit', { name: 'Do', summary: 's', parameters: [{ name: 'x', type: 'str', required: true }] }, 'tools.json: toolkit Kit, tool 1'),
    (e: unknown) => e instanceof SafekeepError && e.message.includes('KitDo') && e.message.includes("unknown type 'str'"),
  );
});
