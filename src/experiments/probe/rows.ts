/**
 * A cached condition as probe input: activations [n, L+1, d], labels (1 = harmful), pair ids, and the row indices of
 * the extraction and evaluation splits (rows are `<pairId>:harmful|benign`, the same order in every cache).
 */
import { makeActivations, type Activations } from '../../analysis/activations.ts';
import { readActivationCache } from '../../cache/store.ts';
import type { Split } from '../../data/types.ts';

export interface CachedRows {
  acts: Activations;
  labels: Uint8Array;
  pairIds: string[];
  extraction: number[];
  evaluation: number[];
}

export function cachedRows(cacheDir: string, cacheName: string, split: Split): CachedRows {
  const c = readActivationCache(cacheDir, cacheName);
  const keys = (c.manifest.rows as { key: string }[]).map((r) => r.key);
  const pairIds = keys.map((k) => k.slice(0, k.lastIndexOf(':')));
  const labels = Uint8Array.from(keys, (k) => (k.endsWith(':harmful') ? 1 : 0));
  const ext = new Set(split.extraction);
  const extraction: number[] = [];
  const evaluation: number[] = [];
  pairIds.forEach((p, i) => (ext.has(p) ? extraction : evaluation).push(i));
  return { acts: makeActivations(c.n, c.layers, c.d, c.data), labels, pairIds, extraction, evaluation };
}
