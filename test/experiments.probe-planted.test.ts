/**
 * `safekeep probe train` and `probe eval` end to end on the planted synthetic model (ground truth by construction,
 * src/experiments/planted.ts), through the CLI:
 * - the mean-difference probe on the agent/schema condition points along the planted r at the chosen layer;
 * - the threshold flags at most ⌊5 %·n⌋ benign extraction rows, recomputed from the cache;
 * - the AUROC table equals a pairwise Mann–Whitney count over the cached evaluation rows;
 * - in the guard comparison, the probe's score inside the agent call equals w·hidden[ℓ] + b from a SEPARATE forward
 *   pass of the same prompt (so the in-call read-out is the prefill's hidden state), flagged requests take the
 *   refusal path, unflagged ones produce exactly the base output, and "both" = SafeKeep OR probe per request;
 * - report.html carries the comparison table.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { readActivationCache } from '../src/cache/store.ts';
import { readProbe } from '../src/data/probe-file.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { PromptBuilder } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { createEngine } from '../src/engine/engine.ts';
import { REFUSAL_PREFIX } from '../src/guard/prompts.ts';
import type { Split } from '../src/data/types.ts';
import { repoRoot } from './helpers/shared.ts';

const cli = (args: string[], env: NodeJS.ProcessEnv) => spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { env, encoding: 'utf8' });

/** P(score_h > score_b) + ½ P(tie), by counting pairs. */
function mannWhitney(scores: number[], labels: number[]): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < scores.length; i++) {
    for (let j = 0; j < scores.length; j++) {
      if (labels[i] === 1 && labels[j] === 0) {
        den++;
        num += scores[i]! > scores[j]! ? 1 : scores[i] === scores[j] ? 0.5 : 0;
      }
    }
  }
  return num / den;
}

