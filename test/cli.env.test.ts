/**
 * The SAFEKEEP_* variables: each one used anywhere in src/ is declared once in src/cli/env.ts and listed in the
 * README's table with the same values; the engine's are read only at the CLI edge and map to the options documented.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { dataDirsEnv, engineEnv, ENV_VARS, hubEnv, quietEnv } from '../src/cli/env.ts';
import { repoRoot } from '../src/data/locate.ts';

const sources = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []);

test('every SAFEKEEP_* variable in src/ and test/ is declared once and listed in the README', () => {
  const declared = ENV_VARS.map((v) => v.name);
  assert.equal(new Set(declared).size, declared.length, 'declared once');
  const used = new Set<string>();
  for (const f of [...sources(join(repoRoot, 'src')), ...sources(join(repoRoot, 'test'))]) {
    for (const m of readFileSync(f, 'utf8').matchAll(/SAFEKEEP_[A-Z_]+[A-Z]/g)) used.add(m[0]);
  }
  used.delete('SAFEKEEP_TEST_KEY'); // an API-key variable name the guard-backend test invents
  for (const u of used) assert.ok(declared.includes(u), `${u} is used but not declared in src/cli/env.ts`);
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
  for (const v of ENV_VARS) {
    const row = readme.split('\n').find((l) => l.startsWith(`| \`${v.name}\` |`));
    assert.ok(row, `${v.name} is not in the README's table`);
    assert.ok(row.includes(v.value.replace(/\|/g, '\\|')), `${v.name}: README values differ from ${v.value}`);
  }
});

test('engineEnv: the engine variables as options; unset or invalid values set nothing', () => {
  assert.deepEqual(engineEnv({}), {});
  assert.deepEqual(engineEnv({
    SAFEKEEP_CACHE: '/c', SAFEKEEP_THREADS: '3', SAFEKEEP_ATTENTION: 'matmul', SAFEKEEP_FUSE: '0',
    SAFEKEEP_QUANT_SCHEME: 'sym', SAFEKEEP_QUANT_ACCURACY: '2', SAFEKEEP_QUANT_BLOCK: '128', SAFEKEEP_SPIN: '1', SAFEKEEP_QUIET: '1',
  }), { cacheDir: '/c', threads: 3, attention: 'matmul', fuse: false, quantScheme: 'sym', quantAccuracy: 2, quantBlock: 128, spin: true, quiet: true });
  assert.deepEqual(engineEnv({
    SAFEKEEP_THREADS: '0', SAFEKEEP_ATTENTION: 'flash', SAFEKEEP_FUSE: '1', SAFEKEEP_QUANT_SCHEME: 'x', SAFEKEEP_QUANT_ACCURACY: '7', SAFEKEEP_QUANT_BLOCK: '48', SAFEKEEP_SPIN: '0', SAFEKEEP_QUIET: '',
  }), {});
  assert.deepEqual(engineEnv({ SAFEKEEP_ATTENTION: 'onnx' }), { attention: 'onnx' });
  assert.deepEqual(engineEnv({ SAFEKEEP_ATTENTION: 'mha' }), { attention: 'mha' });
});

test('hubEnv, dataDirsEnv, quietEnv: the hub, data-folder and progress variables as the options the library takes', () => {
  const cache = { hfCache: join(homedir(), '.cache', 'huggingface', 'hub') };
  assert.deepEqual(hubEnv({}), cache);
  assert.deepEqual(hubEnv({ SAFEKEEP_MODELS: '/m', HF_ENDPOINT: 'http://mirror', HF_TOKEN: 'hf_a', HUGGING_FACE_HUB_TOKEN: 'hf_b', SAFEKEEP_QUIET: '1' }),
    { modelsDir: '/m', endpoint: 'http://mirror', token: 'hf_a', progress: false, ...cache });
  assert.deepEqual(hubEnv({ HF_TOKEN: '', HUGGING_FACE_HUB_TOKEN: 'hf_b' }), { token: 'hf_b', ...cache }, 'the older name when HF_TOKEN is unset or empty');
  // the hub cache as huggingface_hub finds it, and HF_HUB_OFFLINE as it reads booleans
  assert.equal(hubEnv({ HF_HUB_CACHE: '/hc', HF_HOME: '/h' }).hfCache, '/hc');
  assert.equal(hubEnv({ HF_HOME: '/h', XDG_CACHE_HOME: '/x' }).hfCache, join('/h', 'hub'));
  assert.equal(hubEnv({ XDG_CACHE_HOME: '/x' }).hfCache, join('/x', 'huggingface', 'hub'));
  for (const v of ['1', 'ON', 'yes', 'True']) assert.equal(hubEnv({ HF_HUB_OFFLINE: v }).offline, true, v);
  for (const v of ['0', '', 'off']) assert.equal(hubEnv({ HF_HUB_OFFLINE: v }).offline, undefined, v);
  assert.deepEqual(dataDirsEnv({ SAFEKEEP_DATA: '/d', SAFEKEEP_SHARED: '/s' }), { data: '/d', shared: '/s' });
  assert.deepEqual(dataDirsEnv({ SAFEKEEP_DATA: '' }), {});
  assert.equal(quietEnv({ SAFEKEEP_QUIET: '1' }), true);
  assert.equal(quietEnv({ SAFEKEEP_QUIET: '' }), false);
});
