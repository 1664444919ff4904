/**
 * The package as a user gets it: `npm pack` on a fresh clone (the tracked and untracked-but-not-ignored files, no
 * dist/, no manual build: prepack builds it — .npmrc no longer sets ignore-scripts), the tarball holding dist/,
 * installed into an empty project with the command docs/api.md gives (`ONNXRUNTIME_NODE_INSTALL=skip npm install
 * ./safekeep-*.tgz`: onnxruntime-node's install script would download its CUDA provider), then, with no loader: a
 * plain-JavaScript script (a random checkpoint: hook points, steering, generation) and docs/api.md's TypeScript
 * example compiled by tsc against the installed declarations; and the installed CLI answers --help. The printed
 * figures are checked against the Float64 oracle. Installing needs the npm registry or a warm npm cache
 * (`--prefer-offline`). Slow (a full tsc build and an install of every dependency: minutes), so it is not in
 * test:unit.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { repoRoot } from '../src/data/locate.ts';
import { referenceForward, referenceGenerate } from '../src/engine/reference.ts';
import { apiExamples, oraclePatching, parsePatchingLine } from './helpers/docs-examples.ts';
import { maxAbsDiff } from './helpers/engine.ts';

const npm = (args: string[], cwd: string, env?: Record<string, string>) => execFileSync('npm', args, { cwd, encoding: 'utf8', timeout: 300_000, stdio: ['ignore', 'pipe', 'pipe'], ...(env ? { env: { ...process.env, ...env } } : {}) });

/** A fresh clone of the working tree: what git tracks or would (ignored files, dist/ among them, left out); node_modules as `npm ci` left it. */
function freshClone(to: string): void {
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: repoRoot, encoding: 'utf8' }).split('\0').filter(Boolean);
  for (const f of files) {
    mkdirSync(dirname(join(to, f)), { recursive: true });
    try { cpSync(join(repoRoot, f), join(to, f)); } catch (e) { if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e; } // deleted, not yet committed
  }
  symlinkSync(join(repoRoot, 'node_modules'), join(to, 'node_modules'), 'dir');
}

/** The plain-JavaScript user: every figure it prints is recomputed by the oracle below. */
const JS_SCRIPT = `
import { createEngine, writeRandomCheckpoint, ActivationCache, HOOK_POINTS, isSafekeepError } from 'safekeep';
const dir = process.argv[2];
await writeRandomCheckpoint(dir + '/m', 'qwen3', { numLayers: 2, hiddenSize: 32, numHeads: 4, numKvHeads: 2, headDim: 8, intermediateSize: 48, vocabSize: 61, seed: 5, std: 0.2 });
const engine = await createEngine(dir + '/m', { cacheDir: dir + '/cache', threads: 1 });
const ids = [3, 14, 15, 9, 26];
const { logits, cache } = await engine.runWithCache(ids, { names: ['blocks.*.z', 'blocks.1.pattern'] });
cache.save(dir + '/acts.safetensors', { note: 'from the tarball' });
const back = ActivationCache.load(dir + '/acts.safetensors');
const vector = Array.from({ length: 32 }, (_, i) => Math.cos(i));
const [steered] = await engine.forward([ids], { steer: { layer: 1, vector, alpha: 3 }, hiddenAt: 'last', logitsAt: 'none' });
const [gen] = await engine.generate([ids], { maxNewTokens: 4, stopIds: [] });
let refused = false;
try { await engine.runWithCache(ids, { names: ['blocks.9.z'] }); } catch (e) { refused = isSafekeepError(e); }
await engine.dispose();
console.log(JSON.stringify({ points: HOOK_POINTS.length, names: back.names, zShape: back.get('blocks.0.z').shape,
  z0: Array.from(cache.get('blocks.0.z').data), pattern: cache.get('blocks.1.pattern').shape, logits: Array.from(logits),
  steered: Array.from(steered.hidden), generated: gen.generatedIds, refused }));
`;

