/**
 * Every way a checkpoint can be broken gives one clear SafekeepError naming the file (and tensor), and from the
 * CLI (`safekeep inspect`) exit code 2 with a one-line message, no stack.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { readSafetensorsHeader, writeSafetensors, type TensorToWrite } from '../src/checkpoint/safetensors.ts';
import { readTensorF32 } from '../src/checkpoint/read.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { runCli } from './helpers/cli.ts';

const root = mkdtempSync(join(tmpdir(), 'safekeep-bad-'));
after(() => rmSync(root, { recursive: true, force: true }));
const good = await writeRandomCheckpoint(join(root, 'good'), 'qwen2', { seed: 1, numLayers: 2 });
const goodSharded = await writeRandomCheckpoint(join(root, 'good-sharded'), 'llama', { seed: 1, numLayers: 2, shards: 2 });

let n = 0;
function copy(src = good): string {
  const d = join(root, `case${n++}`);
  cpSync(src, d, { recursive: true });
  return d;
}

/** Rewrites model.safetensors with a hand-made header and the original data section. */
function rewriteHeader(dir: string, edit: (h: Record<string, { dtype: string; shape: number[]; data_offsets: number[] }>) => void): void {
  const p = join(dir, 'model.safetensors');
  const bytes = readFileSync(p);
  const n8 = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n8).toString('utf8'));
  edit(header);
  let text = JSON.stringify(header);
  text += ' '.repeat((8 - (text.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(text.length));
  writeFileSync(p, Buffer.concat([len, Buffer.from(text), bytes.subarray(8 + n8)]));
}

/** Rewrites model.safetensors through the writer with tensors changed. */
function rewriteTensors(dir: string, edit: (t: Record<string, TensorToWrite>) => void): void {
  const p = join(dir, 'model.safetensors');
  const t: Record<string, TensorToWrite> = {};
  for (const e of readSafetensorsHeader(p).entries) t[e.name] = { dtype: 'F32', shape: e.shape, data: readTensorF32({ ...e, dtype: 'F32' }) };
  edit(t);
  writeSafetensors(p, t);
}

const cases: { name: string; make: () => string; msg: RegExp }[] = [
  {
    name: 'truncated file',
    make: () => { const d = copy(); const p = join(d, 'model.safetensors'); truncateSync(p, readFileSync(p).length - 100); return d; },
    msg: /model\.safetensors: tensor model\.norm\.weight: data_offsets \[\d+, \d+\] run past the end of the data section .*truncated/,
  },
  {
    name: 'file truncated inside the header',
    make: () => { const d = copy(); truncateSync(join(d, 'model.safetensors'), 200); return d; },
    msg: /model\.safetensors: header length \d+ runs past the end of the file \(200 bytes; truncated\?\)/,
  },
  {
    name: 'insane header length',
    make: () => { const d = copy(); const p = join(d, 'model.safetensors'); const b = readFileSync(p); b.writeBigUInt64LE(1n << 60n, 0); writeFileSync(p, b); return d; },
    msg: /model\.safetensors: header length \d+ bytes is not sane/,
  },
  {
    name: 'corrupted header JSON',
    make: () => { const d = copy(); const p = join(d, 'model.safetensors'); const b = readFileSync(p); b.write('#', 9); writeFileSync(p, b); return d; },
    msg: /model\.safetensors: header is not valid JSON/,
  },
  {
    name: 'offsets past the end',
    make: () => { const d = copy(); rewriteHeader(d, (h) => { const e = h['model.norm.weight']!; e.data_offsets = [e.data_offsets[0]! + 1024, e.data_offsets[1]! + 1024]; }); return d; },
    msg: /model\.safetensors: tensor model\.norm\.weight: data_offsets \[\d+, \d+\] run past the end of the data section/,
  },
  {
    name: 'overlapping offsets',
    make: () => {
      const d = copy();
      rewriteHeader(d, (h) => { h['model.norm.weight']!.data_offsets = [...h['model.layers.1.self_attn.v_proj.weight']!.data_offsets.map((x, i) => (i === 0 ? x : x - h['model.layers.1.self_attn.v_proj.weight']!.data_offsets[1]! + h['model.layers.1.self_attn.v_proj.weight']!.data_offsets[0]! + 256))]; });
      return d;
    },
    msg: /model\.safetensors: tensor model\.(norm\.weight|layers\.1\.self_attn\.v_proj\.weight): data_offsets \[\d+, \d+\] overlap tensor/,
  },
  {
    name: 'dtype/byte-length mismatch',
    make: () => { const d = copy(); rewriteHeader(d, (h) => { h['model.norm.weight']!.dtype = 'F16'; }); return d; },
    msg: /model\.safetensors: tensor model\.norm\.weight: F16 \[64\] needs 128 bytes but data_offsets \[\d+, \d+\] span 256 \(dtype\/shape\/byte-length mismatch\)/,
  },
  {
    name: 'unsupported dtype for a model tensor',
    make: () => { const d = copy(); rewriteHeader(d, (h) => { h['model.norm.weight']!.dtype = 'I32'; }); return d; },
    msg: /model\.safetensors: tensor model\.norm\.weight has dtype I32 \(supported: F32, BF16, F16\)/,
  },
  {
    name: 'missing tensor',
    make: () => { const d = copy(); rewriteTensors(d, (t) => { delete t['model.layers.1.mlp.up_proj.weight']; }); return d; },
    msg: /model\.safetensors: tensor model\.layers\.1\.mlp\.up_proj\.weight is missing/,
  },
  {
    name: 'missing q/k/v bias of qwen2',
    make: () => { const d = copy(); rewriteTensors(d, (t) => { delete t['model.layers.0.self_attn.k_proj.bias']; }); return d; },
    msg: /tensor model\.layers\.0\.self_attn\.k_proj\.bias is missing/,
  },
  {
    name: 'wrong shape',
    make: () => { const d = copy(); rewriteTensors(d, (t) => { t['model.layers.0.mlp.gate_proj.weight']!.shape = [64, 128]; }); return d; },
    msg: /model\.safetensors: tensor model\.layers\.0\.mlp\.gate_proj\.weight has shape \[64,128\], expected \[128,64\] from config\.json/,
  },
  {
    name: 'unsupported model_type',
    make: () => { const d = copy(); const p = join(d, 'config.json'); writeFileSync(p, JSON.stringify({ ...JSON.parse(readFileSync(p, 'utf8')), model_type: 'gpt2' })); return d; },
    msg: /config\.json: model_type "gpt2" is not supported \(supported: llama, mistral, qwen2, qwen3\)/,
  },
  {
    name: 'missing config.json',
    make: () => { const d = copy(); unlinkSync(join(d, 'config.json')); return d; },
    msg: /case\d+: no config\.json \(not a Hugging Face checkpoint folder\)/,
  },
  {
    name: 'config.json not JSON',
    make: () => { const d = copy(); writeFileSync(join(d, 'config.json'), '{"model_type": "llama",'); return d; },
    msg: /config\.json: invalid JSON/,
  },
  {
    name: 'no weights',
    make: () => { const d = copy(); unlinkSync(join(d, 'model.safetensors')); return d; },
    msg: /no model\.safetensors or model\.safetensors\.index\.json/,
  },
  {
    name: 'sharded: a shard is missing',
    make: () => { const d = copy(goodSharded); unlinkSync(join(d, 'model-00002-of-00002.safetensors')); return d; },
    msg: /model\.safetensors\.index\.json: shard .*model-00002-of-00002\.safetensors is missing/,
  },
  {
    name: 'sharded: index points at the wrong shard',
    make: () => {
      const d = copy(goodSharded);
      const p = join(d, 'model.safetensors.index.json');
      const idx = JSON.parse(readFileSync(p, 'utf8'));
      const name = Object.keys(idx.weight_map).find((k) => idx.weight_map[k] === 'model-00001-of-00002.safetensors')!;
      idx.weight_map[name] = 'model-00002-of-00002.safetensors';
      writeFileSync(p, JSON.stringify(idx));
      return d;
    },
    msg: /model-00002-of-00002\.safetensors: tensor .* is missing \(model\.safetensors\.index\.json says/,
  },
];

test('the good checkpoints load (so each case below fails for its own reason)', async () => {
  await loadCheckpoint(good);
  await loadCheckpoint(goodSharded);
});

for (const c of cases) {
  test(`bad input: ${c.name} → SafekeepError naming the file and what is wrong`, async () => {
    const d = c.make();
    await assert.rejects(loadCheckpoint(d), (e: unknown) => {
      assert.ok(e instanceof SafekeepError, String(e));
      assert.match(e.message, c.msg);
      assert.equal(e.exitCode, 2);
      return true;
    });
  });
}

test('safekeep inspect: prints the model; every bad input exits 2 with one line, no stack', async () => {
  const ok = await runCli(['inspect', '--model', good], { cwd: root });
  assert.equal(ok.code, 0, ok.stderr);
  // qwen2, 2 layers, hidden 64, 4 heads / 2 KV × 16, intermediate 128, vocab 512, tied, q/k/v bias
  const perLayer = 2 * 64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 64 + 2 * 32 + 3 * 64 * 128;
  const params = 512 * 64 + 2 * perLayer + 64;
  assert.match(ok.stdout, /family\s+qwen2 \(Qwen2ForCausalLM\)/);
  assert.match(ok.stdout, /layers\s+2\n/);
  assert.match(ok.stdout, /d_model\s+64\n/);
  assert.match(ok.stdout, /heads\s+4 \(2 KV, head_dim 16\)/);
  assert.match(ok.stdout, /vocab\s+512\n/);
  assert.match(ok.stdout, /dtype\s+F32\n/);
  assert.match(ok.stdout, new RegExp(`parameters\\s+${params} `));
  assert.match(ok.stdout, /eos ids\s+2\n/);
  const js = await runCli(['inspect', '--model', goodSharded, '--json'], { cwd: root });
  assert.equal(js.code, 0, js.stderr);
  const info = JSON.parse(js.stdout);
  assert.equal(info.family, 'llama');
  assert.equal(info.files, 2);
  assert.deepEqual(info.rope.type, 'llama3');

  const picked = cases.filter((_, i) => i % 2 === 0 || /model_type|config\.json|wrong shape|missing tensor/.test(cases[i]!.name));
  const results = await Promise.all(picked.map(async (c) => ({ c, r: await runCli(['inspect', '--model', c.make()], { cwd: root }) })));
  for (const { c, r } of results) {
    assert.equal(r.code, 2, `${c.name}: exit ${r.code}\n${r.stderr}`);
    assert.equal(r.stdout, '');
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, `${c.name}: ${r.stderr}`);
    assert.match(lines[0]!, /^safekeep: /);
    assert.match(lines[0]!, c.msg);
  }
  const none = await runCli(['inspect', '--model', join(root, 'nope', 'x')], { cwd: root });
  assert.equal(none.code, 2);
  assert.match(none.stderr, /^safekeep: --model .*nope\/x: no such folder\n$/);
});
