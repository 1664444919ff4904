/**
 * Byte-bounded LRU of shared-prefix KV (prefix.ts): each distinct prefix's batch-1 KV kept across calls.
 */

import type { KvArray } from '../runtime/kv.ts';

/** Batch-1 KV of a prefix: per layer [1, kvH, P, hd] */
export interface PrefixKv {
  keys: KvArray[];
  values: KvArray[];
  length: number;
  bytes: number;
}

/** Byte-bounded LRU of prefix KV (Map insertion order = recency). */
export class PrefixCache {
  private readonly map = new Map<string, PrefixKv>();
  private used = 0;
  hits = 0;
  misses = 0;
  /** most bytes of KV held (default 1 GiB) */
  constructor(readonly maxBytes = 1 << 30) {}

  get(key: string): PrefixKv | undefined {
    const v = this.map.get(key);
    if (v) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  set(key: string, v: PrefixKv): void {
    if (this.map.has(key)) return;
    if (v.bytes > this.maxBytes) return;
    this.map.set(key, v);
    this.used += v.bytes;
    for (const [k, old] of this.map) {
      if (this.used <= this.maxBytes) break;
      this.map.delete(k);
      this.used -= old.bytes;
    }
  }

  get bytes(): number {
    return this.used;
  }

  get size(): number {
    return this.map.size;
  }
}

