/**
 * `steer --intervene FILE.json` on the planted model: each intervention set is one more row of the sweep, on the
 * same prompts with the same scoring. The planted construction gives the outcomes: blocks from 2 on are identity, so
 * hidden[L]·r = hidden[ℓ]·r for ℓ ≥ 2, and the model refuses iff hidden[L]·r > τ at the last prompt token.
 * - an `add` of −α·R̂ at ℓ* is what the shorthand steering at α does: same generations;
 * - the same add, then ablating r at layer L, sets hidden[L]·r = 0 < τ at every position: none of the requests that
 *   the steering made refuse is refused any more;
 * - the same add with r ablated at layer 1 instead removes nothing (no embedding and no block before 1 writes along
 *   r, and the add comes later): the generations of the shorthand at α, unchanged.
 * The CLI reads the files as `generate --intervene` does (bad file → exit 2, one line), and the sets enter every
 * key of the run: generation-file keys, the manifest, the shard records (merge refuses shards run with different files).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PLANTED, writePlantedModel } from '../src/experiments/planted.ts';
import { interventionSetHash, type InterventionSet } from '../src/experiments/steer/conditions.ts';
import type { SteerOptions } from '../src/experiments/steer/setup.ts';
import { steerSweep } from '../src/experiments/steer/sweep.ts';
import { loadPairSet } from '../src/data/load.ts';
import { main } from '../src/cli/main.ts';
import type { Intervention } from '../src/engine/types.ts';

interface Gen { pairId: string; label: string; generatedIds: number[]; condition?: string }

function readGens(file: string): { key: Record<string, unknown>; gens: Gen[] } {
  const lines = readFileSync(file, 'utf8').trim().split('\n');
  return { key: JSON.parse((JSON.parse(lines[0]!) as { key: string }).key) as Record<string, unknown>, gens: lines.slice(1).map((l) => JSON.parse(l) as Gen) };
}

/** `safekeep <argv>` in this process: exit code and stderr (stdout is the test runner's). */
async function cli(...argv: string[]): Promise<{ code: number; err: string }> {
  const write = process.stderr.write.bind(process.stderr);
  let err = '';
  process.stderr.write = ((s: string) => { err += s; return true; }) as typeof process.stderr.write;
  try {
    return { code: await main(argv, () => {}), err };
  } finally {
    process.stderr.write = write;
  }
}

const set = (label: string, interventions: Intervention[]): InterventionSet => ({ label, file: `${label}.json`, interventions });

