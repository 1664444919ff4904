/**
 * `safekeep hooks`: the hook points it lists are the ones the engine captures — every name, with the shape the
 * engine's capture has for a prompt of T tokens (T and S filled in), editable = accepted as an edit target — and the
 * TransformerLens names are `model.hook_dict`'s (blocks.l.hook_resid_pre, blocks.l.attn.hook_z, …); a pattern lists
 * what it selects, and one that selects nothing is one line, exit 2.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { createEngine } from '../src/engine/engine.ts';
import { runCli } from './helpers/cli.ts';

type Listed = Record<string, { shape: Array<number | string>; editable: boolean; transformerLens: string; hidden: string | null }>;

test('safekeep hooks lists the points the engine captures, with their shapes, edit targets and TransformerLens names', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-hooks-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const model = join(dir, 'planted');
  await writePlantedModel(model);
  const r = await runCli(['hooks', '--model', model, '--json'], { timeoutMs: 60_000 });
  assert.equal(r.code, 0, r.stderr);
  const listed = JSON.parse(r.stdout) as Listed;
  const names = Object.keys(listed);

  const engine = await createEngine(model, { cacheDir: join(dir, 'graphs'), threads: 1 });
  try {
    const L = engine.numLayers;
    assert.equal(names.length, 7 * L);
    const ids = [3, 14, 15, 9, 26];
    const { cache } = await engine.runWithCache(ids, { names: ['blocks.*.*'] });
    assert.deepEqual([...cache.names].sort(), [...names].sort(), 'the engine captures exactly the listed names');
    for (const n of names) {
      const want = listed[n]!.shape.map((x) => (x === 'T' || x === 'S' ? ids.length : x));
      assert.deepEqual(cache.get(n).shape, want, n);
    }
    for (const l of [0, L - 1]) {
      assert.deepEqual(names.filter((n) => n.startsWith(`blocks.${l}.`)).map((n) => listed[n]!.transformerLens), [
        `blocks.${l}.hook_resid_pre`, `blocks.${l}.attn.hook_z`, `blocks.${l}.attn.hook_pattern`, `blocks.${l}.hook_attn_out`,
        `blocks.${l}.hook_resid_mid`, `blocks.${l}.hook_mlp_out`, `blocks.${l}.hook_resid_post`]);
      assert.equal(listed[`blocks.${l}.resid_pre`]!.hidden, `hidden[${l}]`);
      assert.equal(listed[`blocks.${l}.resid_post`]!.hidden, `hidden[${l + 1}]`);
    }
    // an edit is accepted on every point listed editable, refused on the one that is not
    for (const n of [`blocks.${L - 1}.mlp_out`, 'blocks.0.z', 'blocks.1.pattern']) {
      const width = n.endsWith('.z') ? engine.config.numHeads * engine.config.headDim : engine.dModel;
      const edit = engine.runWithHooks(ids, { hooks: [{ hook: n, kind: 'ablate', vector: Array.from({ length: width }, (_, i) => 1 + i) }] })
        .then(() => 'ok', (e: Error) => e.message);
      const got = await edit;
      if (listed[n]!.editable) assert.equal(got, 'ok', n);
      else assert.match(got, /pattern/, n);
    }
  } finally {
    await engine.dispose();
  }

  const some = await runCli(['hooks', '--model', model, '--pattern', 'blocks.*.resid_post'], { timeoutMs: 60_000 });
  assert.equal(some.code, 0, some.stderr);
  assert.match(some.stdout, /blocks\.0\.resid_post +\[T, 64\] +yes +blocks\.0\.hook_resid_post +hidden\[1\]/);
  assert.equal(some.stdout.trim().split('\n').length, 2 + 4);
  const none = await runCli(['hooks', '--model', model, '--pattern', 'blocks.*.nothing'], { timeoutMs: 60_000 });
  assert.equal(none.code, 2);
  assert.match(none.stderr, /^safekeep: hook pattern 'blocks\.\*\.nothing' matches no hook point/);
});
