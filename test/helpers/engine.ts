/**
 * Shared helpers for the engine tests: a temp graph cache, max-abs-diff, and reading reference tensors.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSafetensorsHeader } from '../../src/checkpoint/safetensors.ts';
import { readTensorF32 } from '../../src/checkpoint/read.ts';

/** A fresh temp folder used as SAFEKEEP_CACHE (tests never touch ~/.cache). */
export function tempCache(): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-cache-'));
  process.env.SAFEKEEP_CACHE = dir;
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** max |a - b|; throws on length mismatch */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length mismatch: ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
  }
  return m;
}

/** All tensors of a .safetensors file as f32, by name. */
export function readAllF32(path: string): Map<string, { shape: number[]; data: Float32Array }> {
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const e of readSafetensorsHeader(path).entries) {
    out.set(e.name, { shape: e.shape, data: readTensorF32({ ...e, dtype: e.dtype as 'F32' }) });
  }
  return out;
}
