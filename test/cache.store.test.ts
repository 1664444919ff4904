/**
 * Activation store: deterministic batch plan, reuse of a complete cache, and — the real thing — a CLI extraction
 * killed mid-run (SIGKILL) and rerun yields a cache byte-identical to an uninterrupted run.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildActivationCache, planBatches, readActivationCache, type CacheRow } from '../src/cache/store.ts';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { extractCondition, extractFirstToken, extractWithFirstToken, openContext } from '../src/experiments/extract.ts';
import { repoRoot } from './helpers/shared.ts';

test('planBatches: consecutive, covering, under the token budget', () => {
  const lens = [5, 9, 3, 20, 2, 2, 2, 7];
  const plan = planBatches(lens, 20, 3);
  assert.deepEqual(plan, [[0, 2], [2, 3], [3, 4], [4, 7], [7, 8]]);
  for (const [a, e] of plan) assert.ok(e - a === 1 || Math.max(...lens.slice(a, e)) * (e - a) <= 20);
});

test('buildActivationCache: rows in order, second call reuses, changed rows recompute', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'store-'));
  try {
    const rows: CacheRow[] = [1, 2, 3, 4, 5].map((i) => ({ key: `r${i}`, ids: Array(i).fill(i), promptHash: `h${i}` }));
    let calls = 0;
    const compute = async (b: readonly CacheRow[]): Promise<Float32Array[]> => {
      calls++;
      return b.map((r) => Float32Array.from({ length: 6 }, (_, j) => r.ids.length * 10 + j));
    };
    const o = { dir, name: 'x', rows, layers: 2, d: 3, compute, batchTokens: 6, maxBatch: 4, manifest: { test: true } };
    const r1 = await buildActivationCache(o);
    assert.equal(r1.reused, false);
    const c = readActivationCache(dir, 'x');
    assert.deepEqual([c.n, c.layers, c.d], [5, 2, 3]);
    assert.deepEqual(Array.from(c.data.subarray(6, 12)), [20, 21, 22, 23, 24, 25]);
    assert.equal(existsSync(join(dir, 'x.parts')), false);
    const before = calls;
    assert.equal((await buildActivationCache(o)).reused, true);
    assert.equal(calls, before);
    const r3 = await buildActivationCache({ ...o, rows: rows.map((r, i) => (i === 2 ? { ...r, promptHash: 'changed' } : r)) });
    assert.equal(r3.reused, false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('extract killed mid-run and rerun = uninterrupted run, byte for byte', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'resume-'));
  try {
    await writePlantedModel(join(dir, 'planted'));
    const env = { ...process.env, SAFEKEEP_CACHE: join(dir, '.graphs') };
    const args = (results: string): string[] => [join(repoRoot, 'bin', 'safekeep.mjs'), 'extract', '--model', join(dir, 'planted'),
      '--configs', 'agent', '--repr', 'schema', '--limit', '40', '--batch-tokens', '600', '--results', results];
    // uninterrupted
    const full = spawnSync(process.execPath, args(join(dir, 'full')), { env, encoding: 'utf8' });
    assert.equal(full.status, 0, full.stderr);
    // interrupted: SIGKILL as soon as two batches are on disk
    const partsDir = join(dir, 'cut', 'planted', 'cache', 'prompt.agent.schema.parts');
    const child = spawn(process.execPath, args(join(dir, 'cut')), { env, stdio: 'ignore' });
    const killed = await new Promise<boolean>((resolve) => {
      const timer = setInterval(() => {
        const parts = existsSync(partsDir) ? readdirSync(partsDir).filter((f) => f.startsWith('part-')) : [];
        if (parts.length >= 2) { clearInterval(timer); child.kill('SIGKILL'); resolve(true); }
      }, 5);
      child.on('exit', () => { clearInterval(timer); resolve(false); });
    });
    assert.ok(killed, 'the run finished before it could be killed (make the batches smaller)');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(existsSync(join(dir, 'cut', 'planted', 'cache', 'prompt.agent.schema.safetensors')), false, 'no final cache after a kill');
    const again = spawnSync(process.execPath, args(join(dir, 'cut')), { env, encoding: 'utf8' });
    assert.equal(again.status, 0, again.stderr);
    assert.match(again.stdout, /resumed \d+ batches/);
    const a = readFileSync(join(dir, 'full', 'planted', 'cache', 'prompt.agent.schema.safetensors'));
    const b = readFileSync(join(dir, 'cut', 'planted', 'cache', 'prompt.agent.schema.safetensors'));
    assert.ok(a.equals(b), 'resumed cache differs from the uninterrupted one');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('one prefill fills the prompt and first-token caches with the values of the separate passes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'multi-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  process.env.SAFEKEEP_QUIET = '1';
  try {
    await writePlantedModel(join(dir, 'planted'));
    const open = (results: string) => openContext({ model: join(dir, 'planted'), data: 'pairs', results: join(dir, results), limit: 10, engine: { cacheDir: join(dir, '.graphs'), quiet: true } });
    const a = await open('a');
    const both = await extractWithFirstToken(a, 'flattened');
    assert.equal(both.length, 2);
    assert.equal((await extractWithFirstToken(a, 'flattened'))[0]!.reused, true);
    await a.engine.dispose();
    const b = await open('b');
    await extractCondition(b, { config: 'agent', repr: 'flattened' });
    await extractFirstToken(b, 'flattened');
    await b.engine.dispose();
    for (const name of ['prompt.agent.flattened', 'first.flattened']) {
      const x = readActivationCache(a.cacheDir, name);
      const y = readActivationCache(b.cacheDir, name);
      assert.deepEqual([x.n, x.layers, x.d], [y.n, y.layers, y.d]);
      let m = 0;
      for (let i = 0; i < x.data.length; i++) m = Math.max(m, Math.abs(x.data[i]! - y.data[i]!));
      assert.ok(m <= 1e-5, `${name}: max |diff| ${m}`);
      assert.deepEqual(x.manifest.rows, y.manifest.rows);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
