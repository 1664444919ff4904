/**
 * The probe→judge cascade and probe-steer on the planted synthetic model, whose refusal rule is known by construction
 * (src/experiments/planted.ts): the first token is "sorry" iff hidden[L]·r > τ·(f·hidden[L])/β, blocks ≥ 2 are the
 * identity, so hidden[2]·r = hidden[L]·r and adding α·r at hidden[2] raises it by exactly α (f·hidden stays β: r ⟂ f).
 *
 * 1. A hand-written probe (w = r at ℓ = 2, band, threshold and α placed between the evaluation requests' scores):
 *    for every request the test predicts from an independent forward pass which ones run unjudged, which reach the
 *    judge, which the probe refuses, which are steered and which of those steer to a refusal — and guardedRespond
 *    through the local engine does exactly that; the cascade's judge calls against SafeKeep's are counted.
 * 2. `probe train --calibrate` through the CLI: the calibration pairs (recomputed from their definition), the band
 *    (recomputed from the activation cache), and α against the analytic smallest α (τ − the lowest refusal score of
 *    the steered requests, along the stored direction); then `probe eval` runs both methods and reports them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { readActivationCache } from '../src/cache/store.ts';
import { readProbe } from '../src/data/probe-file.ts';
import { loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { PromptBuilder } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { createEngine } from '../src/engine/engine.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { guardedRespond } from '../src/guard/respond.ts';
import { ProbeGuard } from '../src/guard/probe.ts';
import { REFUSAL_PREFIX } from '../src/guard/prompts.ts';
import type { ChatBackend, ChatCall, ChatReply } from '../src/guard/types.ts';
import type { Split } from '../src/data/types.ts';
import { repoRoot } from './helpers/shared.ts';

const cli = (args: string[], env: NodeJS.ProcessEnv) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { env, encoding: 'utf8' });
const dot = (a: ArrayLike<number>, b: ArrayLike<number>, off = 0) => { let s = 0; for (let j = 0; j < b.length; j++) s += a[off + j]! * b[j]!; return s; };
/** a value strictly between the k-th and (k+1)-th of distinct sorted values */
const between = (xs: number[], k: number) => (xs[k]! + xs[k + 1]!) / 2;

/** A judge that knows the answer: YES for the harmful prompts, NO otherwise; counts its calls. */
function oracleJudge(harmful: ReadonlySet<string>): ChatBackend & { calls: number } {
  return {
    name: 'oracle-judge', callFormat: 'llama3', calls: 0,
    async chat(call: ChatCall): Promise<ChatReply> {
      this.calls++;
      const text = call.messages.map((m) => String(m.content)).join('\n');
      const yes = [...harmful].some((p) => text.includes(p));
      return { content: yes ? 'YES' : 'NO', toolCalls: [], promptTokens: 10, completionTokens: 1, latencyMs: 0, cached: false, finish: 'stop' };
    },
  };
}

