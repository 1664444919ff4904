/**
 * scripts/check-gpu.ts keeps working without a GPU: `--as cpu` runs the whole parity checklist with the CPU standing
 * in for the GPU (every line ok for f16 and f32, bf16w a FAIL line and exit 1 since the CPU has no bf16 MatMul), and
 * on a host without onnxruntime's CUDA provider `--device cuda` says so in one line and exits 0; `--device webgpu` on
 * a WebGPU adapter (lavapipe in CI) gives the parity lines, without one a line saying what to install.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './helpers/shared.ts';
import { webgpuSkipReason } from './helpers/webgpu.ts';

const run = (args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', join(repoRoot, 'scripts', 'check-gpu.ts'), ...args],
  { cwd: repoRoot, encoding: 'utf8', env: { ...process.env, SAFEKEEP_THREADS: '1' } });

test('check:gpu --as cpu: parity lines ok for f16 and f32, a clear FAIL for bf16w', () => {
  const r = run(['--as', 'cpu', '--no-speed', '--dtypes', 'f16,f32']);
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const lines = r.stdout.trim().split('\n');
  for (const d of ['f16', 'f32']) {
    assert.ok(lines.some((l) => l.startsWith('[ok  ]') && l.includes(`cpu ${d} vs cpu f32: hidden`)), `${d} parity line: ${r.stdout}`);
    assert.ok(lines.some((l) => l.startsWith('[ok  ]') && l.includes(`cpu ${d}: 16 greedy tokens equal`)), `${d} greedy line`);
  }
  assert.ok(!lines.some((l) => l.startsWith('[FAIL]')));
  assert.match(lines.at(-1)!, /all checks passed/);
  const b = run(['--as', 'cpu', '--no-speed', '--dtypes', 'bf16w']);
  assert.equal(b.status, 1);
  assert.match(b.stdout, /\[FAIL\] cpu bf16w: the session does not start — --dtype bf16w runs only with --device cuda/);
  const bad = run(['--dtypes', 'f8']);
  assert.equal(bad.status, 2);
  assert.equal(bad.stderr.trim(), 'check:gpu: --dtypes: f8 is not one of f32, bf16, f16, bf16w');
});

test('check:gpu without the CUDA provider: one line, exit 0', (t) => {
  const lib = join(repoRoot, 'node_modules', 'onnxruntime-node', 'bin', 'napi-v6', process.platform, process.arch, 'libonnxruntime_providers_cuda.so');
  if (existsSync(lib)) {
    t.skip('the CUDA provider is installed here: run `npm run check:gpu` itself');
    return;
  }
  const r = run(['--device', 'cuda', '--no-speed']);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^check:gpu: cuda is not available on this host — --device cuda: onnxruntime's CUDA execution provider is not installed/);
  // the same instruction as `--device cuda`'s error and docs/engine.md: the command that installs and checks
  assert.match(r.stdout, /run `npm run install:cuda` \(installs the provider and checks it loads/);
  assert.match(r.stdout, /Nothing to check/);
});

test('check:gpu --device webgpu: parity lines ok for f16 and f32 and bf16w refused by name on an adapter; one line, exit 0, without one', async (t) => {
  const skip = await webgpuSkipReason();
  if (skip) t.diagnostic(`no WebGPU adapter here (${skip}): only the no-adapter line is checked`);
  else {
    const r = run(['--device', 'webgpu', '--no-speed', '--dtypes', 'f16,f32,bf16w']);
    assert.equal(r.status, 0, r.stdout + r.stderr);
    for (const d of ['f16', 'f32']) assert.match(r.stdout, new RegExp(`\\[ok  \\] webgpu ${d} vs cpu f32: hidden`));
    assert.match(r.stdout, /\[info\] webgpu bf16w: refused by name/);
    assert.match(r.stdout, /all checks passed/);
  }
  // no Vulkan driver: Dawn finds no adapter
  const none = spawnSync(process.execPath, ['--import', 'tsx', join(repoRoot, 'scripts', 'check-gpu.ts'), '--device', 'webgpu', '--no-speed'],
    { cwd: repoRoot, encoding: 'utf8', env: { ...process.env, SAFEKEEP_THREADS: '1', VK_ICD_FILENAMES: '/nonexistent/icd.json' } });
  assert.equal(none.status, 0, none.stderr);
  assert.match(none.stdout, /^check:gpu: webgpu is not available on this host — --device webgpu: no WebGPU adapter: install your GPU's Vulkan driver; on a machine without a GPU, Mesa's lavapipe/);
});
