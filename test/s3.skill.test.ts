import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseFrontMatter, splitFrontMatter } from '../src/s3/front-matter.ts';
import { loadSkill, loadSkills, SkillFileError } from '../src/s3/skill-file.ts';
import { STAGES } from '../src/s3/stages.ts';
import { parseRules } from '../src/s3/rules-lang.ts';
import { repoRoot } from './helpers/shared.ts';

test('front matter: scalars, quoted strings, flow and block lists, one-level maps, block text', () => {
  const fm = parseFrontMatter([
    '# a comment',
    'name: parse-data',
    'description: Text with: a colon # and a comment',
    'quoted: "a \\"b\\", c"',
    "single: 'it''s'",
    'list: [a, "b, c", \'d\']',
    'block:',
    '  - x',
    '  - "y z"',
    'filter:',
    '  tools: ["*Email*", send]',
    '  roles: tool',
    'text: |',
    '  line one',
    '',
    '  line two',
  ].join('\n'));
  assert.deepEqual(Object.fromEntries(fm), {
    name: 'parse-data',
    description: 'Text with: a colon',
    quoted: 'a "b", c',
    single: "it's",
    list: ['a', 'b, c', 'd'],
    block: ['x', 'y z'],
    filter: { tools: ['*Email*', 'send'], roles: 'tool' },
    text: 'line one\n\nline two',
  });
  assert.deepEqual(splitFrontMatter('---\na: b\n---\nbody\n'), { front: 'a: b\n', body: 'body\n', bodyLine: 4 });
  assert.equal(splitFrontMatter('no front matter'), null);
  for (const [bad, msg] of [['a: b\na: c', /duplicate key "a"/], ['a: [x, y', /must end with \]/], ['  a: b', /unexpected indentation/], ['a:', /has no value/],
    ['a:\n  - x\n  y: z', /mixing/], ['a: {x}', /quote it/], ['a b', /expected "key: value"/], ['a:\n\t- x', /tab/]] as const) {
    assert.throws(() => parseFrontMatter(bad), msg, bad);
  }
});

test('shipped skills parse: one per stage they guard, with their checks and resources', () => {
  const skills = loadSkills([join(repoRoot, 'skills')]);
  const by = Object.fromEntries(skills.map((s) => [s.name, s]));
  assert.deepEqual(skills.map((s) => s.name).sort(), ['incident-response', 'memory-guard', 'output-leak', 'parse-data', 'plan-rules', 'rule-memory', 'safekeep-judge', 'tool-rules']);
  assert.deepEqual(Object.fromEntries(skills.map((s) => [s.name, [s.stage, s.check, s.mitigation]])), {
    'safekeep-judge': ['input', 'llm', 'recover'],
    'parse-data': ['tool_observation', 'llm', 'recover'],
    'tool-rules': ['tool_selection', 'rules', 'recover'],
    'output-leak': ['output', 'rules', 'recover'],
    'rule-memory': ['input', 'llm', 'recover'],
    'incident-response': ['tool_execution', 'rules', 'respond'],
    'plan-rules': ['planning', 'rules', 'recover'],
    'memory-guard': ['memory', 'llm', 'recover'],
  });
  // the memory stage is not the rule-memory skill: that one is the input stage's rule store
  assert.notEqual(by['rule-memory']!.stage, 'memory');
  for (const s of skills) assert.ok(STAGES.includes(s.stage));
  assert.deepEqual(by['safekeep-judge']!.prompt, { builtin: 'safekeep-judge' });
  assert.match((by['parse-data']!.prompt as { template: string }).template, /\{\{observation\}\}/);
  assert.equal(by['parse-data']!.filter.patterns?.length, 1);
  assert.deepEqual(Object.fromEntries(skills.map((s) => [s.name, s.inspection])), {
    'output-leak': ['request', 'history', 'answer'], 'parse-data': ['request', 'history', 'observation'], 'rule-memory': ['request'],
    'safekeep-judge': ['request', 'history'], 'tool-rules': ['request', 'history', 'calls'], 'incident-response': ['request', 'calls'],
    'plan-rules': ['request', 'plan'], 'memory-guard': ['request', 'entries'],
  });
  // the stages where outside text enters the agent each have a mandatory skill that reads all of it
  assert.deepEqual(skills.filter((s) => s.mandatory).map((s) => s.name).sort(), ['memory-guard', 'parse-data', 'safekeep-judge']);
  assert.ok(by['rule-memory']!.memory!.endsWith('memory.json'));
  assert.equal(parseRules(by['tool-rules']!.rules!.text, 'x').length, 2);
  assert.match(by['parse-data']!.body, /injected/);
});

