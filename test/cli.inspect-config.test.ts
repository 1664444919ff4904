/**
 * `safekeep inspect` on transformers 5 checkpoints (test/fixtures/hf5): the resolved RoPE (type, θ, factors), the
 * attention window and the config keys read / ignored; and one-line exit-2 refusals for RoPE types and config keys
 * that would change the forward pass in a way not implemented.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HF5 } from './helpers/hf5.ts';
import { repoRoot } from './helpers/shared.ts';
import { runCli } from './helpers/cli.ts';

const line = (out: string, key: string): string => out.split('\n').find((l) => l.startsWith(key.padEnd(13) + ' ')) ?? '';

test('inspect prints the resolved RoPE, the attention window and the config keys read (5.x and 4.x configs)', async () => {
  const model = (tag: string) => join(HF5, tag, 'model');
  const [l3, l34x, yarnWin, mis, dyn, json] = await Promise.all([
    runCli(['inspect', '--model', model('llama-llama3')], { cwd: repoRoot }),
    runCli(['inspect', '--model', model('llama-llama3-4x')], { cwd: repoRoot }),
    runCli(['inspect', '--model', model('qwen2-yarn-window')], { cwd: repoRoot }),
    runCli(['inspect', '--model', model('mistral-linear-window')], { cwd: repoRoot }),
    runCli(['inspect', '--model', model('qwen3-dynamic')], { cwd: repoRoot }),
    runCli(['inspect', '--model', model('qwen3-yarn-window'), '--json'], { cwd: repoRoot }),
  ]);
  for (const r of [l3, l34x, yarnWin, mis, dyn, json]) assert.equal(r.code, 0, r.stderr);
  // a transformers 5 Llama-3 config is llama3 with its θ, not "default (theta 10000)"
  assert.equal(line(l3.stdout, 'rope'), 'rope          llama3 (theta 500000, factor 8, low 1, high 4, original 16)');
  assert.equal(line(l34x.stdout, 'rope'), line(l3.stdout, 'rope'));
  assert.match(line(l3.stdout, 'config read'), /rope_parameters, rope_parameters\.factor, .*rope_parameters\.rope_theta, rope_parameters\.rope_type/);
  assert.doesNotMatch(line(l3.stdout, 'config read'), /rope_scaling/);
  assert.match(line(l34x.stdout, 'config read'), /rope_scaling\.factor.*rope_scaling\.rope_type, rope_theta/);
  assert.match(line(l3.stdout, 'ignored'), /architectures, .*dtype, .*transformers_version, use_cache/);
  assert.equal(line(l3.stdout, 'attention'), 'attention     full causal attention on every layer');
  assert.equal(line(yarnWin.stdout, 'rope'), 'rope          yarn (theta 1000000, factor 4, original 16, beta_fast 32, beta_slow 1, truncate true, attention factor 1.138629)');
  assert.equal(line(yarnWin.stdout, 'attention'), 'attention     sliding window 8 on layer 1 (0-based; the others full causal)');
  assert.match(line(yarnWin.stdout, 'config read'), /layer_types, max_position_embeddings, max_window_layers, .*sliding_window, tie_word_embeddings, use_sliding_window/);
  assert.equal(line(mis.stdout, 'attention'), 'attention     sliding window 8 on every layer');
  assert.equal(line(mis.stdout, 'rope'), 'rope          linear (theta 10000, factor 4)');
  assert.match(line(dyn.stdout, 'rope'), /^rope {10}dynamic NTK \(theta 10000, factor 2, scaled beyond 24 tokens, recomputed for the length run\)$/);
  assert.equal(line(dyn.stdout, 'max positions'), 'max positions 24');
  const info = JSON.parse(json.stdout);
  assert.deepEqual(info.attention_windows, [8, null]);
  assert.equal(info.rope.type, 'yarn');
  assert.ok(Math.abs(info.rope.attentionFactor - (0.1 * Math.log(4) + 1)) < 1e-12);
  assert.ok(info.config_keys.read.includes('layer_types') && info.config_keys.ignored.includes('dtype'));
});

test('inspect refuses unsupported RoPE types and forward-changing keys: exit 2, one line naming the file and the type or key', async () => {
  const root = mkdtempSync(join(tmpdir(), 'safekeep-refuse-'));
  try {
    const variant = (name: string, edit: (cfg: Record<string, unknown>) => void): string => {
      const dir = join(root, name);
      cpSync(join(HF5, 'qwen3-yarn', 'model'), dir, { recursive: true });
      const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
      edit(cfg);
      writeFileSync(join(dir, 'config.json'), JSON.stringify(cfg));
      return dir;
    };
    const cases: [string, (cfg: Record<string, unknown>) => void, RegExp][] = [
      ['longrope', (c) => { c.rope_parameters = { rope_type: 'longrope', rope_theta: 1e4, short_factor: [1], long_factor: [1], original_max_position_embeddings: 16 }; }, /config\.json: RoPE type "longrope" \(rope_parameters\) is not supported \(supported: default, linear, llama3, yarn, dynamic\)$/],
      ['su', (c) => { delete c.rope_parameters; c.rope_theta = 1e4; c.rope_scaling = { type: 'su', short_factor: [1], long_factor: [1] }; }, /config\.json: RoPE type "su" \(rope_scaling\) is not supported/],
      ['attention_bias', (c) => { c.attention_bias = true; }, /config\.json: attention_bias true is not supported \(bias on the q\/k\/v\/o projections of qwen3\)/],
      ['softcap', (c) => { c.final_logit_softcapping = 30.0; }, /config\.json: final_logit_softcapping 30 is not supported \(tanh soft-capping of the logits\)/],
      ['unknown', (c) => { c.attention_sink_size = 4; }, /config\.json: config key "attention_sink_size" is not known to safekeep for qwen3/],
    ];
    const results = await Promise.all(cases.map(async ([name, edit, re]) => ({ name, re, r: await runCli(['inspect', '--model', variant(name, edit)], { cwd: repoRoot }) })));
    for (const { name, re, r } of results) {
      assert.equal(r.code, 2, `${name}: exit ${r.code}\n${r.stderr}`);
      assert.equal(r.stdout, '');
      const lines = r.stderr.trim().split('\n');
      assert.equal(lines.length, 1, `${name}: ${r.stderr}`);
      assert.ok(lines[0]!.startsWith(`safekeep: ${join(root, name, 'config.json')}: `), lines[0]);
      assert.match(lines[0]!, re);
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
