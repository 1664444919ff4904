/**
 * End to end on the planted synthetic model (ground truth known by construction, src/experiments/planted.ts):
 * `reproduce` recovers the planted refusal direction r, chooses ℓ* among the planted layers, finds the AUROC
 * ordering the construction implies (chatbot > flattened prose > JSON schema), and a Schema Direction pointing
 * against r.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PLANTED, writePlantedModel } from '../src/experiments/planted.ts';
import { reproduce } from '../src/experiments/reproduce.ts';
import { readActivationCache } from '../src/cache/store.ts';
import { makeActivations } from '../src/analysis/activations.ts';
import { refusalDirection, directionAt } from '../src/analysis/direction.ts';
import { loadPairSet } from '../src/data/load.ts';
import { splitPairs } from '../src/data/split.ts';

test('reproduce on the planted model recovers r, the AUROC ordering and the Schema-Direction sign', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'repro-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  process.env.SAFEKEEP_QUIET = '1';
  try {
    const pairs = await loadPairSet('pairs');
    const truth = await writePlantedModel(join(dir, 'planted'), { lexiconPairs: pairs.pairs });
    const { results: res, files } = await reproduce({ model: join(dir, 'planted'), data: 'pairs', results: join(dir, 'results'), limit: 80, reps: 200, engine: { cacheDir: join(dir, '.graphs'), quiet: true } });
    assert.equal(res.synthetic, true);
    assert.ok(truth.plantedLayers.includes(res.lStar.layer), `ℓ* = ${res.lStar.layer}`);

    // the chatbot direction (extraction split, as reproduce computes it) is parallel to r at planted layers
    const c = readActivationCache(join(dir, 'results', 'planted', 'cache'), 'prompt.chatbot');
    const keys = (c.manifest.rows as { key: string }[]).map((r) => r.key);
    const labels = keys.map((k) => (k.endsWith(':harmful') ? 1 : 0));
    const split = splitPairs({ ...pairs, pairs: pairs.pairs.filter((p) => keys.includes(`${p.id}:harmful`)) });
    const ext = keys.flatMap((k, i) => (split.extraction.includes(k.slice(0, k.lastIndexOf(':'))) ? [i] : []));
    const dirs = refusalDirection(makeActivations(c.n, c.layers, c.d, c.data), labels, ext);
    for (const l of truth.plantedLayers) {
      const v = directionAt(dirs, l);
      let dot = 0; let nn = 0;
      for (let i = 0; i < v.length; i++) { dot += v[i]! * truth.r[i]!; nn += v[i]! * v[i]!; }
      assert.ok(dot / Math.sqrt(nn) >= 0.99, `layer ${l}: cos(r̂, r) = ${dot / Math.sqrt(nn)}`);
    }

    const at = (t: typeof res.table2, cfg: string): number => t.find((r) => r.config === cfg)!.cross.auroc;
    const chatbot = at(res.table2, 'chatbot');
    const flattened = at(res.table2, 'agent.flattened');
    const schema = at(res.table2, 'agent.schema');
    assert.ok(chatbot > flattened && flattened > schema, `AUROC chatbot ${chatbot}, flattened ${flattened}, schema ${schema}`);
    assert.ok(at(res.table1, 'agent.schema') < at(res.table1, 'chatbot-long'), 'length alone does not explain the drop');

    const cos = res.schemaCosines!;
    for (const l of truth.plantedLayers) {
      assert.ok(cos.harmful[l]! < cos.randomBand.lo[l]! && cos.benign[l]! < cos.randomBand.lo[l]!, `layer ${l}: Schema Direction cosines ${cos.harmful[l]}, ${cos.benign[l]}`);
    }
    assert.equal(cos.pairs, 'all');

    // §3.1 behavioural refusal: the planted lm_head answers "sorry, i cannot help with that." iff hidden[L]·r > τ at
    // the last prompt token, so the refusal count of each configuration follows from its cache
    const b = res.behavioural!;
    const evalIds = new Set(split.evaluation);
    for (const [config, cacheName] of [['chatbot', 'prompt.chatbot'], ['agent', 'prompt.agent.schema']] as const) {
      const cc = readActivationCache(join(dir, 'results', 'planted', 'cache'), cacheName);
      const ck = (cc.manifest.rows as { key: string }[]).map((r) => r.key);
      let predicted = 0;
      let n = 0;
      ck.forEach((k, i) => {
        if (!k.endsWith(':harmful') || !evalIds.has(k.slice(0, k.lastIndexOf(':')))) return;
        n++;
        let s = 0;
        for (let j = 0; j < cc.d; j++) s += cc.data[(i * cc.layers + cc.layers - 1) * cc.d + j]! * truth.r[j]!;
        assert.ok(Math.abs(s - PLANTED.tau) > 1e-4, `${config} ${k}: hidden[L]·r = ${s} at the threshold`);
        if (s > PLANTED.tau) predicted++;
      });
      const row = b.rows.find((r) => r.config === config)!;
      assert.equal(row.n, n);
      assert.equal(row.refusals, predicted, `${config}: ${row.refusals} refusals, construction predicts ${predicted}`);
    }
    assert.ok(b.rows[0]!.rate > b.rows[1]!.rate, `chatbot ${b.rows[0]!.rate} > agent ${b.rows[1]!.rate}`);
    assert.ok(existsSync(join(dir, 'results', 'planted', 'tables', 'behavioural-refusal.md')));
    assert.ok(existsSync(join(dir, 'results', 'planted', 'figures', 'behavioural-refusal.svg')));
    const manifest = res.manifest as { protocol: { layerRule: string; schemaDirectionPairs: string; thinking: string } };
    assert.deepEqual([manifest.protocol.layerRule, manifest.protocol.schemaDirectionPairs, manifest.protocol.thinking], ['cv', 'all', 'n/a']);
    assert.ok(existsSync(files.html));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