test('steer --intervene on the planted model: add ≡ the shorthand; ablating r after the add removes the refusal it made, before it nothing', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'steer-iv-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  try {
    const pairs = await loadPairSet('pairs');
    const truth = await writePlantedModel(join(dir, 'planted'), { lexiconPairs: pairs.pairs });
    const base: SteerOptions = {
      model: join(dir, 'planted'), data: 'pairs', results: join(dir, 'results'), limit: 40,
      alphas: [0, 1.2].map((value) => ({ kind: 'absolute' as const, value })), layer: 'auto', direction: 'schema-harmful',
      maxNewTokens: 10, requests: ['harmful'], engine: { cacheDir: join(dir, '.graphs'), quiet: true },
    };
    const first = await steerSweep(base);
    const [r0, r12] = first.sweeps[0]!.rows;
    assert.ok(r12!.counts.refusal > r0!.counts.refusal, 'α = 1.2 changes the outcome (so equality below means something)');
    assert.ok(r12!.counts.refusal > 0, 'steering makes some requests refuse (so ablation has something to remove)');

    const r = Array.from(truth.r);
    const L = PLANTED.numLayers;
    assert.ok(first.layer >= PLANTED.plantedLayer && first.layer <= L);
    const steer: Intervention = { layer: first.layer, kind: 'add', vector: Array.from(first.direction), alpha: -1.2 };
    const sets = [
      set('add-shorthand', [steer]),
      set('ablate-r-l4', [steer, { layer: L, kind: 'ablate', vector: r }]),
      set('ablate-r-l1', [steer, { layer: 1, kind: 'ablate', vector: r }]),
    ];
    const res = await steerSweep({ ...base, interventionSets: sets });
    const rows = res.sweeps[0]!.rows;
    assert.deepEqual(rows.map((x) => x.condition), [undefined, undefined, 'add-shorthand', 'ablate-r-l4', 'ablate-r-l1']);
    const out = res.outDir;
    const alpha12 = readGens(join(out, 'generations.harmful.alpha1.2.jsonl')).gens;
    const add = readGens(join(out, 'generations.harmful.intervene-add-shorthand.jsonl'));
    const abl4 = readGens(join(out, 'generations.harmful.intervene-ablate-r-l4.jsonl'));
    const abl1 = readGens(join(out, 'generations.harmful.intervene-ablate-r-l1.jsonl'));

    // (a) the add file is the shorthand at α = 1.2: same generated ids, same labels, same counts
    assert.deepEqual(add.gens.map((g) => g.generatedIds), alpha12.map((g) => g.generatedIds));
    assert.deepEqual(add.gens.map((g) => g.label), alpha12.map((g) => g.label));
    assert.deepEqual(rows[2]!.counts, rows[1]!.counts);
    assert.ok(add.gens.every((g) => g.condition === 'add-shorthand'));

    // (b) r ablated at layer L after the add: hidden[L]·r = 0 < τ everywhere, so nothing is refused; at layer 1
    // (before anything writes r): the shorthand's generations
    assert.ok(PLANTED.tau > 0);
    assert.equal(rows[3]!.counts.refusal, 0);
    assert.ok(abl4.gens.every((g) => g.label !== 'refusal'));
    assert.deepEqual(abl1.gens.map((g) => g.generatedIds), alpha12.map((g) => g.generatedIds));
    assert.deepEqual(rows[4]!.counts, rows[1]!.counts);

    // the set's content hash keys its generations file and is recorded in the manifest, the table and results.json
    assert.equal(abl4.key.interventions, interventionSetHash(sets[1]!.interventions));
    assert.equal(rows[3]!.interventionsSha256, interventionSetHash(sets[1]!.interventions));
    const results = JSON.parse(readFileSync(join(dir, 'results', 'planted', 'results.json'), 'utf8')) as { manifest: { steeringProtocol: { interventions: { label: string; sha256: string }[] } } };
    assert.deepEqual(results.manifest.steeringProtocol.interventions.map((x) => [x.label, x.sha256]), sets.map((s) => [s.label, interventionSetHash(s.interventions)]));
    const md = readFileSync(join(out, 'table3.md'), 'utf8');
    const n = rows[3]!.n;
    assert.match(md, new RegExp(`intervene: ablate-r-l4 \\| ${n} \\| 0\\.0%`));
    assert.match(readFileSync(join(out, 'table3.csv'), 'utf8'), new RegExp(`,,,${n},refusal,0,0,0,[\\d.]+,ablate-r-l4\\n`));

    // an edited file is a new condition: generated again, not reused (now r is ablated before the add: refusals return)
    const edited = set('ablate-r-l4', [steer, { layer: 1, kind: 'ablate', vector: r }]);
    const again = await steerSweep({ ...base, interventionSets: [edited] });
    const redone = readGens(join(out, 'generations.harmful.intervene-ablate-r-l4.jsonl'));
    assert.equal(redone.key.interventions, interventionSetHash(edited.interventions));
    assert.notEqual(redone.key.interventions, abl4.key.interventions);
    assert.deepEqual(again.sweeps[0]!.rows[2]!.counts, rows[1]!.counts);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('steer --intervene CLI: bad files are one line and exit 2; shards run with different files are refused by merge', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'steer-iv-cli-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  process.env.SAFEKEEP_QUIET = '1';
  try {
    const model = join(dir, 'planted');
    await writePlantedModel(model);
    const d = PLANTED.hiddenSize;
    const vec = (k: number) => Array.from({ length: d }, (_, i) => (i === k ? 1 : 0));
    const write = (name: string, body: unknown): string => {
      const f = join(dir, name);
      writeFileSync(f, typeof body === 'string' ? body : JSON.stringify(body));
      return f;
    };
    const args = ['--model', model, '--limit', '16', '--alphas', '0', '--max-new-tokens', '4', '--requests', 'harmful', '--results', join(dir, 'results')];
    const bad: Array<[string, RegExp]> = [
      [write('kind.json', { interventions: [{ layer: 2, kind: 'scale', vector: vec(0), alpha: 1 }] }), /kind\.json: interventions\[0\]\.kind must be one of add, ablate, clamp/],
      [write('size.json', { interventions: [{ layer: 2, kind: 'ablate', vector: [1, 0, 0] }] }), /size\.json: .*vector has 3 values, the model's d_model is 64/],
      [write('layer.json', { interventions: [{ layer: 9, kind: 'add', vector: vec(0), alpha: 1 }] }), /layer\.json: .*layer 9 is out of range 0\.\.4/],
      [write('broken.json', '{"interventions": ['), /broken\.json/],
      [join(dir, 'missing.json'), /missing\.json/],
    ];
    for (const [file, message] of bad) {
      const r = await cli('steer', ...args, '--intervene', file);
      assert.equal(r.code, 2, `${file}: ${r.err}`);
      assert.match(r.err, message);
      assert.equal(r.err.trim().split('\n').length, 1, `one line: ${r.err}`);
      assert.doesNotMatch(r.err, /\n\s+at /);
    }
    // two files of one name would label two rows alike
    mkdirSync(join(dir, 'sub'));
    const ok = { interventions: [{ layer: 2, kind: 'ablate', vector: vec(0) }] };
    const twice = await cli('steer', ...args, '--intervene', `${write('dup.json', ok)},${write(join('sub', 'dup.json'), ok)}`);
    assert.equal(twice.code, 2);
    assert.match(twice.err, /have the same name 'dup'; rename one/);

    // shards: the extraction caches from one process, then shard 0 with one file and shard 1 with an edited copy
    const a = write('set.json', { interventions: [{ layer: 2, kind: 'ablate', vector: vec(0) }] });
    let r = await cli('steer', ...args, '--intervene', a);
    assert.equal(r.code, 0, r.err);
    r = await cli('steer', ...args, '--intervene', a, '--shard', '0/2');
    assert.equal(r.code, 0, r.err);
    write('set.json', { interventions: [{ layer: 2, kind: 'ablate', vector: vec(1) }] });
    r = await cli('steer', ...args, '--intervene', a, '--shard', '1/2');
    assert.equal(r.code, 0, r.err);
    r = await cli('merge', join(dir, 'results', 'planted'));
    assert.equal(r.code, 2);
    const h = (v: number[]) => interventionSetHash([{ layer: 2, kind: 'ablate', vector: v }]).slice(0, 12);
    assert.match(r.err, new RegExp(`shards disagree on interventions: shard-0-of-2 has set=${h(vec(0))}, shard-1-of-2 has set=${h(vec(1))}`));
    // the same file in both shards merges
    r = await cli('steer', ...args, '--intervene', a, '--shard', '0/2');
    assert.equal(r.code, 0, r.err);
    r = await cli('merge', join(dir, 'results', 'planted'));
    assert.equal(r.code, 0, r.err);
    assert.match(readFileSync(join(dir, 'results', 'planted', 'steering', 'table3.md'), 'utf8'), /intervene: set/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
