/**
 * `safekeep forward` / `safekeep generate` through the real CLI (spawned), against the HF reference fixture
 * (llama3-tiny-f32), plus user errors → exit 2 with one line on stderr.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { writeDirectionsFile } from '../src/experiments/directions-file.ts';
import { repoRoot, sharedPath } from './helpers/shared.ts';
import { maxAbsDiff, readAllF32 } from './helpers/engine.ts';

const root = sharedPath('fixtures', 'hf-reference');
const TOL = 1e-4;

function cli(args: string[], env: Record<string, string>) {
  const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], {
    cwd: repoRoot, encoding: 'utf8', env: { ...process.env, ...env, SAFEKEEP_THREADS: '2' },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('engine CLI: forward and generate', { skip: root ? false : 'needs ../shared/fixtures/hf-reference (set SAFEKEEP_SHARED)' }, () => {
  let tmp: string;
  let env: Record<string, string>;
  let inputs: { seqs: number[][]; steer_v: number[]; steer_alpha: number; steer_layer: number };
  const model = () => join(root!, 'models', 'llama3-tiny-f32');

  before(() => {
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-cli-'));
    env = { SAFEKEEP_CACHE: join(tmp, 'cache') };
    inputs = JSON.parse(readFileSync(join(root!, 'inputs.json'), 'utf8'));
    writeFileSync(join(tmp, 'ids.json'), JSON.stringify({ input_ids: inputs.seqs }));
    writeFileSync(join(tmp, 'v.json'), JSON.stringify({ vector: inputs.steer_v }));
  });
  after(() => { if (tmp) rmSync(tmp, { recursive: true, force: true }); });

  test('forward writes hidden_states.i [L+1, T_i, d] and logits.i [T_i, V] matching HF', () => {
    const out = join(tmp, 'out.safetensors');
    const r = cli(['forward', '--model', model(), '--ids', join(tmp, 'ids.json'), '--out', out], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr.trim().split('\n').length, 1, 'one-line summary');
    const got = readAllF32(out);
    const refs = readAllF32(join(root!, 'refs', 'llama3-tiny-f32.safetensors'));
    // stdout: each sequence's greedy next token (ids: this fixture folder has no tokenizer)
    const argmax = (xs: ArrayLike<number>) => { let b = 0; for (let i = 1; i < xs.length; i++) if (xs[i]! > xs[b]!) b = i; return b; };
    assert.equal(r.stdout, inputs.seqs.map((_, i) => `${argmax(refs.get(`seq${i}.logits`)!.data.subarray(-512))}\n`).join(''));
    assert.equal(got.size, 6);
    inputs.seqs.forEach((s, i) => {
      const h = got.get(`hidden_states.${i}`)!;
      const lg = got.get(`logits.${i}`)!;
      assert.deepEqual(h.shape, [5, s.length, 64]);
      assert.deepEqual(lg.shape, [s.length, 512]);
      assert.ok(maxAbsDiff(lg.data, refs.get(`seq${i}.logits`)!.data) <= TOL);
      const lo = refs.get(`seq${i}.layer_outputs`)!.data;
      assert.ok(maxAbsDiff(h.data.subarray(s.length * 64), lo) <= TOL);
      assert.ok(maxAbsDiff(h.data.subarray(0, s.length * 64), refs.get(`seq${i}.hidden_states`)!.data.subarray(0, s.length * 64)) <= TOL);
    });
  });

  test('generate with steering reproduces HF steered greedy ids and step logits', () => {
    const out = join(tmp, 'gen.json');
    const r = cli(['generate', '--model', model(), '--ids', join(tmp, 'ids.json'), '--max-new-tokens', '10', '--no-stop',
      '--steer-layer', String(inputs.steer_layer + 1), '--steer-vector', join(tmp, 'v.json'), '--alpha', String(inputs.steer_alpha), '--logits', 'all', '--out', out], env);
    assert.equal(r.code, 0, r.stderr);
    const meta = JSON.parse(readFileSync(join(root!, 'refs', 'llama3-tiny-f32.json'), 'utf8'));
    const refs = readAllF32(join(root!, 'refs', 'llama3-tiny-f32.safetensors'));
    const j = JSON.parse(readFileSync(out, 'utf8')) as { sequences: { generated_ids: number[]; step_logits: number[][]; first_token_hidden: number[][] }[] };
    assert.equal(j.sequences.length, 3);
    const s0 = j.sequences[0]!;
    assert.deepEqual(s0.generated_ids, meta.steer.new_ids);
    assert.equal(r.stdout.split('\n')[0], meta.steer.new_ids.join(' '), 'stdout: the generated ids (no tokenizer in this folder)');
    assert.equal(s0.step_logits.length, 10);
    assert.ok(maxAbsDiff(s0.step_logits.flat(), refs.get('steer.step_logits')!.data) <= TOL);
    assert.equal(s0.first_token_hidden.length, 5);
    assert.equal(s0.first_token_hidden[0]!.length, 64);
  });

  test('generate --steer-vector FILE.safetensors#name (a directions file, and one imported from a control vector) = the same row as V.json', () => {
    const l = inputs.steer_layer + 1;
    // rows other than l hold other vectors: the row of --steer-layer is the one used
    const rows = Array.from({ length: 5 }, (_, r) => (r === l ? inputs.steer_v : inputs.steer_v.map((x, i) => Math.sin(r + i))));
    const dirs = join(tmp, 'directions.safetensors');
    writeDirectionsFile(dirs, { 'refusal.chatbot': { layers: 5, d: 64, data: Float64Array.from(rows.flat()) } }, { model: 'llama3-tiny', lStar: l, layerRule: 'cv', schemaPairs: 'all', provenance: {} });
    const meta = JSON.parse(readFileSync(join(root!, 'refs', 'llama3-tiny-f32.json'), 'utf8'));
    const gen = (spec: string) => {
      const out = join(tmp, `gen-${spec.length}.json`);
      const r = cli(['generate', '--model', model(), '--ids', join(tmp, 'ids.json'), '--max-new-tokens', '10', '--no-stop',
        '--steer-layer', String(l), '--steer-vector', spec, '--alpha', String(inputs.steer_alpha), '--out', out], env);
      assert.equal(r.code, 0, r.stderr);
      return (JSON.parse(readFileSync(out, 'utf8')) as { sequences: { generated_ids: number[] }[] }).sequences[0]!.generated_ids;
    };
    assert.deepEqual(gen(`${dirs}#refusal.chatbot`), meta.steer.new_ids);
    // through llama.cpp's format and back: direction.(l−1) → row l
    const gguf = join(tmp, 'v.gguf');
    assert.equal(cli(['directions', 'export', `${dirs}#refusal.chatbot`, '--gguf', gguf], env).code, 0);
    const back = join(tmp, 'back.safetensors');
    assert.equal(cli(['directions', 'import', gguf, '--out', back], env).code, 0);
    assert.deepEqual(gen(`${back}#control`), meta.steer.new_ids);
    const bad = cli(['generate', '--model', model(), '--ids', join(tmp, 'ids.json'), '--max-new-tokens', '1', '--steer-layer', String(l),
      '--steer-vector', `${dirs}#nope`, '--alpha', '1'], env);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /no direction 'nope' \(has refusal\.chatbot\)/);
  });

  test('generate --steer-positions generated: first step = unsteered (prompt untouched), later steps steered; recorded', () => {
    const base = ['generate', '--model', model(), '--ids', join(tmp, 'ids.json'), '--max-new-tokens', '6', '--no-stop'];
    const steer = ['--steer-layer', String(inputs.steer_layer + 1), '--steer-vector', join(tmp, 'v.json'), '--alpha', String(inputs.steer_alpha)];
    type Out = { steering: { positions: string } | null; sequences: { generated_ids: number[]; step_logits: number[][]; first_token_hidden: number[][] }[] };
    const run = (extra: string[], name: string): Out => {
      const out = join(tmp, name);
      const r = cli([...base, ...extra, '--logits', 'all', '--out', out], env);
      assert.equal(r.code, 0, r.stderr);
      return JSON.parse(readFileSync(out, 'utf8')) as Out;
    };
    const plain = run([], 'plain.json');
    const gen = run([...steer, '--steer-positions', 'generated'], 'gen-positions.json');
    const all = run(steer, 'all-positions.json');
    assert.equal(plain.steering, null);
    assert.equal(gen.steering!.positions, 'generated');
    assert.equal(all.steering!.positions, 'all');
    for (const [i, p] of plain.sequences.entries()) {
      const g = gen.sequences[i]!;
      assert.deepEqual(g.step_logits[0], p.step_logits[0], 'the prompt (and the first choice) is unsteered');
      assert.ok(maxAbsDiff(g.first_token_hidden.flat(), p.first_token_hidden.flat()) > 1e-3, 'the generated token is steered');
    }
    assert.ok(maxAbsDiff(all.sequences[0]!.step_logits[0]!, plain.sequences[0]!.step_logits[0]!) > 1e-3, "'all' steers the prompt");
  });

  test('bad input exits 2 with one clear line', () => {
    writeFileSync(join(tmp, 'bad-ids.json'), JSON.stringify({ input_ids: [[1, 2, 9999]] }));
    writeFileSync(join(tmp, 'not-json.json'), '{"input_ids": [[1, 2');
    const cases: [string[], RegExp][] = [
      [['forward', '--model', model(), '--ids', join(tmp, 'bad-ids.json'), '--out', join(tmp, 'x.safetensors')], /token id 9999 is not in 0\.\.511/],
      [['forward', '--model', model(), '--ids', join(tmp, 'not-json.json'), '--out', join(tmp, 'x.safetensors')], /not-json\.json:1:\d+: invalid JSON/],
      [['forward', '--model', join(tmp, 'nope'), '--ids', join(tmp, 'ids.json'), '--out', join(tmp, 'x.safetensors')], /no such folder/],
      [['generate', '--model', model(), '--ids', join(tmp, 'ids.json'), '--max-new-tokens', '2', '--steer-layer', '9',
        '--steer-vector', join(tmp, 'v.json'), '--alpha', '1', '--out', join(tmp, 'x.json')], /out of range 0\.\.4/],
      [['generate', '--model', model(), '--ids', join(tmp, 'ids.json'), '--max-new-tokens', '2', '--steer-layer', '1', '--out', join(tmp, 'x.json')], /needs all of/],
      [['forward', '--model', model(), '--ids', join(tmp, 'ids.json'), '--out', join(tmp, 'x.safetensors'), '--dtype', 'f8'], /--dtype must be one of f32, bf16, f16, bf16w, q8, q4/],
    ];
    const cudaLib = join(repoRoot, 'node_modules', 'onnxruntime-node', 'bin', 'napi-v6', process.platform, process.arch, 'libonnxruntime_providers_cuda.so');
    if (!existsSync(cudaLib)) {
      cases.push([['forward', '--model', model(), '--ids', join(tmp, 'ids.json'), '--out', join(tmp, 'x.safetensors'), '--device', 'cuda'], /CUDA execution provider is not installed/]);
    }
    for (const [args, msg] of cases) {
      const r = cli(args, env);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, msg);
      assert.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
    }
  });
});

test('a broken checkpoint through the CLI: one clear line, exit 2 (truncated weights, unknown model_type)', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-cli-bad-'));
  try {
    const env = { SAFEKEEP_CACHE: join(tmp, 'cache') };
    writeFileSync(join(tmp, 'ids.json'), JSON.stringify({ input_ids: [[3, 4, 5]] }));
    const small = { numLayers: 1, hiddenSize: 16, numHeads: 2, numKvHeads: 1, intermediateSize: 32, vocabSize: 40 };
    await writeRandomCheckpoint(join(tmp, 'ok'), 'mistral', { seed: 1, ...small });
    const ok = cli(['forward', '--model', join(tmp, 'ok'), '--ids', join(tmp, 'ids.json'), '--out', join(tmp, 'o.safetensors')], env);
    assert.equal(ok.code, 0, ok.stderr);
    await writeRandomCheckpoint(join(tmp, 'trunc'), 'mistral', { seed: 1, ...small });
    const st = join(tmp, 'trunc', 'model.safetensors');
    truncateSync(st, readFileSync(st).length - 100);
    await writeRandomCheckpoint(join(tmp, 'arch'), 'mistral', { seed: 1, ...small });
    const cfgPath = join(tmp, 'arch', 'config.json');
    writeFileSync(cfgPath, JSON.stringify({ ...JSON.parse(readFileSync(cfgPath, 'utf8')), model_type: 'gpt2' }));
    for (const [dir, msg] of [['trunc', /model\.safetensors/], ['arch', /gpt2/]] as const) {
      const r = cli(['forward', '--model', join(tmp, dir), '--ids', join(tmp, 'ids.json'), '--out', join(tmp, 'x.safetensors')], env);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, msg);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
