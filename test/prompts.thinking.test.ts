/**
 * Thinking switch: resolution rules, and `render` on a Qwen3 tokenizer folder (default off → the template's empty
 * <think></think> block; --thinking on → none), recorded in the --json manifest.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './helpers/shared.ts';
import { installTokenizer } from '../src/prompts/tokenizer.ts';
import { resolveTemplateKwargs, templateHasThinking } from '../src/prompts/thinking.ts';
import { SafekeepError } from '../src/util/errors.ts';

const withSwitch = "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>{%- endif %}";
const without = "{{ messages[0]['content'] }}";

test('resolveTemplateKwargs: default off where the template has the switch, n/a elsewhere, explicit values win', () => {
  assert.equal(templateHasThinking(withSwitch), true);
  assert.equal(templateHasThinking(without), false);
  assert.deepEqual(resolveTemplateKwargs(withSwitch, undefined), { kwargs: { enable_thinking: false }, thinking: 'off' });
  assert.deepEqual(resolveTemplateKwargs(withSwitch, 'on'), { kwargs: { enable_thinking: true }, thinking: 'on' });
  assert.deepEqual(resolveTemplateKwargs(withSwitch, undefined, { enable_thinking: true, x: 1 }), { kwargs: { enable_thinking: true, x: 1 }, thinking: 'on' });
  assert.deepEqual(resolveTemplateKwargs(without, undefined, { x: 1 }), { kwargs: { x: 1 }, thinking: 'n/a' });
  assert.deepEqual(resolveTemplateKwargs(without, 'off'), { kwargs: {}, thinking: 'n/a' });
  assert.throws(() => resolveTemplateKwargs(without, 'on'), (e: unknown) => e instanceof SafekeepError && /no thinking switch/.test(e.message));
  assert.throws(() => resolveTemplateKwargs(withSwitch, 'on', { enable_thinking: false }), /contradicts/);
});

function safekeep(args: string[]) {
  return spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { cwd: repoRoot, encoding: 'utf8' });
}

test('render on Qwen3: thinking off by default (empty think block), --thinking on removes it; manifest records it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-think-'));
  try {
    await installTokenizer(dir, 'qwen3');
    const base = ['render', '--model', dir, '--config', 'chatbot', '--limit', '1', '--json'];
    const off = safekeep(base);
    assert.equal(off.status, 0, off.stderr);
    const on = safekeep([...base, '--thinking', 'on']);
    assert.equal(on.status, 0, on.stderr);
    const kw = safekeep([...base, '--chat-template-kwargs', '{"enable_thinking": true}']);
    const j = (s: string) => JSON.parse(s) as { thinking: string; manifest: { templateKwargs: Record<string, unknown> }; prompts: { text: string }[] };
    assert.equal(j(off.stdout).thinking, 'off');
    assert.deepEqual(j(off.stdout).manifest.templateKwargs, { enable_thinking: false });
    assert.match(j(off.stdout).prompts[0]!.text, /<\|im_start\|>assistant\n<think>\n\n<\/think>\n\n$/);
    assert.equal(j(on.stdout).thinking, 'on');
    assert.match(j(on.stdout).prompts[0]!.text, /<\|im_start\|>assistant\n$/);
    assert.equal(j(kw.stdout).prompts[0]!.text, j(on.stdout).prompts[0]!.text);
    const bad = safekeep([...base, '--thinking', 'maybe']);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /--thinking must be one of on, off/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