test('planted model: probe-cascade and probe-steer decide exactly as the analytic refusal rule predicts', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-cascade-planted-'));
  try {
    const set = await loadPairSet('pairs');
    const truth = await writePlantedModel(join(dir, 'planted'), { lexiconPairs: set.pairs });
    const model = join(dir, 'planted');
    const tok = await loadPromptTokenizer(model);
    const builder = new PromptBuilder(tok, { texts: loadPromptTexts() });
    const engine = await createEngine(model, { cacheDir: join(dir, '.cache') });
    try {
      const pairs = set.pairs.slice(0, 12);
      const system = builder.systemText('agent');
      const reqs = pairs.flatMap((p) => (['harmful', 'benign'] as const).map((kind) => ({ id: `${kind}/${p.id}`, prompt: p[kind].prompt, request: { messages: builder.messages(p[kind].prompt, system), tools: [...p.tools] } })));
      // the refusal score hidden[2]·r of each request, from a separate forward pass of its rendered prompt
      const score = new Map<string, number>();
      for (const r of reqs) {
        const ids = tok.encode(tok.render(r.request.messages, { tools: r.request.tools, addGenerationPrompt: true }));
        const [f] = await engine.forward([ids], { hiddenAt: 'last', logitsAt: 'none' });
        score.set(r.id, dot(f!.hidden, truth.r, 2 * engine.dModel));
      }
      const sorted = [...new Set(score.values())].sort((a, b) => a - b);
      assert.equal(sorted.length, reqs.length, 'distinct scores');
      const n = sorted.length;
      // band between the 8th and 9th / 16th and 17th scores; the steer flag between the 12th and 13th; α makes exactly
      // the flagged requests above the 18th score refuse: α = τ − (a value between the 18th and 19th)
      const low = between(sorted, Math.floor(n / 3) - 1);
      const high = between(sorted, Math.floor((2 * n) / 3) - 1);
      const threshold = between(sorted, Math.floor(n / 2) - 1);
      const alpha = truth.tau - between(sorted, Math.floor((3 * n) / 4) - 1);
      assert.ok(alpha > 0, `α = ${alpha}`);
      const calibration = { pairs: 0, share: 0.25, seed: 0, idsHash: 'hand' };
      const probe = new ProbeGuard({
        w: Float32Array.from(truth.r), bias: 0, layer: 2, dModel: engine.dModel, threshold: { value: threshold },
        cascade: { low, high, maxBenignFlag: 0, maxHarmfulPass: 0, benignFlagged: 0, harmfulPassed: 0, band: 0, nBenign: 0, nHarmful: 0, calibration },
        steer: { alpha, layer: 2, targets: 'flagged', flagged: 0, refused: 0, search: 'hand', calibration },
        steerVector: Float32Array.from(truth.r),
      });
      const backend = new LocalBackend(engine, tok, { templateKwargs: builder.templateKwargs });
      const harmfulPrompts = new Set(pairs.map((p) => p.harmful.prompt));
      const judgeBackend = oracleJudge(harmfulPrompts);
      const keepJudge = oracleJudge(harmfulPrompts);
      const want = { run: 0, judge: 0, refuse: 0, steered: 0, steeredRefusals: 0 };
      for (const r of reqs) {
        const s = score.get(r.id)!;
        const harmful = r.id.startsWith('harmful/');
        const base = await guardedRespond(r.request, 'base', backend, { maxTokens: 12 });
        await guardedRespond(r.request, 'safekeep', backend, { maxTokens: 12, judgeBackend: keepJudge });

        const c = await guardedRespond(r.request, 'probe-cascade', backend, { maxTokens: 12, probe, judgeBackend });
        assert.ok(Math.abs(c.probe!.score - s) < 1e-4, `${r.id}: in-call score ${c.probe!.score} vs forward ${s}`);
        const band = s > high ? 'refuse' : s < low ? 'run' : 'judge';
        want[band]++;
        assert.equal(c.probe!.band, band, r.id);
        assert.equal(c.cost.judgeCalls, band === 'judge' ? 1 : 0, `${r.id}: reaches the judge iff inside the band`);
        assert.equal(c.judge === null, band !== 'judge');
        const refused = band === 'refuse' || (band === 'judge' && harmful);
        assert.equal(c.blocked, refused, r.id);
        if (refused) assert.ok(c.reply.content.startsWith(REFUSAL_PREFIX), c.reply.content);
        else assert.equal(c.reply.content, base.reply.content, `${r.id}: an unrefused request is the untouched agent's answer`);

        const st = await guardedRespond(r.request, 'probe-steer', backend, { maxTokens: 12, probe });
        const flagged = s > threshold;
        assert.equal(st.steered === true, flagged, r.id);
        if (!flagged) { assert.equal(st.reply.content, base.reply.content); continue; }
        want.steered++;
        // steered: the first token is "sorry" iff s + α > τ (the model's own words, no prefix)
        const refuses = s + alpha > truth.tau;
        if (refuses) want.steeredRefusals++;
        assert.equal(/^sorry\b/.test(st.reply.content), refuses, `${r.id}: score ${s} + α ${alpha} vs τ ${truth.tau}: ${st.reply.content}`);
        assert.ok(!st.reply.content.startsWith(REFUSAL_PREFIX));
      }
      // each side of every boundary is exercised
      const third = Math.floor(n / 3);
      assert.deepEqual({ run: want.run, judge: want.judge, refuse: want.refuse }, { run: third, judge: Math.floor((2 * n) / 3) - third, refuse: n - Math.floor((2 * n) / 3) });
      assert.equal(want.steered, n - Math.floor(n / 2));
      assert.equal(want.steeredRefusals, n - Math.floor((3 * n) / 4));
      // the cascade's judge calls against SafeKeep's on the same requests
      assert.equal(judgeBackend.calls, want.judge);
      assert.equal(keepJudge.calls, n);
    } finally {
      await engine.dispose();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('probe train --calibrate on the planted model: calibration pairs, band from the cache, α at the analytic minimum; probe eval runs both methods', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-calibrate-planted-'));
  const env = { ...process.env, SAFEKEEP_CACHE: join(dir, '.cache'), SAFEKEEP_QUIET: '1' };
  try {
    const set = await loadPairSet('pairs');
    const truth = await writePlantedModel(join(dir, 'planted'), { lexiconPairs: set.pairs });
    const model = join(dir, 'planted');
    const results = join(dir, 'results');
    const common = ['--model', model, '--limit', '40', '--results', results];
    const tr = cli(['probe', 'train', ...common, '--kind', 'mean-diff', '--calibrate', '--max-benign-flag', '0.2', '--max-harmful-pass', '0.2'], env);
    assert.equal(tr.status, 0, tr.stderr);
    assert.match(tr.stdout, /cascade band \[/);
    assert.match(tr.stdout, /probe-steer α = /);
    const p = readProbe(join(results, 'planted', 'probe', 'agent.schema.mean-diff.json'));
    const c = p.cascade!;
    const st = p.steer!;

    // the calibration pairs: the extraction pairs ordered by sha256("<seed>:<id>"), the first ⌈share·n⌉
    const cache = readActivationCache(join(results, 'planted', 'cache'), 'prompt.agent.schema');
    const split = (cache.manifest.dataset as { split: Split }).split;
    const sha = (x: string) => createHash('sha256').update(x).digest('hex');
    const k = Math.ceil(0.25 * split.extraction.length);
    const calPairs = [...split.extraction].sort((a, b) => (sha(`0:${a}`) < sha(`0:${b}`) ? -1 : 1)).slice(0, k).sort();
    assert.equal(c.calibration.pairs, k);
    assert.equal(c.calibration.idsHash, sha(calPairs.join('\n')));
    assert.deepEqual(st.calibration, c.calibration);

    // the band from the cached calibration rows: at most ⌊0.2·n⌋ benign above high, ⌊0.2·n⌋ harmful below low, and
    // each bound is the tightest such score
    const keys = (cache.manifest.rows as { key: string }[]).map((r) => r.key);
    const rowScore = (i: number) => p.bias + dot(cache.data, p.w, (i * cache.layers + p.layer) * cache.d);
    const cal = keys.flatMap((key, i) => (calPairs.includes(key.slice(0, key.lastIndexOf(':'))) ? [{ harmful: key.endsWith(':harmful'), s: rowScore(i), i }] : []));
    const benign = cal.filter((x) => !x.harmful).map((x) => x.s).sort((a, b) => b - a);
    const harmful = cal.filter((x) => x.harmful).map((x) => x.s).sort((a, b) => a - b);
    assert.ok(Math.abs(c.high - benign[Math.floor(0.2 * benign.length)]!) < 1e-5, `high ${c.high}`);
    assert.ok(Math.abs(c.low - Math.min(harmful[Math.floor(0.2 * harmful.length)]!, c.high)) < 1e-5, `low ${c.low}`);
    assert.equal(c.nBenign, benign.length);
    assert.ok(c.band > 0, 'some calibration requests fall in the band');

    // α: every steered calibration request refuses iff r·h + α·(r̂·r) > τ·(1 + α·(r̂·f)/β) — with r̂ ∥ r (cos ≥ 0.999)
    // the analytic minimum is max over them of (τ − r·h)/(r̂·r), up to the bisection's last bracket
    const rDotHat = dot(p.steerVector!, truth.r) / Math.hypot(...p.steerVector!);
    assert.ok(rDotHat > 0.999, `r̂·r = ${rDotHat}`);
    const flagged = cal.filter((x) => x.harmful && (st.targets === 'harmful' || x.s > p.threshold.value));
    assert.equal(st.flagged, flagged.length);
    const rh = (i: number) => dot(cache.data, truth.r, (i * cache.layers + cache.layers - 1) * cache.d);
    const alphaStar = Math.max(0, ...flagged.map((x) => (truth.tau - rh(x.i)) / rDotHat));
    assert.equal(st.refused, st.flagged);
    assert.ok(st.alpha >= alphaStar - 1e-3 && st.alpha - alphaStar < 0.01, `α ${st.alpha} vs analytic ${alphaStar}`);

    // probe eval: the comparison runs the cascade and the steering beside the other methods, with their costs
    const ev = cli(['probe', 'eval', ...common, '--reps', '50', '--max-tokens', '12', '--unparseable', 'safe'], env);
    assert.equal(ev.status, 0, ev.stderr);
    assert.match(ev.stdout, /probe-cascade: \d+ of \d+ requests ran unjudged/);
    const cmp = JSON.parse(readFileSync(join(results, 'planted', 'tables', 'probe-guard-comparison.json'), 'utf8')) as { rows: { method: string; n: number; judgeCalls: number }[] };
    assert.deepEqual(cmp.rows.map((r) => r.method), ['base', 'safekeep', 'refusal-probe', 'safekeep+probe', 'probe-cascade', 'probe-steer']);
    type Row = { caseId: string; method: string; probeScore: number; probeBand?: string; verdict: string | null; judgeCalls: number; steered?: boolean };
    const rows = readFileSync(join(results, 'planted', 'probe', 'outputs-compare.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Row);
    const casc = rows.filter((r) => r.method === 'probe-cascade');
    for (const r of casc) {
      const band = r.probeScore > c.high ? 'refuse' : r.probeScore < c.low ? 'run' : 'judge';
      assert.equal(r.probeBand, band, r.caseId);
      assert.equal(r.judgeCalls, band === 'judge' ? 1 : 0);
      assert.equal(r.verdict !== null, band === 'judge');
    }
    const judged = casc.filter((r) => r.probeBand === 'judge').length;
    assert.ok(Math.abs(cmp.rows[4]!.judgeCalls - judged / casc.length) < 1e-6);
    assert.equal(cmp.rows[1]!.judgeCalls, 1);
    for (const r of rows.filter((x) => x.method === 'probe-steer')) assert.equal(r.steered === true, r.probeScore > p.threshold.value, r.caseId);
    assert.match(readFileSync(join(results, 'planted', 'report.html'), 'utf8'), /probe→judge cascade/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('probe train: calibration flags without --calibrate, or out of range, are one error, exit 2', () => {
  const env = { ...process.env, SAFEKEEP_QUIET: '1' };
  for (const [args, re] of [
    [['--max-benign-flag', '0.1'], /--max-benign-flag needs --calibrate/],
    [['--calibrate', '--max-benign-flag', '1'], /--max-benign-flag must be in \[0, 1\)/],
    [['--calibrate', '--calibration-share', '0'], /--calibration-share must be in \(0, 1\)/],
    [['--calibrate', '--steer-max-tokens', '0'], /--steer-max-tokens must be a positive integer/],
  ] as const) {
    const r = cli(['probe', 'train', '--model', 'no-such-model', ...args], env);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, re);
  }
});
