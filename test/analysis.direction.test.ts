import assert from 'node:assert/strict';
import { test } from 'node:test';
import { hiddenAt, makeActivations, rowsOfPairs } from '../src/analysis/activations.ts';
import {
  directionAt,
  directionNorms,
  layerCosines,
  meanDifference,
  meanHiddenNorm,
  refusalDirection,
} from '../src/analysis/direction.ts';
import { projectionStats, projections } from '../src/analysis/projection.ts';
import { matchRows, schemaDirection } from '../src/analysis/schema-direction.ts';
import { cosine, unit } from '../src/analysis/vector.ts';
import { SafekeepError } from '../src/util/errors.ts';

/** 4 rows, 2 layers, d = 2; rows 0,1 harmful, rows 2,3 benign. */
function tiny() {
  // prettier-ignore
  const data = Float32Array.from([
    /* row 0 */ 1, 0,   4, 2,
    /* row 1 */ 3, 2,   2, 2,
    /* row 2 */ 0, 0,   1, 0,
    /* row 3 */ 0, 2,   1, 4,
  ]);
  return { acts: makeActivations(4, 2, 2, data), labels: [1, 1, 0, 0] };
}

test('refusal direction = mean(harmful) − mean(benign) per layer (hand-computed)', () => {
  const { acts, labels } = tiny();
  const r = refusalDirection(acts, labels);
  // layer 0: harmful mean (2, 1), benign mean (0, 1) → (2, 0); layer 1: (3, 2) − (1, 2) = (2, 0)
  assert.deepEqual([...directionAt(r, 0)], [2, 0]);
  assert.deepEqual([...directionAt(r, 1)], [2, 0]);
  // on a subset of rows: harmful row 0, benign row 3 → layer 0: (1, −2), layer 1: (3, −2)
  const s = meanDifference(acts, labels, [0, 3]);
  assert.deepEqual([...s.data], [1, -2, 3, -2]);
  assert.deepEqual([...directionNorms(s)].map((x) => +x.toFixed(12)), [Math.sqrt(5), Math.sqrt(13)].map((x) => +x.toFixed(12)));
});

test('meanDifference needs both classes and valid labels', () => {
  const { acts } = tiny();
  assert.throws(() => meanDifference(acts, [1, 1, 0, 0], [0, 1]), SafekeepError);
  assert.throws(() => meanDifference(acts, [1, 2, 0, 0]), SafekeepError);
  assert.throws(() => meanDifference(acts, [1, 0, 0, 0], [0, 9]), SafekeepError);
});

test('cosine, unit, layer cosines', () => {
  assert.ok(Math.abs(cosine([1, 0], [1, 1]) - Math.SQRT1_2) < 1e-15);
  assert.equal(cosine([1, 2], [-2, 1]), 0);
  assert.equal(cosine([3, 4], [-6, -8]), -1);
  assert.equal(cosine([0, 0], [1, 2]), 0);
  assert.deepEqual([...unit([3, 4])], [0.6, 0.8]);
  const a = { layers: 2, d: 2, data: Float64Array.from([1, 0, 0, 1]) };
  const b = { layers: 2, d: 2, data: Float64Array.from([1, 1, 0, -3]) };
  const c = layerCosines(a, b);
  assert.ok(Math.abs(c[0]! - Math.SQRT1_2) < 1e-15);
  assert.equal(c[1], -1);
});

test('projections on the unit direction and their mean ± sd', () => {
  const { acts } = tiny();
  const dir = { layers: 2, d: 2, data: Float64Array.from([0, 5, 3, 4]) };
  // layer 0: r̂ = (0, 1) → y coordinates; layer 1: r̂ = (0.6, 0.8)
  assert.deepEqual([...projections(acts, dir, 0)], [0, 2, 0, 2]);
  const p1 = [...projections(acts, dir, 1)];
  [4 * 0.6 + 2 * 0.8, 2 * 0.6 + 2 * 0.8, 0.6, 0.6 + 4 * 0.8].forEach((v, i) => assert.ok(Math.abs(p1[i]! - v) < 1e-12));
  const st = projectionStats(acts, dir, [0, 1]);
  assert.equal(st.n, 2);
  assert.ok(Math.abs(st.mean[1]! - 3.4) < 1e-12);
  // sd of {4, 2.8} with n−1: |4 − 2.8| / √2
  assert.ok(Math.abs(st.sd[1]! - 1.2 / Math.SQRT2) < 1e-12);
  assert.throws(() => projections(acts, { layers: 2, d: 3, data: new Float64Array(6) }, 0), SafekeepError);
});

test('mean hidden norm per layer', () => {
  const { acts } = tiny();
  const m = meanHiddenNorm(acts);
  assert.ok(Math.abs(m[0]! - (1 + Math.sqrt(13) + 0 + 2) / 4) < 1e-12);
  assert.ok(Math.abs(m[1]! - (Math.sqrt(20) + Math.sqrt(8) + 1 + Math.sqrt(17)) / 4) < 1e-12);
  assert.deepEqual([...hiddenAt(acts, 3, 1)], [1, 4]);
});

test('Schema Direction = mean of matched differences; rows matched by request key', () => {
  const { acts: schema } = tiny();
  const text = makeActivations(4, 2, 2, schema.data.map((x) => x - 1));
  // text rows are in another order: text row i = schema row order[i]
  const order = [2, 0, 3, 1];
  const shuffled = makeActivations(4, 2, 2);
  order.forEach((src, i) => shuffled.data.set(text.data.subarray(src * 4, src * 4 + 4), i * 4));
  const m = matchRows(['a', 'b', 'c', 'd'], ['c', 'a', 'd', 'b']);
  assert.deepEqual(m, { a: [0, 1, 2, 3], b: [1, 3, 0, 2] });
  const R = schemaDirection(schema, shuffled, m.a, m.b);
  assert.deepEqual([...R.data], [1, 1, 1, 1]);
  // harmful-only subset: schema rows 0,1 ↔ text rows 1,3 → still a shift of exactly +1
  assert.deepEqual([...schemaDirection(schema, shuffled, [0, 1], [1, 3]).data], [1, 1, 1, 1]);
  assert.throws(() => matchRows(['a', 'a'], ['a']), SafekeepError);
  assert.throws(() => schemaDirection(schema, shuffled, [0, 1], [1]), SafekeepError);
});

test('rowsOfPairs maps a split to row indices and refuses pairs without rows', () => {
  const ids = ['p1', 'p1', 'p2', 'p2', 'p3', 'p3'];
  assert.deepEqual(rowsOfPairs(ids, ['p3', 'p1']), [0, 1, 4, 5]);
  assert.throws(() => rowsOfPairs(ids, ['p1', 'p9'], 'evaluation split'), (e) => e instanceof SafekeepError && /evaluation split: 1 pair id\(s\) have no activation row, e.g. 'p9'/.test(e.message));
});
