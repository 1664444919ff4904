/**
 * `.npmrc` names onnxruntime-node's install switch instead of ignore-scripts: npm hands its installer "skip", so
 * `npm ci` downloads nothing (its postinstall would fetch the CUDA provider from NuGet on linux-x64), while every
 * other lifecycle script runs (`npm pack` builds dist/ through prepack; test/package.tarball.test.ts packs).
 * The installer runs here as `npm ci` runs it — from its own package folder, under this project's prefix — on a copy
 * of its scripts, with every connection sent to a closed port: with the switch it exits 0 having touched nothing;
 * without it, it tries to download (so this test can fail).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './helpers/shared.ts';

test('.npmrc: onnxruntime-node\'s installer gets "skip" from npm and exits without a download; without it, it downloads', () => {
  // what npm puts in a script's environment from this project's config (the same for lifecycle scripts)
  const handed = execFileSync('npm', ['exec', '--offline', '-c', 'node -p process.env.npm_config_onnxruntime_node_install'], { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 }).trim();
  assert.equal(handed, 'skip');
  assert.equal(execFileSync('npm', ['config', 'get', 'ignore-scripts'], { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim(), 'false', 'lifecycle scripts run (prepack builds dist/)');

  const ortSrc = join(repoRoot, 'node_modules', 'onnxruntime-node');
  const ort = mkdtempSync(join(tmpdir(), 'safekeep-ort-install-'));
  try {
    cpSync(join(ortSrc, 'script'), join(ort, 'script'), { recursive: true });
    cpSync(join(ortSrc, 'package.json'), join(ort, 'package.json'));
    const { ONNXRUNTIME_NODE_INSTALL: _a, ONNXRUNTIME_NODE_INSTALL_CUDA: _b, npm_config_onnxruntime_node_install: _c, ...env } = process.env;
    const run = (extra: Record<string, string>) => spawnSync(process.execPath, [join(ort, 'script', 'install.js')], {
      cwd: ort, encoding: 'utf8', timeout: 60_000,
      env: {
        ...env, ...extra,
        NODE_PATH: join(repoRoot, 'node_modules'),
        // as under `npm ci`: the package's own package.json, this project's prefix (not the installer's "local" case)
        npm_config_local_prefix: repoRoot, npm_package_json: join(ort, 'package.json'),
        // any download goes to a closed port
        GLOBAL_AGENT_HTTPS_PROXY: 'http://127.0.0.1:9', GLOBAL_AGENT_HTTP_PROXY: 'http://127.0.0.1:9',
      },
    });
    const skipped = run({ npm_config_onnxruntime_node_install: handed });
    assert.equal(skipped.status, 0, skipped.stderr);
    assert.equal(existsSync(join(ort, 'bin')), false, 'nothing installed');
    if (process.platform === 'linux' && process.arch === 'x64') {
      const plain = run({});
      assert.notEqual(plain.status, 0, 'without the switch the installer tries NuGet');
      assert.match(plain.stderr, /ECONNREFUSED|127\.0\.0\.1:9/);
    }
  } finally {
    rmSync(ort, { recursive: true, force: true });
  }
});