const GOOD = {
  name: 'demo', stage: 'tool_observation', description: 'A demo risk.', resources: '[rules.txt]', check: 'rules', rules: 'rules.txt', mitigation: 'recover',
  recovery: '"[removed: {{reason}}]"',
};
const RULES = 'rule r\n  trigger *\n  check pattern "ignore previous"\n  reason "x"\nend\n';

function skillDir(root: string, fields: Record<string, string | null>, extra = '', body = 'Check it.', files: Record<string, string> = { 'rules.txt': RULES }): string {
  const dir = join(root, 'demo');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const [f, t] of Object.entries(files)) writeFileSync(join(dir, f), t);
  const lines = Object.entries({ ...GOOD, ...fields }).filter(([, v]) => v !== null).map(([k, v]) => `${k}: ${v}`);
  writeFileSync(join(dir, 'SKILL.md'), `---\n${lines.join('\n')}\n${extra}---\n${body}\n`);
  return dir;
}

test('a bad SKILL.md gets one error naming the file, the field and the fix', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'safekeep-skill-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const ok = loadSkill(skillDir(root, {}));
  assert.deepEqual([ok.name, ok.stage, ok.check, ok.recovery], ['demo', 'tool_observation', 'rules', '[removed: {{reason}}]']);
  const cases: [Record<string, string | null>, string, RegExp, string?, string?, Record<string, string>?][] = [
    [{ stage: 'tool_result' }, 'stage', /unknown stage 'tool_result' — fix: use one of input, planning, memory, tool_selection, tool_execution, tool_observation, output/],
    [{ stage: null }, 'stage', /missing — fix: add "stage: \.\.\."/],
    [{ check: 'regex' }, 'check', /unknown check 'regex' — fix: use one of llm, rules, probe/],
    [{ mitigation: 'stop' }, 'mitigation', /use one of block, recover/],
    [{ name: 'other' }, 'name', /differs from the folder name 'demo'/],
    [{ name: 'Bad_Name' }, 'name', /not a skill name/],
    [{ colour: 'red' }, 'colour', /unknown field — fix: remove it; known fields: name, stage/],
    [{ prompt: 'p.md' }, 'prompt', /only used by "check: llm" \(this skill has check: rules\)/],
    [{ recovery: '"{{secret}}"' }, 'recovery', /unknown placeholder \{\{secret\}\}/],
    [{ resources: '[missing.txt]' }, 'resources', /'missing\.txt' does not exist/],
    [{ resources: '["../x"]' }, 'resources', /not a file name inside the skill folder/],
    [{ rules: 'other.txt' }, 'rules', /'other\.txt' is not listed in resources/],
    [{}, 'filter.patterns', /is not a regular expression/, 'filter:\n  patterns: ["(unclosed"]\n'],
    [{}, 'filter.kinds', /unknown filter field/, 'filter:\n  kinds: [x]\n'],
    [{}, 'filter.roles', /unknown role 'robot'/, 'filter:\n  roles: [robot]\n'],
    [{}, '(body)', /checking procedure is empty/, '', ''],
    [{}, 'rules', /line 3: unknown predicate 'magic'/, '', 'Check it.', { 'rules.txt': 'rule r\n  trigger *\n  check magic\n  reason "x"\nend\n' }],
    [{ check: 'llm', rules: null, prompt: 'p.md', resources: '[p.md]' }, 'prompt', /uses unknown placeholder \{\{secrets\}\}/, '', 'Check it.', { 'p.md': 'Look at {{secrets}}' }],
    [{ check: 'llm', rules: null, prompt: 'builtin:magic', resources: null }, 'prompt', /unknown builtin 'magic'/],
    [{ check: 'probe', rules: null, resources: '[d.json]', direction: 'd.json', layer: 'x' }, 'layer', /not a layer index/, '', 'Check it.', { 'd.json': '{}' }],
    [{ check: 'llm', rules: null, prompt: 'p.md', memory: 'm.json', resources: '[p.md, m.json]' }, 'memory', /"format" must be/, '', 'Check it.', { 'p.md': '{{memory}}', 'm.json': '{"rules": []}' }],
  ];
  for (const [fields, field, msg, extra, body, files] of cases) {
    const dir = skillDir(root, fields, extra ?? '', body ?? 'Check it.', files);
    assert.throws(() => loadSkill(dir), (e: unknown) => {
      assert.ok(e instanceof SkillFileError, String(e));
      assert.equal(e.exitCode, 2);
      assert.equal(e.field, field);
      assert.ok(e.message.startsWith(join(dir, 'SKILL.md')), e.message);
      assert.match(e.message, msg);
      assert.match(e.message, / — fix: /);
      assert.equal(e.message.split('\n').length, 1);
      return true;
    }, JSON.stringify(fields));
  }
  // a probe skill parses when complete (the check itself comes from the caller)
  const probe = loadSkill(skillDir(root, { check: 'probe', rules: null, resources: '[d.json]', direction: 'd.json', layer: '3', threshold: '0.25' }, '', 'Project.', { 'd.json': '{}' }));
  assert.deepEqual([probe.probe!.layer, probe.probe!.threshold, probe.probe!.direction.endsWith('d.json')], [3, 0.25, true]);
  // duplicate names across folders
  const a = mkdtempSync(join(tmpdir(), 'safekeep-skill-a-'));
  t.after(() => rmSync(a, { recursive: true, force: true }));
  skillDir(a, {});
  skillDir(root, {});
  assert.throws(() => loadSkills([root, a]), /'demo' is also the name of/);
  assert.throws(() => loadSkills([join(root, 'nope')]), /does not exist/);
});

