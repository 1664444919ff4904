/**
 * Chat-template rendering is bounded (src/prompts/bounded-render.ts): a template that asks for a two-billion-element
 * range, doubles a list, or loops for ever is one SafekeepError within seconds — never a native out-of-memory crash
 * or a hang — from the CLI (exit 2) and from serve --model (a 400); real templates on long conversations render as
 * before.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { installTokenizer, loadPromptTokenizer, npmTokenizerDir } from '../src/prompts/tokenizer.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { createLocalServer } from '../src/serve/local.ts';
import { repoRoot } from './helpers/shared.ts';

const root = mkdtempSync(join(tmpdir(), 'safekeep-tplbound-'));
test.after(() => rmSync(root, { recursive: true, force: true }));

const HOSTILE: Record<string, string> = {
  range: '{% for i in range(2000000000) %}x{% endfor %}',
  'list doubling': '{% set ns = namespace(a=[1]) %}{% for i in range(64) %}{% set ns.a = ns.a + ns.a %}{% endfor %}{{ ns.a | length }}',
  'string doubling': '{% set ns = namespace(s="xxxxxxxx") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}',
  // ten billion iterations of an empty body: nothing is evaluated inside, the iterations themselves count
  'nested loops': '{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}',
};

function templateFile(name: string, text: string): string {
  const f = join(root, `${name.replace(/\W+/g, '-')}.jinja`);
  writeFileSync(f, text);
  return f;
}

for (const [name, text] of Object.entries(HOSTILE)) {
  test(`a template with ${name} fails with one clear error within seconds`, async () => {
    const tok = await loadPromptTokenizer(npmTokenizerDir('qwen3'), { template: templateFile(name, text) });
    const t0 = performance.now();
    assert.throws(() => tok.render([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true }),
      (e: Error) => e.name === 'SafekeepError' && /^chat template .*: rendering stopped, the template exceeds safekeep's bounds \(/.test(e.message));
    assert.ok(performance.now() - t0 < 30_000);
    if (name === 'range') assert.throws(() => tok.encodeChat([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true }), (e: Error) => e.name === 'SafekeepError');
  });
}

test('real templates render long conversations within the bounds, as before', async () => {
  const tok = await loadPromptTokenizer(npmTokenizerDir('qwen3'));
  const messages = [{ role: 'system', content: 's'.repeat(100_000) }];
  for (let i = 0; i < 400; i++) messages.push(i % 2 ? { role: 'assistant', content: `<think>\nhm\n</think>\n${'a'.repeat(2000)}` } : { role: 'user', content: 'u '.repeat(1000) });
  messages.push({ role: 'user', content: 'go' });
  const text = tok.render(messages, { addGenerationPrompt: true });
  assert.ok(text.length > 900_000);
  // range still works as Jinja's within the bound (start, stop, step; negative steps)
  const f = templateFile('ranges', '{{ range(3) | join(",") }}|{{ range(1, 7, 2) | join(",") }}|{{ range(5, 0, -2) | join(",") }}|{{ range(0) | length }}');
  const small = await loadPromptTokenizer(npmTokenizerDir('qwen3'), { template: f });
  assert.equal(small.render([], { addGenerationPrompt: false }), '0,1,2|1,3,5|5,3,1|0');
});

test('CLI: a command rendering a chat with a hostile template says so in one line, exit 2', async () => {
  const dir = join(root, 'tok');
  await installTokenizer(dir, 'qwen3', { template: HOSTILE.range! });
  const r = await new Promise<{ code: number; stderr: string }>((res) => {
    execFile(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'forward', '--model', dir, '--chat', 'hi', '--out', join(root, 'fwd.json')],
      { cwd: root, timeout: 120_000 }, (err, _o, stderr) => res({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stderr }));
  });
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /^safekeep: chat template .*exceeds safekeep's bounds.*\n$/);
});

test('serve --model: a request rendered by a hostile template is a 400, and the server keeps serving', async (t) => {
  const dir = join(root, 'served');
  await installTokenizer(dir, 'qwen3', { template: '{% if messages | length > 1 %}{% for i in range(2000000000) %}x{% endfor %}{% endif %}<|im_start|>user\n{{ messages[0].content }}<|im_end|>\n' });
  const tok = await loadPromptTokenizer(dir);
  let generated = 0;
  const backend = new LocalBackend({ generate: async (rows) => { generated++; return rows.map(() => ({ generatedIds: [151645], finish: 'stop' as const })); } }, tok);
  const server = createLocalServer({
    backend, method: 'base', modelName: 'tpl', log: () => undefined, contextLength: 4096, defaultMaxTokens: 4,
    countPromptTokens: (c) => ({ tokens: backend.promptIds(c).length, exact: true }),
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(async () => { server.closeAllConnections(); await new Promise<void>((r) => server.close(() => r())); });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`;
  const post = (messages: unknown) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages }) });
  const bad = await post([{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' }]);
  assert.equal(bad.status, 400);
  assert.match(((await bad.json()) as { error: { message: string } }).error.message, /exceeds safekeep's bounds/);
  assert.equal(generated, 0);
  const ok = await post([{ role: 'user', content: 'hello' }]);
  assert.equal(ok.status, 200, await ok.clone().text());
  assert.equal(generated, 1);
});