test('probe train + eval on the planted model: r recovered, threshold, AUROC, in-call read-out, guard comparison, report', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-probe-planted-'));
  const env = { ...process.env, SAFEKEEP_CACHE: join(dir, '.cache'), SAFEKEEP_QUIET: '1' };
  try {
    const set = await loadPairSet('pairs');
    const truth = await writePlantedModel(join(dir, 'planted'), { lexiconPairs: set.pairs });
    const model = join(dir, 'planted');
    const results = join(dir, 'results');
    const common = ['--model', model, '--limit', '40', '--results', results];
    const tr = cli(['probe', 'train', ...common], env);
    assert.equal(tr.status, 0, tr.stderr);
    assert.match(tr.stdout, /mean-diff probe on agent\.schema at ℓ = \d/);
    const ev = cli(['probe', 'eval', ...common, '--reps', '100', '--max-tokens', '12', '--unparseable', 'safe'], env);
    assert.equal(ev.status, 0, ev.stderr);

    const probeDir = join(results, 'planted', 'probe');
    const md = readProbe(join(probeDir, 'agent.schema.mean-diff.json'));
    const lg = readProbe(join(probeDir, 'agent.schema.logistic.json'));
    // provenance
    const ckpt = await loadCheckpoint(model);
    const tok = await loadPromptTokenizer(model);
    assert.equal(md.provenance.model.configHash, ckpt.configHash);
    assert.equal(md.provenance.templateHash, tok.templateHash);
    assert.equal(md.provenance.dataset.hash, set.hash);
    assert.equal(md.provenance.split.used, 'extraction');
    assert.equal(lg.layer, md.layer);
    // the mean-difference probe is the planted r at a planted layer
    assert.ok(truth.plantedLayers.includes(md.layer), `ℓ = ${md.layer}`);
    const cos = md.w.reduce((s, x, j) => s + x * truth.r[j]!, 0) / Math.sqrt(md.w.reduce((s, x) => s + x * x, 0));
    assert.ok(cos >= 0.99, `cos(w, r) = ${cos}`);

    // threshold and AUROC recomputed from the cache
    const cacheDir = join(results, 'planted', 'cache');
    const c = readActivationCache(cacheDir, 'prompt.agent.schema');
    const split = (c.manifest.dataset as { split: Split }).split;
    const keys = (c.manifest.rows as { key: string }[]).map((r) => r.key);
    const pairOf = (k: string) => k.slice(0, k.lastIndexOf(':'));
    const labelOf = (k: string) => (k.endsWith(':harmful') ? 1 : 0);
    const score = (p: typeof md, row: number) => {
      let s = p.bias;
      const off = (row * c.layers + p.layer) * c.d;
      for (let j = 0; j < c.d; j++) s += p.w[j]! * c.data[off + j]!;
      return s;
    };
    const ext = keys.flatMap((k, i) => (split.extraction.includes(pairOf(k)) ? [i] : []));
    const evalRows = keys.flatMap((k, i) => (split.evaluation.includes(pairOf(k)) ? [i] : []));
    for (const p of [md, lg]) {
      const benign = ext.filter((i) => labelOf(keys[i]!) === 0);
      const over = benign.filter((i) => score(p, i) > p.threshold.value).length;
      assert.ok(over <= Math.floor(0.05 * benign.length), `${p.kind}: ${over} of ${benign.length} benign extraction rows flagged`);
      assert.ok(Math.abs(over / benign.length - p.threshold.benignFlagged) < 1e-6);
    }
    const aurocTable = JSON.parse(readFileSync(join(results, 'planted', 'tables', 'probe-auroc.json'), 'utf8')) as { rows: { config: string; probe: string; auroc: { auroc: number; n: number } }[] };
    for (const p of [md, lg]) {
      const row = aurocTable.rows.find((r) => r.config === 'agent.schema' && r.probe === p.kind)!;
      const want = mannWhitney(evalRows.map((i) => score(p, i)), evalRows.map((i) => labelOf(keys[i]!)));
      assert.ok(Math.abs(row.auroc.auroc - want) < 1e-6, `${p.kind}: ${row.auroc.auroc} vs ${want}`);
      assert.equal(row.auroc.n, evalRows.length);
    }

    // the comparison: in-call probe scores equal an independent forward pass's
    type Row = { caseId: string; method: string; blocked: boolean; probeScore: number | null; probeFlagged: boolean | null; output: string; label: string };
    const rows = readFileSync(join(probeDir, 'outputs-compare.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Row);
    const by = (m: string) => new Map(rows.filter((r) => r.method === m).map((r) => [r.caseId, r]));
    const base = by('base');
    const keep = by('safekeep');
    const pr = by('refusal-probe');
    const both = by('safekeep+probe');
    assert.equal(pr.size, 2 * split.evaluation.length);
    const builder = new PromptBuilder(tok, { texts: loadPromptTexts() });
    const engine = await createEngine(model, { cacheDir: join(dir, '.cache') });
    try {
      const evalPairs = set.pairs.filter((p) => split.evaluation.includes(p.id));
      for (const p of evalPairs) {
        for (const kind of ['harmful', 'benign'] as const) {
          const id = `${kind}/${p.id}`;
          const ids = builder.render(p[kind].prompt, p.tools, 'agent', 'schema').ids!;
          const [f] = await engine.forward([ids], { hiddenAt: 'last', logitsAt: 'none' });
          let s = md.bias;
          for (let j = 0; j < engine.dModel; j++) s += md.w[j]! * f!.hidden[md.layer * engine.dModel + j]!;
          const r = pr.get(id)!;
          assert.ok(Math.abs(r.probeScore! - s) < 1e-4, `${id}: in-call score ${r.probeScore} vs forward ${s}`);
          assert.equal(r.probeFlagged, s > md.threshold.value);
          assert.equal(r.blocked, r.probeFlagged);
          if (r.blocked) assert.ok(r.output.startsWith(REFUSAL_PREFIX), r.output);
          else assert.equal(r.output, base.get(id)!.output);
          assert.equal(both.get(id)!.blocked, keep.get(id)!.blocked || r.probeFlagged === true, id);
        }
      }
    } finally {
      await engine.dispose();
    }
    const cmp = JSON.parse(readFileSync(join(results, 'planted', 'tables', 'probe-guard-comparison.json'), 'utf8')) as { rows: { method: string; flagged: number; refusal: { k: number } }[] };
    assert.deepEqual(cmp.rows.map((r) => r.method), ['base', 'safekeep', 'refusal-probe', 'safekeep+probe']);
    const flagged = [...pr.values()].filter((r) => r.probeFlagged).length;
    assert.ok(flagged > 0 && flagged < pr.size, `both paths exercised: ${flagged} of ${pr.size} flagged`);
    assert.equal(cmp.rows[2]!.flagged, flagged);
    assert.equal(cmp.rows[2]!.refusal.k, [...pr.values()].filter((r) => r.caseId.startsWith('harmful/') && r.label === 'refusal').length);
    const html = readFileSync(join(results, 'planted', 'report.html'), 'utf8');
    assert.match(html, /Guards compared/);
    assert.match(html, /refusal-probe/);
    assert.match(html, /Refusal probes — AUROC/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
