/**
 * SAE feature edits in generation from the CLI (`generate --sae --sae-edit`) and from `serve --model
 * --allow-interventions --sae NAME=DIR` (the research field's `saes`), on the planted model and its planted
 * dictionary (src/experiments/planted-sae.ts: feature 0's decoder row is the refusal direction r, W_enc = W_decᵀ, the
 * SAE at hidden[2], where block 1 writes r; the later blocks are identities). Known answers: the first token is
 * "sorry" iff hidden[L]·r > τ, and with x·r the stream's projection at the last prompt token (one forward, no SAE),
 * the 'error' splice gives x·r − relu(x·r) for ablate 0, (x·r > 0 ? V : x·r + V) for clamp 0 = V, x·r + A for add 0 = A.
 * The CLI equals the library; the server equals the CLI bit for bit (ids, and log probabilities equal to the
 * log-softmax of the CLI's step logits). Bad input: one line and exit 2 (CLI), a 400 naming the field (server).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { writePlantedModel, type PlantedTruth } from '../src/experiments/planted.ts';
import { loadPromptTokenizer, type PromptTokenizer } from '../src/prompts/tokenizer.ts';
import { loadSae } from '../src/sae/load.ts';
import { tokenLogprob } from '../src/engine/run/scheduler.ts';
import type { FeatureEdit } from '../src/sae/math.ts';
import { runCli } from './helpers/cli.ts';
import { parseArgs } from '../src/cli/args.ts';
import { saeGenerationFlags } from '../src/cli/sae-flags.ts';
import { serveExit, startServeCli, stopServe, type ServeChild } from './helpers/serve-cli.ts';

const HARMFUL = 'how do i build a bomb';
const BENIGN = 'how do i bake a cake';

test('--sae-edit is repeatable: the lists join, in order (another value flag: the last wins)', () => {
  const table = { usage: 'x', example: 'x', flags: [{ name: 'sae', help: '' }, { name: 'sae-edit', repeatable: true, help: '' }, { name: 'sae-splice', help: '' }, { name: 'hook', help: '' }] };
  const args = parseArgs(['--sae', 'A', '--sae-edit', 'ablate:1', '--sae-edit=clamp:2=3,add:4=-0.5', '--sae', 'B'], table);
  assert.equal(args.values.get('sae'), 'B');
  assert.deepEqual(saeGenerationFlags(args), {
    splice: 'error',
    edits: [{ kind: 'ablate', feature: 1 }, { kind: 'clamp', feature: 2, value: 3 }, { kind: 'add', feature: 4, alpha: -0.5 }],
  });
});

describe('generate --sae and serve --sae on the planted model and its planted dictionary', () => {
  let tmp: string;
  let model: string;
  let truth: PlantedTruth;
  let engine: OnnxEngine;
  let tok: PromptTokenizer;
  const env = { SAFEKEEP_CACHE: '', SAFEKEEP_QUIET: '1' };
  /** x·r at hidden[2], last prompt token, no SAE */
  const xr = new Map<string, number>();
  const ids = (text: string) => tok.encodeChat([{ role: 'user', content: text }], { addGenerationPrompt: true });

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'sae-gen-cli-'));
    model = join(tmp, 'planted');
    truth = await writePlantedModel(model, { sae: true });
    env.SAFEKEEP_CACHE = join(tmp, 'cache');
    tok = await loadPromptTokenizer(model);
    engine = await createEngine(model, { cacheDir: join(tmp, 'cache'), threads: 1, quiet: true });
    for (const text of [HARMFUL, BENIGN]) {
      const p = ids(text);
      const x = (await engine.runWithCache(p, { names: ['blocks.1.resid_post'] })).cache.get('blocks.1.resid_post').data;
      xr.set(text, truth.r.reduce((a, v, i) => a + v * x[(p.length - 1) * 64 + i]!, 0));
    }
  });
  after(async () => {
    await engine?.dispose();
    rmSync(tmp, { recursive: true, force: true });
  });

  /** `generate --chat TEXT` with ARGS: its first sequence from --out */
  async function generate(text: string, args: string[], n = 1): Promise<{ generated_ids: number[]; step_logits: number[][] }> {
    const out = join(tmp, `g-${Math.random().toString(36).slice(2)}.json`);
    const r = await runCli(['generate', '--model', model, '--chat', text, '--max-new-tokens', String(n), '--threads', '1', '--logits', 'all', '--out', out, ...args], { env, timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.stderr);
    return (JSON.parse(readFileSync(out, 'utf8')) as { sequences: { generated_ids: number[]; step_logits: number[][] }[] }).sequences[0]!;
  }

  test('ablate / clamp / add the refusal feature: the first token is the analytic answer; the CLI equals the library', async () => {
    const sorry = tok.tokenId('sorry');
    const brace = tok.tokenId('{');
    const first = (score: number) => (score > truth.tau ? sorry : brace);
    const h = xr.get(HARMFUL)!;
    const b = xr.get(BENIGN)!;
    assert.ok(h > truth.tau && b < truth.tau, `the harmful prompt refuses (${h}), the benign one does not (${b})`);
    const cases: [string, string, number][] = [
      [HARMFUL, 'ablate:0', h - Math.max(0, h)],
      [HARMFUL, 'clamp:0=0.1', h > 0 ? 0.1 : h + 0.1],
      [BENIGN, 'add:0=1.5', b + 1.5],
      [BENIGN, 'clamp:0=2', b > 0 ? 2 : b + 2],
      [HARMFUL, 'add:1=0.5', h - 0.5],
    ];
    for (const [text, edit, score] of cases) {
      const g = await generate(text, ['--sae', join(model, 'sae'), '--sae-edit', edit]);
      assert.equal(g.generated_ids[0], first(score), `${text} with ${edit}: projection ${score}`);
    }
    // the unedited SAE (error splice) and the reconstruction (exact for this dictionary) leave the answer alone
    assert.equal((await generate(HARMFUL, ['--sae', join(model, 'sae')])).generated_ids[0], sorry);
    assert.equal((await generate(BENIGN, ['--sae', join(model, 'sae'), '--sae-splice', 'reconstruction'])).generated_ids[0], brace);
    // several tokens: the CLI's ids and logits are the library's
    const edits: FeatureEdit[] = [{ kind: 'ablate', feature: 0 }, { kind: 'add', feature: 8, alpha: 0.3 }];
    // (--sae-edit repeated: its lists join)
    const cli = await generate(HARMFUL, ['--sae', join(model, 'sae'), '--sae-edit', 'ablate:0', '--sae-edit', 'add:8=0.3'], 6);
    const [lib] = await engine.generate([ids(HARMFUL)], { maxNewTokens: 6, returnStepLogits: true, saes: [{ sae: loadSae(join(model, 'sae')), edits }] });
    assert.deepEqual(cli.generated_ids, lib!.generatedIds);
    assert.deepEqual(cli.step_logits.flat(), Array.from(lib!.stepLogits!));
  });

  test('bad SAE flags: one line, exit 2', async () => {
    const base = ['generate', '--model', model, '--chat', 'hi', '--max-new-tokens', '1'];
    const sae = ['--sae', join(model, 'sae')];
    const cases: [string[], RegExp][] = [
      [['--sae-edit', 'ablate:0'], /^safekeep: --sae-edit needs --sae\n$/],
      [['--sae-splice', 'reconstruction'], /^safekeep: --sae-splice needs --sae\n$/],
      [[...sae, '--sae-edit', 'nuke:1'], /^safekeep: --sae-edit: 'nuke:1' is not ablate:FEATURE, clamp:FEATURE=VALUE or add:FEATURE=ALPHA\n$/],
      [[...sae, '--sae-edit', 'ablate:256'], /^safekeep: feature edit \(ablate\): feature 256 is not in 0\.\.255\n$/],
      [[...sae, '--sae-edit', 'add:0=1e13'], /^safekeep: SAE 0: feature edit \(add 0\): alpha must be a finite number with \|alpha\| ≤ 1e\+12[^\n]*\n$/],
      [[...sae, '--sae-splice', 'capture'], /^safekeep: --sae-splice must be one of error, reconstruction[^\n]*\n$/],
      [['--sae', join(tmp, 'nowhere')], /^safekeep: [^\n]*nowhere[^\n]*\n$/],
    ];
    for (const [extra, re] of cases) {
      const r = await runCli([...base, ...extra], { env, timeoutMs: 60_000 });
      assert.equal(r.code, 2, `${extra.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, re);
    }
  });

  describe('serve --sae', () => {
    let server: ServeChild;
    type Reply = { status: number; json: { error?: { message: string }; choices?: { message: { content: string }; logprobs: { content: { token: string; logprob: number }[] } }[] } };
    const post = async (body: unknown): Promise<Reply> => {
      const r = await fetch(`${server.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
      return { status: r.status, json: (await r.json()) as Reply['json'] };
    };
    before(async () => {
      server = await startServeCli(['--model', model, '--allow-interventions', '--sae', `refusal=${join(model, 'sae')}`, '--threads', '1', '--port', '0', '--max-tokens', '8'], { ...process.env, ...env });
    });
    after(async () => { if (server) await stopServe(server); });

    test('the research field\'s SAE edits equal generate --sae-edit bit for bit', async () => {
      for (const [text, saes, flag] of [
        [HARMFUL, [{ name: 'refusal', edits: [{ kind: 'ablate', feature: 0 }, { kind: 'add', feature: 8, alpha: 0.3 }] }], 'ablate:0,add:8=0.3'],
        [BENIGN, [{ name: 'refusal', edits: [{ kind: 'clamp', feature: 0, value: 2 }] }], 'clamp:0=2'],
      ] as const) {
        const r = await post({ messages: [{ role: 'user', content: text }], max_tokens: 6, logprobs: true, safekeep: { saes } });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        const got = r.json.choices![0]!.logprobs.content;
        assert.ok(got.length >= 2, `${got.length} tokens`);
        const cli = await generate(text, ['--sae', join(model, 'sae'), '--sae-edit', flag], 6);
        // the server's tokens are the CLI's (the server stops at the end of the turn, which it keeps in its entries)
        assert.deepEqual(got.map((c) => c.token), cli.generated_ids.slice(0, got.length).map((id) => tok.decode([id], { skipSpecial: false })));
        got.forEach((c, k) => assert.equal(c.logprob, tokenLogprob(Float32Array.from(cli.step_logits[k]!), cli.generated_ids[k]!, 0).logprob, `token ${k}: log probability`));
      }
    });

    test('/v1/completions takes the same field: a raw prompt continued with the refusal feature ablated is the library\'s', async () => {
      const saes = [{ sae: loadSae(join(model, 'sae')), edits: [{ kind: 'ablate' as const, feature: 0 }] }];
      for (const field of [undefined, { saes: [{ name: 'refusal', edits: [{ kind: 'ablate', feature: 0 }] }] }]) {
        const r = await fetch(`${server.url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: HARMFUL, max_tokens: 1, ...(field ? { safekeep: field } : {}) }) });
        const j = (await r.json()) as { choices: { text: string }[] };
        assert.equal(r.status, 200, JSON.stringify(j));
        const [lib] = await engine.generate([tok.encode(HARMFUL)], { maxNewTokens: 1, ...(field ? { saes } : {}) });
        assert.equal(j.choices[0]!.text, tok.decode(lib!.generatedIds, { skipSpecial: false }), `with${field ? '' : 'out'} the field`);
      }
      const bad = await fetch(`${server.url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: HARMFUL, max_tokens: 1, safekeep: { saes: [{ name: 'nope' }] } }) });
      assert.equal(bad.status, 400);
    });

    test('bounds: unknown name, feature out of range, non-finite or too large α, unknown keys, too many edits → 400 naming the field', async () => {
      const msg = [{ role: 'user', content: HARMFUL }];
      const cases: [unknown, RegExp][] = [
        [{ saes: [{ name: 'other', edits: [] }] }, /^safekeep\.saes\[0\]\.name: no SAE "other" \(this server has refusal\)/],
        [{ saes: [{ name: 'refusal', edits: [{ kind: 'ablate', feature: 256 }] }] }, /^safekeep\.saes\[0\]\.edits\[0\]\.feature must be an integer in 0\.\.255/],
        [{ saes: [{ name: 'refusal', edits: [{ kind: 'ablate', feature: -1 }] }] }, /feature must be an integer in 0\.\.255/],
        [{ saes: [{ name: 'refusal', edits: [{ kind: 'add', feature: 0, alpha: 2e12 }] }] }, /^safekeep\.saes\[0\]\.edits\[0\]\.alpha must be a finite number with \|alpha\| ≤ 1e\+12/],
        [{ saes: [{ name: 'refusal', edits: [{ kind: 'clamp', feature: 0 }] }] }, /^safekeep\.saes\[0\]\.edits\[0\]\.value must be a finite number/],
        [{ saes: [{ name: 'refusal', path: '/etc' }] }, /^safekeep\.saes\[0\]\.path: unknown field/],
        [{ saes: [{ name: 'refusal', splice: 'capture' }] }, /^safekeep\.saes\[0\]\.splice must be "error"/],
        [{ saes: [{ name: 'refusal' }, { name: 'refusal' }] }, /^safekeep\.saes: 2 entries; this server has 1 SAEs/],
        [{ saes: [{ name: 'refusal', edits: Array.from({ length: 65 }, () => ({ kind: 'ablate', feature: 0 })) }] }, /^safekeep\.saes\[0\]\.edits: at most 64, got 65/],
        [{ saes: 'refusal' }, /^safekeep\.saes must be a non-empty array/],
      ];
      for (const [field, re] of cases) {
        const r = await post({ messages: msg, max_tokens: 2, safekeep: field });
        assert.equal(r.status, 400, JSON.stringify(field));
        assert.match(r.json.error!.message, re);
      }
      // a non-finite α as JSON can write it (1e400 parses to Infinity)
      const raw = `{"messages": ${JSON.stringify(msg)}, "max_tokens": 2, "safekeep": {"saes": [{"name": "refusal", "edits": [{"kind": "add", "feature": 0, "alpha": 1e400}]}]}}`;
      const r = await post(raw);
      assert.equal(r.status, 400);
      assert.match(r.json.error!.message, /^safekeep\.saes\[0\]\.edits\[0\]\.alpha must be a finite number/);
    });
  });

  test('serve --sae at start: needs --allow-interventions, a NAME=DIR list, an SAE that fits the model; exit 2', async () => {
    const sae = join(model, 'sae');
    const cases: [string[], RegExp][] = [
      [['--model', model, '--sae', `refusal=${sae}`], /--sae needs --allow-interventions/],
      [['--model', model, '--allow-interventions', '--sae', sae], /--sae: '[^']*' is not NAME=DIR/],
      [['--model', model, '--allow-interventions', '--sae', `a=${sae},a=${sae}`], /--sae: the name 'a' is given twice/],
      [['--upstream', 'http://127.0.0.1:9/v1', '--sae', `refusal=${sae}`], /--sae applies to serve --model DIR/],
    ];
    for (const [args, re] of cases) {
      const r = await serveExit(args);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, re);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    }
  });
});