test('rule language: strict parse errors with line numbers', () => {
  const bad: [string, RegExp][] = [
    ['trigger *', /line 1: "trigger" outside a rule/],
    ['rule a\n trigger *\n check pattern x\n reason "r"\n', /rule 'a' \(line 1\) has no "end"/],
    ['rule a\n check pattern x\n reason "r"\nend', /line 4: rule 'a' has no trigger/],
    ['rule a\n trigger *\n check arg_matches x\n reason "r"\nend', /line 3: arg_matches takes ARG REGEX, got 1/],
    ['rule a\n trigger *\n check pattern "("\n reason "r"\nend', /line 3: '\(' is not a regular expression/],
    ['rule a\n trigger *\n check pattern x\n reason two words\nend', /line 4: write reason/],
    ['rule a\n trigger *\n enforce stop\nend', /line 3: unknown keyword 'enforce'/],
    ['# only a comment', /no rules/],
  ];
  for (const [text, msg] of bad) assert.throws(() => parseRules(text, 'rules.txt'), msg, text);
  const r = parseRules('rule a # c\n trigger *Email*, send_*\n check not read_before "Get|Read"\n check pattern "a b"\n reason "why"\nend', 'f');
  assert.deepEqual([r[0]!.trigger, r[0]!.checks.map((c) => [c.name, c.negate, c.args])], [['*Email*', 'send_*'], [['read_before', true, ['Get|Read']], ['pattern', false, ['a b']]]]);
});
