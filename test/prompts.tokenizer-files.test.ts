/**
 * Tokenizer files from a model folder are opened as the checkpoint loader opens its files: a FIFO (which an ordinary
 * open would wait on forever), a folder or a symlink to a folder in place of tokenizer.json, tokenizer_config.json or
 * the chat template is one line and exit 2 from the CLI, and the command ends (each run is bounded by a timeout).
 */
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './helpers/shared.ts';

const TEMPLATE = '{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif %}';

function render(args: string[]): { status: number | null; stdout: string; stderr: string; signal: NodeJS.Signals | null } {
  const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'render', ...args, '--limit', '1'], { encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, signal: r.signal };
}

function mkfifo(t: TestContext, path: string): boolean {
  const r = spawnSync('mkfifo', [path]);
  if (r.status !== 0) {
    t.skip('mkfifo is not available on this system');
    return false;
  }
  return true;
}

function assertOneLine(r: ReturnType<typeof render>, file: string, kind: RegExp) {
  assert.equal(r.signal, null, 'the command ended by itself (no hang)');
  assert.equal(r.status, 2, r.stderr);
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0]!, new RegExp(`^safekeep: .*${file.replace(/\./g, '\\.')}: ${kind.source}, not a regular file; refusing to read it$`));
  assert.equal(r.stdout, '');
}

for (const file of ['tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja']) {
  test(`a FIFO ${file} in the model folder: one line, exit 2, no hang`, (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'safekeep-tokfifo-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    if (file !== 'chat_template.jinja') writeFileSync(join(dir, 'chat_template.jinja'), TEMPLATE);
    if (!mkfifo(t, join(dir, file))) return;
    assertOneLine(render(['--model', dir]), file, /a FIFO/);
  });

  test(`a folder named ${file}, and a symlink to a folder: one line, exit 2`, (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'safekeep-tokdir-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    if (file !== 'chat_template.jinja') writeFileSync(join(dir, 'chat_template.jinja'), TEMPLATE);
    mkdirSync(join(dir, file));
    assertOneLine(render(['--model', dir]), file, /a folder/);
    rmSync(join(dir, file), { recursive: true });
    mkdirSync(join(dir, 'elsewhere'));
    symlinkSync(join(dir, 'elsewhere'), join(dir, file));
    assertOneLine(render(['--model', dir]), file, /a folder/);
  });
}

test('--template naming a FIFO: one line, exit 2, no hang', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-tplfifo-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'chat_template.jinja'), TEMPLATE);
  if (!mkfifo(t, join(dir, 'override.jinja'))) return;
  assertOneLine(render(['--model', dir, '--template', join(dir, 'override.jinja')]), 'override.jinja', /a FIFO/);
});

test('a regular chat template still renders (the check refuses only what is not a file)', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-tokok-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'chat_template.jinja'), TEMPLATE);
  const r = render(['--model', dir]);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(r.stdout.length > 0);
});
