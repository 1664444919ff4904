/** Small pieces the scheduler tests share: relative error, deterministic prompts, polling between steps. */
import assert from 'node:assert/strict';
import { maxAbsDiff } from './engine.ts';

function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]!));
  return m;
}

/** max |a − b| / max |b| */
export function rel(a: ArrayLike<number>, b: ArrayLike<number>): number {
  return maxAbsDiff(a, b) / Math.max(1e-12, maxAbs(b));
}

/** deterministic pseudo-random ids in 1..vocab−1 */
export function prompt(seed: number, n: number, vocab: number): number[] {
  let x = seed * 7919 + 13;
  return Array.from({ length: n }, () => { x = (x * 1103515245 + 12345) % 2 ** 31; return 1 + (x % (vocab - 1)); });
}

/** resolves once `cond()` holds (polled between the scheduler's steps) */
export async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 100000 && !cond(); i++) await new Promise((r) => setImmediate(r));
  assert.ok(cond(), 'condition never held');
}
