/**
 * `--intervene FILE.json` through the real CLI (spawned): `safekeep forward` and `safekeep generate` with the
 * interventions of test/fixtures/hf5-intervene reproduce transformers' hooked hidden states and greedy ids; bad
 * files exit 2 with one line.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { maxAbsDiff, readAllF32 } from './helpers/engine.ts';
import { HF5 } from './helpers/hf5.ts';
import { repoRoot } from './helpers/shared.ts';

const DIR = join(repoRoot, 'test', 'fixtures', 'hf5-intervene');
const index = JSON.parse(readFileSync(join(DIR, 'index.json'), 'utf8')) as {
  prompt: number[]; new_tokens: number; cases: Record<string, Record<string, { interventions: unknown[]; greedy: number[] }>>;
};
const TAG = 'llama-default';
const SET = 'several';
const model = join(HF5, TAG, 'model');
let tmp: string;

function cli(args: string[]) {
  const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], {
    cwd: repoRoot, encoding: 'utf8', env: { ...process.env, SAFEKEEP_CACHE: join(tmp, 'cache'), SAFEKEEP_THREADS: '1' },
  });
  return { code: r.status, stderr: r.stderr };
}

before(() => {
  tmp = mkdtempSync(join(tmpdir(), 'safekeep-cli-intervene-'));
  writeFileSync(join(tmp, 'ids.json'), JSON.stringify({ input_ids: [index.prompt] }));
  writeFileSync(join(tmp, 'iv.json'), JSON.stringify({ interventions: index.cases[TAG]![SET]!.interventions }));
});
after(() => { if (tmp) rmSync(tmp, { recursive: true, force: true }); });

test('forward --intervene: hidden states and logits as under transformers hooks', () => {
  const out = join(tmp, 'out.safetensors');
  const r = cli(['forward', '--model', model, '--ids', join(tmp, 'ids.json'), '--intervene', join(tmp, 'iv.json'), '--out', out]);
  assert.equal(r.code, 0, r.stderr);
  const got = readAllF32(out);
  const refs = readAllF32(join(DIR, `${TAG}.${SET}.safetensors`));
  assert.ok(maxAbsDiff(got.get('hidden_states.0')!.data, refs.get('hidden')!.data) <= 1e-4);
  assert.ok(maxAbsDiff(got.get('logits.0')!.data, refs.get('logits')!.data) <= 1e-4);
});

test('generate --intervene: greedy ids as under transformers hooks; the file records the interventions', () => {
  const out = join(tmp, 'gen.json');
  const r = cli(['generate', '--model', model, '--ids', join(tmp, 'ids.json'), '--max-new-tokens', String(index.new_tokens), '--no-stop',
    '--intervene', join(tmp, 'iv.json'), '--out', out]);
  assert.equal(r.code, 0, r.stderr);
  const j = JSON.parse(readFileSync(out, 'utf8')) as { interventions: { layer: number; kind: string }[]; sequences: { generated_ids: number[] }[] };
  assert.deepEqual(j.sequences[0]!.generated_ids, index.cases[TAG]![SET]!.greedy);
  assert.deepEqual(j.interventions.map((x) => `${x.kind}@${x.layer}`), ['ablate@0', 'add@1', 'clamp@1', 'ablate@2']);
});

test('bad --intervene files exit 2 with one line', () => {
  const cases: [unknown, RegExp][] = [
    [{ interventions: [] }, /non-empty list/],
    [{ interventions: [{ layer: 1, kind: 'scale', vector: [1] }] }, /kind must be one of add, ablate, clamp/],
    [{ interventions: [{ layer: 1, kind: 'ablate', vector: [1, 2] }] }, /d_model is 32/],
    [{ interventions: [{ layer: 9, kind: 'ablate', vector: new Array(32).fill(1) }] }, /out of range 0\.\.2/],
    // read as the server reads them: nothing silently unused
    [{ interventions: [{ layer: 1, kind: 'add', vector: new Array(32).fill(1), alpha: 1, postions: 'generated' }] }, /bad\.json: interventions\[0\]\.postions: unknown field \(known: layer, kind, vector, alpha, positions\)/],
    [{ interventions: [{ layer: 1, kind: 'ablate', vector: new Array(32).fill(1), alpha: 2 }] }, /interventions\[0\]\.alpha: an ablation has no alpha/],
    [{ interventions: [{ layer: 1, kind: 'clamp', vector: new Array(32).fill(1) }] }, /interventions\[0\]\.alpha must be a finite number .*got undefined/],
    [{ interventions: [{ layer: 1.5, kind: 'add', vector: new Array(32).fill(1), alpha: 1 }] }, /interventions\[0\]\.layer must be an integer, got 1\.5/],
  ];
  for (const [file, msg] of cases) {
    writeFileSync(join(tmp, 'bad.json'), JSON.stringify(file));
    const r = cli(['forward', '--model', model, '--ids', join(tmp, 'ids.json'), '--intervene', join(tmp, 'bad.json'), '--out', join(tmp, 'x.safetensors')]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, msg);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  }
});
