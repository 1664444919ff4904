/**
 * Intervention values the float32 graph cannot hold are refused up front (one line, exit 2 from the CLI) rather
 * than turning into Inf/NaN hidden states: vector entries beyond ±3.4e38 (JSON's 1e400 is Infinity), |alpha| above
 * MAX_ALPHA = 1e12 (beyond it the steered state overflows in the model's norms), and adds at one layer that sum past
 * it; large but representable vectors are normalised without overflow.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { interventionInputs } from '../src/engine/run/batch.ts';
import type { Intervention } from '../src/engine/types.ts';
import { HF5 } from './helpers/hf5.ts';
import { repoRoot } from './helpers/shared.ts';

const d = 4;
const e0 = [1, 0, 0, 0];

test('interventionInputs: alpha and vector entries beyond float32 are refused', () => {
  const bad: [Intervention[], RegExp][] = [
    [[{ layer: 1, kind: 'add', vector: e0, alpha: 1e308 }], /alpha must be a finite number with \|alpha\| ≤ 1e\+12/],
    [[{ layer: 1, kind: 'clamp', vector: e0, alpha: -1e39 }], /alpha must be a finite number with \|alpha\| ≤ 1e\+12/],
    [[{ layer: 1, kind: 'add', vector: e0, alpha: 3e38 }], /alpha must be a finite number with \|alpha\| ≤ 1e\+12/],
    [[{ layer: 1, kind: 'add', vector: e0, alpha: Infinity }], /alpha must be a finite number/],
    [[{ layer: 1, kind: 'add', vector: [1e308, 0, 0, 0], alpha: 1 }], /vector value 0 \(1e\+308\) is not a finite float32 number/],
    [[{ layer: 1, kind: 'ablate', vector: [1, Number.NaN, 0, 0] }], /vector value 1 \(NaN\) is not a finite float32 number/],
    [[{ layer: 1, kind: 'add', vector: e0, alpha: 6e11 }, { layer: 1, kind: 'add', vector: e0, alpha: 6e11 }], /the steering at layer 1 \(all its adds together\) has norm above 1e\+12/],
  ];
  for (const [list, re] of bad) assert.throws(() => interventionInputs(2, d, list), re, JSON.stringify(list.map((x) => x.alpha)));
});

test('interventionInputs: a vector of large representable entries is normalised exactly (no overflow in the norm)', () => {
  const big = [3e38, 3e38, 0, 0];
  const r = interventionInputs(2, d, [{ layer: 2, kind: 'add', vector: big, alpha: 2 }, { layer: 1, kind: 'ablate', vector: big }]);
  const s = Math.SQRT1_2;
  assert.deepEqual([...r.steer.subarray(2 * d, 3 * d)], [Math.fround(2 * s), Math.fround(2 * s), 0, 0]);
  assert.deepEqual([...r.dir.subarray(d, 2 * d)], [Math.fround(s), Math.fround(s), 0, 0]);
});

const tmp = mkdtempSync(join(tmpdir(), 'safekeep-ivf32-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

test('forward --intervene with alpha 1e308 or 1e400, or a vector entry of 1e39: exit 2, one line', () => {
  const model = join(HF5, 'llama-default', 'model');
  writeFileSync(join(tmp, 'ids.json'), JSON.stringify({ input_ids: [[1, 2, 3]] }));
  const v = new Array(32).fill(0.1);
  const files: [string, RegExp][] = [
    [JSON.stringify({ interventions: [{ layer: 1, kind: 'add', vector: v, alpha: 1e308 }] }), /interventions\[0\]\.alpha must be a finite number with \|alpha\| ≤ 1e\+12 .*got 1e\+308/],
    [`{"interventions": [{"layer": 1, "kind": "clamp", "vector": [${v.join(',')}], "alpha": 1e400}]}`, /interventions\[0\]\.alpha must be a finite number with \|alpha\| ≤ 1e\+12 .*got Infinity/],
    [JSON.stringify({ interventions: [{ layer: 1, kind: 'ablate', vector: [1e39, ...v.slice(1)] }] }), /interventions\[0\]\.vector must be a list of finite numbers within the float32 range/],
  ];
  for (const [text, re] of files) {
    writeFileSync(join(tmp, 'iv.json'), text);
    const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'forward', '--model', model, '--ids', join(tmp, 'ids.json'), '--intervene', join(tmp, 'iv.json'), '--out', join(tmp, 'x.safetensors')],
      { encoding: 'utf8', env: { ...process.env, SAFEKEEP_CACHE: join(tmp, 'cache'), SAFEKEEP_THREADS: '1' }, timeout: 60_000 });
    assert.equal(r.status, 2, r.stderr);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, re);
  }
});
