/**
 * Skill resources are read from inside the skill folder only: a resource that is a symlink to a file outside it
 * (or sits in a linked folder that leads outside) is refused with one line naming the field; a link that stays
 * inside the folder is fine.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadSkill, SkillFileError } from '../src/s3/skill-file.ts';

const root = mkdtempSync(join(tmpdir(), 'safekeep-skl-'));
after(() => rmSync(root, { recursive: true, force: true }));
const secret = join(root, 'secret.txt');
const RULES = 'rule r\n  trigger *\n  check pattern "ignore previous"\n  reason "x"\nend\n';
writeFileSync(secret, RULES);
mkdirSync(join(root, 'outside'));
writeFileSync(join(root, 'outside', 'rules.txt'), RULES);

function skill(name: string, setup: (dir: string) => void, resource = 'rules.txt'): string {
  const dir = join(root, name);
  mkdirSync(dir);
  setup(dir);
  writeFileSync(join(dir, 'SKILL.md'), [
    '---', `name: ${name}`, 'stage: tool_observation', 'description: A demo risk.', `resources: [${resource}]`, 'check: rules', `rules: ${resource}`,
    'mitigation: recover', 'recovery: "[removed: {{reason}}]"', '---', 'Check it.', '',
  ].join('\n'));
  return dir;
}

test('a resource symlinked to a file outside the skill folder is refused', () => {
  const dir = skill('linked-out', (d) => symlinkSync(secret, join(d, 'rules.txt')));
  assert.throws(() => loadSkill(dir), (e: unknown) => {
    assert.ok(e instanceof SkillFileError);
    assert.match(e.message, /SKILL\.md: field "resources": 'rules\.txt' is a link to a file outside the skill folder — fix: copy the file/);
    return true;
  });
});

test('a resource in a subfolder that is a symlink leading outside is refused', () => {
  const dir = skill('folder-out', (d) => symlinkSync(join(root, 'outside'), join(d, 'sub')), 'sub/rules.txt');
  assert.throws(() => loadSkill(dir), /'sub\/rules\.txt' is a link to a file outside the skill folder/);
});

test('a symlink that stays inside the skill folder, and a plain file, are accepted', () => {
  const inside = skill('linked-in', (d) => { writeFileSync(join(d, 'real.txt'), RULES); symlinkSync(join(d, 'real.txt'), join(d, 'rules.txt')); });
  assert.equal(loadSkill(inside).name, 'linked-in');
  const plain = skill('plain', (d) => writeFileSync(join(d, 'rules.txt'), RULES));
  assert.equal(loadSkill(plain).name, 'plain');
});
