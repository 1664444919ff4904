/**
 * Sharding: the partition is contiguous, covering and token-balanced; on the planted model, `reproduce` as 4 shards
 * + `safekeep merge` writes the same caches (byte for byte), manifests and results as one process; merge refuses a
 * missing shard, a shard of another partition and a shard run on different data, naming them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseShard, partitionByCost, selectShard } from '../src/util/shard.ts';
import { writePlantedModel } from '../src/experiments/planted.ts';
import { reproduce, reproduceShard } from '../src/experiments/reproduce.ts';
import { main } from '../src/cli/main.ts';
import { statusLines } from '../src/cluster/status.ts';
import { completeShardSet } from '../src/util/shard-run.ts';
import { mergeShardRows, runShardRows } from '../src/util/shard-rows.ts';

test('partitionByCost: contiguous, every item once, each shard within one item of T/n', () => {
  const costs = Array.from({ length: 200 }, (_, k) => 1 + ((k * 7919) % 97)); // uneven, deterministic
  const total = costs.reduce((a, b) => a + b, 0);
  for (const n of [1, 2, 3, 4, 7, 16]) {
    const owner = partitionByCost(costs, n);
    assert.equal(owner.length, costs.length);
    for (let k = 1; k < owner.length; k++) assert.ok(owner[k]! >= owner[k - 1]! && owner[k]! - owner[k - 1]! <= 1, 'contiguous, in order');
    const load = Array<number>(n).fill(0);
    owner.forEach((s, k) => (load[s]! += costs[k]!));
    const maxItem = Math.max(...costs);
    for (const l of load) assert.ok(Math.abs(l - total / n) <= maxItem, `n=${n}: load ${l} vs ${total / n}`);
    assert.deepEqual(partitionByCost(costs, n), owner, 'deterministic');
  }
  // tokens, not counts: one long item and many short ones split into two halves of equal cost
  const owner = partitionByCost([100, ...Array<number>(100).fill(1)], 2);
  assert.equal(owner.filter((s) => s === 0).length, 1);
  // selectShard over all shards = all items, in order
  const items = costs.map((c, k) => ({ c, k }));
  const back = [0, 1, 2].flatMap((i) => selectShard(items, (x) => x.c, { index: i, count: 3 }).map((x) => x.k));
  assert.deepEqual(back, items.map((x) => x.k));
});

test('parseShard: 0-based i/n; bad forms are one clear error', () => {
  assert.deepEqual(parseShard('3/4'), { index: 3, count: 4 });
  for (const bad of ['4/4', '1/0', '-1/4', '1', 'a/b', '1/4/2']) assert.throws(() => parseShard(bad), /--shard/);
});

test('runShardRows + mergeShardRows: rows back in item order; duplicate, missing and foreign items are named', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'shard-rows-'));
  try {
    const items = Array.from({ length: 10 }, (_, k) => ({ id: `i${k}`, tokens: 1 + k }));
    for (const index of [0, 1, 2]) {
      const r = await runShardRows({
        resultsDir: dir, command: 'toy', shard: { index, count: 3 }, identity: { data: 'x' }, options: {}, items, cost: (it) => it.tokens, file: 'rows.jsonl',
        run: async (mine, progress) => mine.map((it, k) => { progress(k + 1); return { id: it.id, twice: 2 * it.tokens }; }),
      });
      assert.ok(r.items > 0);
    }
    const shards = completeShardSet(dir, 'toy');
    const keys = items.map((it) => it.id);
    const rows = mergeShardRows<{ id: string; twice: number }>(shards, 'rows.jsonl', (r) => r.id, keys);
    assert.deepEqual(rows.map((r) => r.twice), items.map((it) => 2 * it.tokens));
    assert.throws(() => mergeShardRows(shards, 'rows.jsonl', (r: { id: string }) => r.id, [...keys, 'i10']), /1 of 11 items are in no shard \(first: i10\)/);
    assert.throws(() => mergeShardRows(shards, 'rows.jsonl', (r: { id: string }) => r.id, keys.slice(1)), /1 items that this run does not have \(first: i0\)/);
    assert.throws(() => mergeShardRows([...shards, { ...shards[0]!, name: 'copy' }], 'rows.jsonl', (r: { id: string }) => r.id, keys), /item i0 is in both shard-0-of-3 and copy/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** Every file under `dir` (relative paths), for byte comparison. */
