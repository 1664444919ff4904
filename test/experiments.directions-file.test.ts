/**
 * directions.safetensors from `reproduce` on the planted model: one refusal direction per configuration (the
 * chatbot's equal to the one recomputed from its cache, parallel to the planted r at the planted layers), the Schema
 * Directions (pointing against r), ℓ* and the provenance in the metadata; read back by `steer --direction FILE`'s
 * loader (directionFromFile) with its refusals of bad input; loaded by Python's safetensors when it is installed.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeActivations } from '../src/analysis/activations.ts';
import { directionAt, refusalDirection } from '../src/analysis/direction.ts';
import { readActivationCache } from '../src/cache/store.ts';
import { writeSafetensors } from '../src/checkpoint/safetensors.ts';
import { loadPairSet } from '../src/data/load.ts';
import { splitPairs } from '../src/data/split.ts';
import { directionFromFile, readDirectionsFile } from '../src/experiments/directions-file.ts';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { reproduce } from '../src/experiments/reproduce.ts';
import { isSafekeepError } from '../src/util/errors.ts';

const cos = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let ab = 0; let aa = 0; let bb = 0;
  for (let i = 0; i < a.length; i++) { ab += a[i]! * b[i]!; aa += a[i]! * a[i]!; bb += b[i]! * b[i]!; }
  return ab / Math.sqrt(aa * bb);
};

test('reproduce writes directions.safetensors; steer reads it back; Python loads it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-directions-'));
  try {
    const pairs = await loadPairSet('pairs');
    const truth = await writePlantedModel(join(dir, 'planted'), { lexiconPairs: pairs.pairs });
    const r = await reproduce({ model: join(dir, 'planted'), data: 'pairs', results: join(dir, 'results'), limit: 40, reps: 50, refusalTokens: 0, engine: { cacheDir: join(dir, '.graphs'), quiet: true } });
    const file = readDirectionsFile(r.directionsFile);
    assert.equal(file.lStar, r.results.lStar.layer);
    assert.equal(file.metadata.layerRule, 'cv');
    assert.equal(JSON.parse(file.metadata.provenance!).caches, r.results.manifest.caches);
    const names = [...file.directions.keys()].sort();
    for (const n of ['refusal.chatbot', 'refusal.agent.schema', 'refusal.agent.flattened', 'schema.harmful', 'schema.benign']) assert.ok(names.includes(n), `has ${n} (${names.join(', ')})`);
    const L1 = 5;
    for (const d of file.directions.values()) assert.deepEqual([d.layers, d.d], [L1, 64]);

    // refusal.chatbot = the direction recomputed from the chatbot cache on the extraction split
    const c = readActivationCache(join(dir, 'results', 'planted', 'cache'), 'prompt.chatbot');
    const keys = (c.manifest.rows as { key: string }[]).map((row) => row.key);
    const labels = keys.map((k) => (k.endsWith(':harmful') ? 1 : 0));
    const split = splitPairs({ ...pairs, pairs: pairs.pairs.filter((p) => keys.includes(`${p.id}:harmful`)) });
    const ext = keys.flatMap((k, i) => (split.extraction.includes(k.slice(0, k.lastIndexOf(':'))) ? [i] : []));
    const recomputed = refusalDirection(makeActivations(c.n, c.layers, c.d, c.data), labels, ext);
    const chat = file.directions.get('refusal.chatbot')!;
    for (let i = 0; i < chat.data.length; i++) assert.ok(Math.abs(chat.data[i]! - recomputed.data[i]!) <= 1e-6 * Math.max(1, Math.abs(recomputed.data[i]!)), `refusal.chatbot value ${i}`);
    for (const l of truth.plantedLayers) {
      assert.ok(cos(directionAt(chat, l), truth.r) >= 0.99, `layer ${l}: refusal.chatbot ∥ r`);
      assert.ok(cos(directionAt(file.directions.get('schema.harmful')!, l), truth.r) < 0, `layer ${l}: Schema Direction against r`);
    }

    // steer --direction FILE[#name]: the row at the layer
    const fromFile = directionFromFile(`${r.directionsFile}#refusal.chatbot`, 2, 64);
    assert.deepEqual([...fromFile.v], [...directionAt(chat, 2)]);
    assert.deepEqual([...directionFromFile(r.directionsFile, 3, 64).v], [...directionAt(file.directions.get('schema.harmful')!, 3)], 'default: schema.harmful');
    for (const [spec, layer, d] of [[`${r.directionsFile}#nope`, 2, 64], [r.directionsFile, 9, 64], [r.directionsFile, 2, 65]] as const) {
      assert.throws(() => directionFromFile(spec, layer, d), isSafekeepError, spec);
    }
    const other = join(dir, 'other.safetensors');
    writeSafetensors(other, { x: { dtype: 'F32', shape: [1], data: new Float32Array(1) } });
    assert.throws(() => readDirectionsFile(other), (e) => isSafekeepError(e) && /not a directions file/.test((e as Error).message));

    // Python's safetensors, when installed (a developer tool, not a test dependency)
    const py = spawnSync('python3', ['-c', 'import safetensors.numpy'], { encoding: 'utf8' });
    if (py.status !== 0) { t.diagnostic('python3 with safetensors not installed: the Python load is not checked here'); return; }
    const script = join(dir, 'load.py');
    writeFileSync(script, 'import sys, json\nfrom safetensors import safe_open\nwith safe_open(sys.argv[1], "np") as f:\n  m = f.metadata()\n  print(json.dumps({"lStar": m["lStar"], "shape": list(f.get_tensor("refusal.chatbot").shape), "v": float(f.get_tensor("refusal.chatbot")[2][0])}))\n');
    const out = JSON.parse(spawnSync('python3', [script, r.directionsFile], { encoding: 'utf8' }).stdout);
    assert.deepEqual(out.shape, [L1, 64]);
    assert.equal(Number(out.lStar), file.lStar);
    assert.ok(Math.abs(out.v - directionAt(chat, 2)[0]!) < 1e-6);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
