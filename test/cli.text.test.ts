/**
 * Text in, text out through the real CLI (spawned) on the planted model: `generate --chat/--prompt` prints the
 * decoded greedy answer the Float64 oracle produces, writes logits only when asked (--logits none|last|all);
 * `forward --chat --logits last` writes [1, vocab] logits equal to the oracle's and prints the next token;
 * `generate --intervene` takes its vector from a directions file; bad input exits 2 with one line.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import type { Checkpoint } from '../src/checkpoint/types.ts';
import { repoRoot } from '../src/data/locate.ts';
import { referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import { writeDirectionsFile } from '../src/experiments/directions-file.ts';
import { writePlantedModel, type PlantedTruth } from '../src/experiments/planted.ts';
import { loadPromptTokenizer, type PromptTokenizer } from '../src/prompts/tokenizer.ts';
import { maxAbsDiff, readAllF32 } from './helpers/engine.ts';

describe('forward / generate: text in, text out', () => {
  let tmp: string;
  let model: string;
  let ck: Checkpoint;
  let tok: PromptTokenizer;
  let truth: PlantedTruth;
  const cli = (args: string[]) => {
    const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], {
      cwd: repoRoot, encoding: 'utf8', env: { ...process.env, SAFEKEEP_THREADS: '1', SAFEKEEP_CACHE: join(tmp, 'cache'), SAFEKEEP_QUIET: '1' },
    });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  };
  const chat = (text: string) => tok.encode(tok.render([{ role: 'user', content: text }], { addGenerationPrompt: true }));

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'safekeep-cli-text-'));
    model = join(tmp, 'planted');
    truth = await writePlantedModel(model);
    ck = await loadCheckpoint(model);
    tok = await loadPromptTokenizer(model);
  });
  after(() => { if (tmp) rmSync(tmp, { recursive: true, force: true }); });

  test('generate --chat prints the oracle answer; no logits by default; --logits last / --prompt', () => {
    const out = join(tmp, 'g.json');
    const r = cli(['generate', '--model', model, '--chat', 'how do i build a bomb', '--max-new-tokens', '10', '--out', out]);
    assert.equal(r.code, 0, r.stderr);
    const ref = referenceGenerate(ck, chat('how do i build a bomb'), { maxNewTokens: 10 });
    const text = tok.decode(ref.generatedIds, { skipSpecial: true });
    assert.match(text, /^sorry/, 'the planted model refuses');
    assert.equal(r.stdout, `${text}\n`);
    const j = JSON.parse(readFileSync(out, 'utf8'));
    assert.equal(j.logits, 'none');
    assert.equal(j.sequences[0].text, text);
    assert.deepEqual(j.sequences[0].generated_ids, ref.generatedIds);
    assert.ok(!('step_logits' in j.sequences[0]), 'no logits unless asked');

    const raw = 'how do i bake a cake';
    const r2 = cli(['generate', '--model', model, '--prompt', raw, '--max-new-tokens', '3', '--no-stop', '--logits', 'last', '--out', out]);
    assert.equal(r2.code, 0, r2.stderr);
    const ref2 = referenceGenerate(ck, tok.encode(raw), { maxNewTokens: 3, stopIds: [] });
    const j2 = JSON.parse(readFileSync(out, 'utf8'));
    assert.equal(j2.sequences[0].step_logits.length, 1);
    assert.ok(maxAbsDiff(j2.sequences[0].step_logits[0], ref2.stepLogits.subarray(2 * ck.config.vocabSize)) <= 1e-4);
    assert.equal(r2.stdout, `${tok.decode(ref2.generatedIds, { skipSpecial: true })}\n`);
  });

  test('forward --chat --logits last: [1, vocab] logits = oracle, the next token printed', () => {
    const out = join(tmp, 'f.safetensors');
    const r = cli(['forward', '--model', model, '--chat', 'how do i build a bomb', '--logits', 'last', '--out', out]);
    assert.equal(r.code, 0, r.stderr);
    const ids = chat('how do i build a bomb');
    const ref = referenceForward(ck, ids);
    const V = ck.config.vocabSize;
    const t = readAllF32(out);
    assert.deepEqual(t.get('logits.0')!.shape, [1, V]);
    assert.ok(maxAbsDiff(t.get('logits.0')!.data, ref.logits.subarray((ids.length - 1) * V)) <= 1e-4);
    assert.deepEqual(t.get('hidden_states.0')!.shape, [ck.config.numLayers + 1, ids.length, ck.config.hiddenSize]);
    assert.equal(r.stdout, 'sorry\n');
    const none = cli(['forward', '--model', model, '--chat', 'hi', '--logits', 'none', '--out', out]);
    assert.equal(none.code, 0, none.stderr);
    assert.ok(!readAllF32(out).has('logits.0'));
  });

  test('generate --intervene with a vector from a directions file equals the oracle', () => {
    const L = ck.config.numLayers;
    const d = ck.config.hiddenSize;
    const data = new Float64Array((L + 1) * d);
    for (let l = 0; l <= L; l++) data.set(truth.r, l * d);
    writeDirectionsFile(join(tmp, 'directions.safetensors'), { 'refusal.chatbot': { layers: L + 1, d, data } }, { model: 'planted', lStar: 2, layerRule: 'cv', schemaPairs: 'all', provenance: {} });
    writeFileSync(join(tmp, 'iv.json'), JSON.stringify({ interventions: [{ layer: L, kind: 'ablate', vector: 'directions.safetensors#refusal.chatbot' }] }));
    const r = cli(['generate', '--model', model, '--chat', 'how do i build a bomb', '--max-new-tokens', '4', '--intervene', join(tmp, 'iv.json')]);
    assert.equal(r.code, 0, r.stderr);
    const ref = referenceGenerate(ck, chat('how do i build a bomb'), { maxNewTokens: 4, interventions: [{ layer: L, kind: 'ablate', vector: truth.r }] });
    assert.equal(r.stdout, `${tok.decode(ref.generatedIds, { skipSpecial: true })}\n`);
    assert.doesNotMatch(r.stdout, /^sorry/, 'refusal direction ablated: no refusal');
  });

  test('bad input: exit 2, one line', () => {
    writeFileSync(join(tmp, 'ids.json'), JSON.stringify({ input_ids: [[1, 2]] }));
    writeFileSync(join(tmp, 'iv-missing.json'), JSON.stringify({ interventions: [{ layer: 1, kind: 'ablate', vector: 'nope.safetensors' }] }));
    const cases: [string[], RegExp][] = [
      [['generate', '--model', model, '--ids', join(tmp, 'ids.json'), '--chat', 'x', '--max-new-tokens', '1'], /exactly one of --ids, --prompt, --chat/],
      [['forward', '--model', model, '--out', join(tmp, 'x.safetensors')], /exactly one of --ids, --prompt, --chat/],
      [['generate', '--model', model, '--chat', 'x', '--max-new-tokens', '1', '--logits', 'some'], /--logits/],
      [['generate', '--model', model, '--chat', 'x', '--max-new-tokens', '1', '--intervene', join(tmp, 'iv-missing.json')], /nope\.safetensors/],
    ];
    for (const [args, re] of cases) {
      const r = cli(args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr.trim(), re);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    }
  });
});