function files(dir: string, sub = ''): string[] {
  return readdirSync(join(dir, sub), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(dir, join(sub, e.name)) : [join(sub, e.name)])).sort();
}

/**
 * `safekeep <argv>` in this process, stderr captured (exit code and message). stdout is left alone: the test runner
 * talks to its parent over this process's stdout, so it must not be swallowed (summaries show up as diagnostics).
 */
async function cli(...argv: string[]): Promise<{ code: number; err: string }> {
  const write = process.stderr.write.bind(process.stderr);
  let err = '';
  process.stderr.write = ((s: string) => { err += s; return true; }) as typeof process.stderr.write;
  try {
    return { code: await main(argv), err };
  } finally {
    process.stderr.write = write;
  }
}

test('planted reproduce: 4 shards + merge = one process (byte-identical caches, same results); bad shard sets refused', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'shard-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  process.env.SAFEKEEP_QUIET = '1';
  try {
    const model = join(dir, 'planted');
    await writePlantedModel(model);
    const opts = { model, data: 'pairs', limit: 24, reps: 50, batchTokens: 1500, engine: { cacheDir: join(dir, '.graphs'), quiet: true } };
    // behavioural refusal generates, which a sharded reproduce leaves to a later one-process `reproduce` (it reuses
    // the merged caches): the one-process run here skips it too, so both measure the same thing
    const one = await reproduce({ ...opts, refusalTokens: 0, results: join(dir, 'one') });
    const tokens: number[] = [];
    for (let i = 0; i < 4; i++) tokens.push((await reproduceShard({ ...opts, results: join(dir, 'four') }, { index: i, count: 4 })).tokens);
    const total = tokens.reduce((a, b) => a + b, 0);
    for (const t of tokens) assert.ok(t > 0.5 * (total / 4) && t < 1.5 * (total / 4), `token-balanced shards: ${tokens}`);
    const four = join(dir, 'four', 'planted');
    // a rerun of a finished shard resumes from its parts: nothing computed
    assert.equal((await reproduceShard({ ...opts, results: join(dir, 'four') }, { index: 0, count: 4 })).computedRows, 0);
    // progress from the folder alone
    assert.match(statusLines(four).join('\n'), /reproduce \(n=4\): 4 done, 0 running or failed, 0 not started; 100% of started shards' tokens/);
    // before merge: nothing in the shared cache folder — each shard wrote only its own folder
    assert.equal(existsSync(join(four, 'cache')), false);

    // a missing shard is named (shard 2 "lost": copy the set without it)
    const lost = join(dir, 'lost', 'planted');
    cpSync(four, lost, { recursive: true });
    rmSync(join(lost, 'shards', 'reproduce', 'shard-2-of-4'), { recursive: true });
    let r = await cli('merge', lost);
    assert.equal(r.code, 2);
    assert.match(r.err, /missing shards: 2\/4 \(not started\)/);
    assert.match(statusLines(lost).join('\n'), /3 done, 0 running or failed, 1 not started.*\n(.*\n)*  not started: 2\/4 \(resubmit with --only 2\)/);
    // a shard of another partition (a stale 2-shard run) is named
    const mixed = join(dir, 'mixed', 'planted');
    cpSync(four, mixed, { recursive: true });
    await reproduceShard({ ...opts, results: join(dir, 'mixed') }, { index: 1, count: 2 });
    r = await cli('merge', mixed);
    assert.equal(r.code, 2);
    assert.match(r.err, /different partitions: n=2 \(shard-1-of-2\) vs n=4 \(shard-0-of-4, shard-1-of-4, shard-2-of-4, shard-3-of-4\)/);
    // a shard run on different data (another --limit) is named
    const other = join(dir, 'other', 'planted');
    cpSync(four, other, { recursive: true });
    rmSync(join(other, 'shards', 'reproduce', 'shard-3-of-4'), { recursive: true });
    await reproduceShard({ ...opts, limit: 20, results: join(dir, 'other') }, { index: 3, count: 4 });
    r = await cli('merge', other);
    assert.equal(r.code, 2);
    assert.match(r.err, /shards disagree on data: shard-0-of-4 has pairs \w+ limit 24 .*shard-3-of-4 has pairs \w+ limit 20/);
    assert.equal(existsSync(join(other, 'results.json')), false, 'nothing written by a refused merge');

    // a shard copied under another name (two records for one index) is named
    const dup = join(dir, 'dup', 'planted');
    cpSync(four, dup, { recursive: true });
    cpSync(join(dup, 'shards', 'reproduce', 'shard-1-of-4'), join(dup, 'shards', 'reproduce', 'shard-1-of-4-copy'), { recursive: true });
    r = await cli('merge', dup);
    assert.equal(r.code, 2);
    assert.match(r.err, /shard-1-of-4-copy: folder holds shard 1\/4 \(expected shard-1-of-4\); duplicate or moved shard/);

    r = await cli('merge', four);
    assert.equal(r.code, 0, r.err);
    const cacheFiles = files(join(one.outDir, 'cache'));
    assert.deepEqual(files(join(four, 'cache')), cacheFiles);
    assert.equal(cacheFiles.filter((f) => f.endsWith('.safetensors')).length, 9);
    for (const f of cacheFiles) assert.ok(readFileSync(join(one.outDir, 'cache', f)).equals(readFileSync(join(four, 'cache', f))), `${f} differs`);
    // results and tables: the same up to the results folder's path
    const norm = (p: string): string => readFileSync(p, 'utf8').replaceAll(join(dir, 'four'), '<R>').replaceAll(join(dir, 'one'), '<R>');
    for (const f of ['results.json', 'manifest.json', ...files(join(one.outDir, 'tables')).map((t) => join('tables', t))]) {
      assert.equal(norm(join(four, f)), norm(join(one.outDir, f)), f);
    }
    assert.ok(existsSync(join(four, 'report.html')));
    // merging again reuses the assembled caches
    assert.equal((await cli('merge', four)).code, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('planted steer: extract ×2 shards + merge, then steer ×3 shards + merge = one process (generations, Table 3)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'shard-steer-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
  process.env.SAFEKEEP_QUIET = '1';
  try {
    const model = join(dir, 'planted');
    await writePlantedModel(model);
    const steerArgs = ['--model', model, '--limit', '24', '--alphas', '0,0.8,1.2', '--max-new-tokens', '10'];
    let r = await cli('steer', ...steerArgs, '--results', join(dir, 'one'));
    assert.equal(r.code, 0, r.err);
    const sharded = join(dir, 'three');
    // steer shards need the extraction caches first, and say so
    r = await cli('steer', ...steerArgs, '--results', sharded, '--shard', '0/3');
    assert.equal(r.code, 2);
    assert.match(r.err, /needs the caches prompt\.chatbot, prompt\.agent\.schema, prompt\.agent\.flattened/);
    for (const i of [0, 1]) {
      r = await cli('extract', '--model', model, '--limit', '24', '--configs', 'chatbot,agent', '--repr', 'schema,flattened', '--results', sharded, '--shard', `${i}/2`);
      assert.equal(r.code, 0, r.err);
    }
    assert.equal((await cli('merge', join(sharded, 'planted'))).code, 0);
    for (const f of ['prompt.chatbot', 'prompt.agent.schema', 'prompt.agent.flattened']) {
      assert.ok(readFileSync(join(dir, 'one', 'planted', 'cache', `${f}.safetensors`)).equals(readFileSync(join(sharded, 'planted', 'cache', `${f}.safetensors`))), f);
    }
    for (const i of [0, 1, 2]) {
      r = await cli('steer', ...steerArgs, '--results', sharded, '--shard', `${i}/3`);
      assert.equal(r.code, 0, r.err);
    }
    r = await cli('merge', join(sharded, 'planted'));
    assert.equal(r.code, 0, r.err);
    const outs = files(join(dir, 'one', 'planted', 'steering'));
    assert.equal(outs.filter((f) => f.startsWith('generations.')).length, 6);
    assert.deepEqual(files(join(sharded, 'planted', 'steering')), outs);
    for (const f of outs.filter((x) => !x.startsWith('log.'))) assert.ok(readFileSync(join(dir, 'one', 'planted', 'steering', f)).equals(readFileSync(join(sharded, 'planted', 'steering', f))), `steering/${f} differs`);
    // the per-sample logs: the same lines, up to the measured latencies
    const unmeasured = (p: string): string => readFileSync(p, 'utf8').replace(/"latencyMs":[\d.e+-]+/g, '"latencyMs":0');
    const logs = outs.filter((x) => x.startsWith('log.'));
    assert.equal(logs.length, 6);
    for (const f of logs) assert.equal(unmeasured(join(sharded, 'planted', 'steering', f)), unmeasured(join(dir, 'one', 'planted', 'steering', f)), `steering/${f} differs`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