test('npm pack → install in an empty project → plain JS and compiled TypeScript use the package with no loader', { timeout: 600_000 }, async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-tarball-'));
  try {
    const clone = join(tmp, 'clone');
    freshClone(clone);
    npm(['pack', '--pack-destination', tmp], clone);
    const tgz = readdirSync(tmp).find((f) => f.endsWith('.tgz'));
    assert.ok(tgz, 'npm pack wrote a tarball');
    const listing = execFileSync('tar', ['-tzf', join(tmp, tgz)], { encoding: 'utf8' }).split('\n');
    for (const f of ['package/dist/index.js', 'package/dist/index.d.ts', 'package/bin/safekeep.mjs']) assert.ok(listing.includes(f), `the tarball has ${f}`);
    const proj = join(tmp, 'proj');
    mkdirSync(proj);
    writeFileSync(join(proj, 'package.json'), JSON.stringify({ name: 'uses-safekeep', private: true, type: 'module' }));
    // docs/api.md's command (install scripts run; onnxruntime-node's is told to skip its CUDA download)
    npm(['install', join(tmp, tgz), '--prefer-offline', '--no-audit', '--no-fund', '--no-package-lock'], proj, { ONNXRUNTIME_NODE_INSTALL: 'skip' });

    // plain JavaScript, `node script.mjs`
    writeFileSync(join(proj, 'script.mjs'), JS_SCRIPT);
    const out = JSON.parse(execFileSync(process.execPath, [join(proj, 'script.mjs'), join(tmp, 'js')], { cwd: proj, encoding: 'utf8', timeout: 120_000 }).trim().split('\n').at(-1)!);
    const ck = await loadCheckpoint(join(tmp, 'js', 'm'));
    const ids = [3, 14, 15, 9, 26];
    const ref = referenceForward(ck, ids, { capture: ['blocks.0.z'] });
    assert.equal(out.points, 7);
    assert.deepEqual([...out.names].sort(), ['blocks.0.z', 'blocks.1.pattern', 'blocks.1.z'], 'the saved cache loads back (safetensors keeps names sorted)');
    assert.deepEqual(out.zShape, [5, 4, 8]);
    assert.deepEqual(out.pattern, [4, 5, 5]);
    assert.ok(maxAbsDiff(out.logits, ref.logits) <= 1e-4, 'logits = oracle');
    assert.ok(maxAbsDiff(out.z0, ref.hooks.get('blocks.0.z')!) <= 1e-4, 'z = oracle');
    const vector = Array.from({ length: 32 }, (_, i) => Math.cos(i));
    const steered = referenceForward(ck, ids, { steer: { layer: 1, vector, alpha: 3 } });
    const L = ck.config.numLayers;
    const lastRows = Array.from({ length: L + 1 }, (_, l) => Array.from(steered.hidden.subarray((l * 5 + 4) * 32, (l * 5 + 5) * 32))).flat();
    assert.ok(maxAbsDiff(out.steered, lastRows) <= 1e-4, 'steered hidden states = oracle');
    assert.deepEqual(out.generated, referenceGenerate(ck, ids, { maxNewTokens: 4, stopIds: [] }).generatedIds);
    assert.equal(out.refused, true, 'bad input is a SafekeepError across the package boundary');

    // the CLI ships too (bin/safekeep.mjs runs the TypeScript sources through tsx, a dependency)
    const help = execFileSync(process.execPath, [join(proj, 'node_modules', 'safekeep', 'bin', 'safekeep.mjs'), '--help'], { cwd: proj, encoding: 'utf8', timeout: 120_000 });
    assert.match(help, /generate/);

    // TypeScript: docs/api.md's patching example, type-checked and compiled by tsc against the installed package
    const example = apiExamples().find((c) => c.includes('runWithHooks'));
    assert.ok(example, 'docs/api.md has the patching example');
    writeFileSync(join(proj, 'example.mts'), example);
    writeFileSync(join(proj, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { module: 'nodenext', target: 'es2022', strict: true, skipLibCheck: true, outDir: 'out',
        types: ['node'], typeRoots: [join(repoRoot, 'node_modules', '@types')] },
      files: ['example.mts'],
    }));
    execFileSync(process.execPath, [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', proj], { cwd: proj, encoding: 'utf8', timeout: 120_000 });
    const printed = parsePatchingLine(execFileSync(process.execPath, [join(proj, 'out', 'example.mjs')], { cwd: proj, encoding: 'utf8', timeout: 120_000 }));
    assert.ok(printed, 'the example printed its line');
    const oracle = await oraclePatching(join(tmp, 'planted'));
    for (const k of ['clean', 'corrupted', 'patched'] as const) assert.ok(Math.abs(printed[k] - oracle[k]) <= 1.5e-4, `${k}: ${printed[k]} vs oracle ${oracle[k]}`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
