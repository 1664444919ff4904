import assert from 'node:assert/strict';
import { test } from 'node:test';
import { allRows } from '../src/analysis/activations.ts';
import { chooseLayerByCV, pairFolds } from '../src/analysis/crossval.ts';
import { directionAt, refusalDirection } from '../src/analysis/direction.ts';
import { cosine } from '../src/analysis/vector.ts';
import { planted } from './helpers/analysis-synthetic.ts';

// 7 layers, d = 64: strong planted direction at layers 3–4, weak at 2 and 5, none elsewhere
const strength = [0, 0, 2, 12, 12, 2, 0];

test('planted direction: recovered at the planted layers with cosine ≥ 0.99', () => {
  const p = planted({ pairs: 150, layers: 7, d: 64, strength, seed: 3 });
  const r = refusalDirection(p.acts, p.labels);
  for (const l of [3, 4]) {
    const c = cosine(directionAt(r, l), p.u);
    assert.ok(c >= 0.99, `layer ${l}: cosine ${c}`);
  }
  // no signal at layer 0: the mean difference is noise, nearly orthogonal to u (|cos| ≲ 3/√64)
  assert.ok(Math.abs(cosine(directionAt(r, 0), p.u)) < 0.4);
});

test('ℓ* by k-fold CV lands in the planted layers and ignores evaluation rows', () => {
  const p = planted({ pairs: 150, layers: 7, d: 64, strength, seed: 4 });
  // evaluation rows (pairs 100..149) get a huge extra signal at layer 6: CV on the extraction rows must not see it
  for (let row = 200; row < 300; row++) {
    if (p.labels[row] !== 1) continue;
    const off = (row * 7 + 6) * 64;
    for (let j = 0; j < 64; j++) p.acts.data[off + j]! += 50 * p.u[j]!;
  }
  const extraction = allRows(200);
  const choice = chooseLayerByCV(p.acts, p.labels, p.pairIds, extraction, { k: 5, seed: 1 });
  assert.ok([3, 4].includes(choice.layer), `ℓ* = ${choice.layer}`);
  assert.ok(Number.isNaN(choice.cvAuroc[0]!), 'layer 0 (embeddings) is not a candidate by default');
  assert.ok(choice.cvAuroc[3]! > 0.99 && choice.cvAuroc[4]! > 0.99);
  assert.ok(choice.cvAuroc[2]! < 0.97 && choice.cvAuroc[2]! > 0.7, `weak layer: ${choice.cvAuroc[2]}`);
  assert.ok(Math.abs(choice.cvAuroc[6]! - 0.5) < 0.15, `no-signal layer: ${choice.cvAuroc[6]}`);
  // with every row, layer 6 wins — proving the exclusion above is what kept it out
  const leaky = chooseLayerByCV(p.acts, p.labels, p.pairIds, allRows(300), { k: 5, seed: 1 });
  assert.ok(leaky.cvAuroc[6]! > 0.6);
});

test('folds keep pairs together and are balanced', () => {
  const ids = Array.from({ length: 23 }, (_, i) => `p${i}`).flatMap((p) => [p, p]);
  const f = pairFolds(ids, 5, 0);
  assert.equal(f.size, 23);
  const sizes = [0, 0, 0, 0, 0];
  for (const v of f.values()) sizes[v]!++;
  assert.deepEqual(sizes.sort(), [4, 4, 5, 5, 5]);
  assert.deepEqual(pairFolds(ids, 5, 0), f);
});
