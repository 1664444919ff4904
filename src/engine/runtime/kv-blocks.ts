/**
 * Automatic prefix caching: the KV of prompt prefixes kept in blocks of `blockTokens` slots, keyed by the tokens they
 * hold and everything before them (a hash chain: key_i = H(key_{i−1}, tokens of block i), key_{−1} = H(salt), the
 * salt naming what else changes the KV — the prefill's interventions). A prompt reuses the longest chain of cached
 * full blocks, so a hit ends on a block boundary even when the shared prefix ends inside a block: that block's
 * tokens are recomputed, as they are not known to be shared.
 *
 * Blocks are copied into a sequence's own KV when its prefill starts (synchronously, in one call), so a block is
 * never in use while the store evicts: the store is an LRU bounded in bytes (least recently hit or written first)
 * and needs no reference counts.
 *
 * Admission (`admitAfter`): a block is stored only once `admitAfter` prompts have asked for it (`ask`, once per
 * prompt). With 1 every prompt's blocks are copied in; with 2 (the scheduler's default) only prefixes some other
 * prompt shares are, so a workload of unrelated prompts holds no second copy of their KV beside the decode rows (a
 * cache of every prompt doubled the prompt KV at the peak: 256 MiB of blocks on the serving benchmark, all misses).
 * A prefix shared by prompts in flight together is still computed once (the later ones have asked before the first
 * writes it); one asked again only after its first prompt finished is computed twice, then served. The asking
 * counts are kept for the most recent `askedKeys` block keys (an LRU of hashes: ~150 bytes a key).
 */
import { createHash } from 'node:crypto';
import { copySlots, kvArrayLike, type KvArray } from './kv.ts';

/** One block: per layer [kvH, blockTokens, hd] keys and values. */
interface Block {
  keys: KvArray[];
  values: KvArray[];
}

export interface BlockStats {
  /** prompt tokens that could have been reused (every prompt token but the last) */
  lookedUp: number;
  /** full blocks not stored because fewer than `admitAfter` prompts had asked for them */
  declined: number;
  /** of those, served from the store */
  hit: number;
  blocks: number;
  bytes: number;
}

export class KvBlockStore {
  private readonly blocks = new Map<string, Block>();
  private bytes = 0;
  /** prompts that asked for a block key (most recent keys last), for admission */
  private readonly asked = new Map<string, number>();
  readonly stats: BlockStats = { lookedUp: 0, declined: 0, hit: 0, blocks: 0, bytes: 0 };

  /** `elementBytes`: 4 for an f32 KV, 2 for f16; `admitAfter`: prompts that must ask for a block before it is stored */
  constructor(readonly layers: number, readonly kvHeads: number, readonly headDim: number,
    readonly blockTokens: number, public maxBytes: number, readonly elementBytes = 4, readonly admitAfter = 1,
    readonly askedKeys = 65536) {
    if (!Number.isInteger(blockTokens) || blockTokens < 1) throw new Error(`KvBlockStore: blockTokens must be a positive integer, got ${blockTokens}`);
    if (!Number.isInteger(admitAfter) || admitAfter < 1) throw new Error(`KvBlockStore: admitAfter must be a positive integer, got ${admitAfter}`);
  }

  /** one prompt asks for the blocks of `chain` (call once per prompt): counted for admission */
  ask(chain: readonly string[]): void {
    if (this.admitAfter <= 1) return;
    for (const key of chain) {
      const n = this.asked.get(key) ?? 0;
      this.asked.delete(key);
      this.asked.set(key, n + 1);
    }
    for (const key of this.asked.keys()) {
      if (this.asked.size <= this.askedKeys) break;
      this.asked.delete(key);
    }
  }

  get blockBytes(): number {
    return 2 * this.layers * this.kvHeads * this.blockTokens * this.headDim * this.elementBytes;
  }

  /** the chain of keys of a prompt's full blocks: keys[i] names tokens 0..(i+1)·blockTokens−1 under `salt` */
  chain(ids: readonly number[], salt: string): string[] {
    const out: string[] = [];
    let prev = createHash('sha256').update(salt).digest('hex');
    const n = Math.floor(ids.length / this.blockTokens);
    for (let i = 0; i < n; i++) {
      const toks = Int32Array.from(ids.slice(i * this.blockTokens, (i + 1) * this.blockTokens));
      prev = createHash('sha256').update(prev).update(new Uint8Array(toks.buffer)).digest('hex');
      out.push(prev);
    }
    return out;
  }

  /** how many blocks `read` would copy now (the cached run along `chain` within maxTokens), touching nothing */
  cachedBlocks(chain: readonly string[], maxTokens: number): number {
    let n = 0;
    while (n < chain.length && (n + 1) * this.blockTokens <= maxTokens && this.blocks.has(chain[n]!)) n++;
    return n;
  }

  /**
   * The longest run of cached blocks along `chain`, at most `maxTokens` tokens, copied into `dst` (per layer
   * [kvH, dstCapacity, hd], slots from 0). Returns the number of tokens copied. Hits move to the LRU's end.
   */
  read(chain: readonly string[], maxTokens: number, dst: { keys: KvArray[]; values: KvArray[]; capacity: number }): number {
    const BT = this.blockTokens;
    const { kvHeads: kvH, headDim: hd } = this;
    const n = this.cachedBlocks(chain, maxTokens);
    for (let i = 0; i < n; i++) {
      const key = chain[i]!;
      const blk = this.blocks.get(key)!;
      this.blocks.delete(key);
      this.blocks.set(key, blk);
      for (let l = 0; l < this.layers; l++) {
        copySlots(blk.keys[l]!, BT, 0, dst.keys[l]!, dst.capacity, i * BT, kvH, BT, hd);
        copySlots(blk.values[l]!, BT, 0, dst.values[l]!, dst.capacity, i * BT, kvH, BT, hd);
      }
    }
    this.stats.lookedUp += maxTokens;
    this.stats.hit += n * BT;
    return n * BT;
  }

  /**
   * Store the full blocks i with from ≤ i < to along `chain` from a sequence's KV `src` (per layer [kvH, capacity, hd],
   * slot 0 = token 0); blocks already stored are refreshed in the LRU, blocks fewer than `admitAfter` prompts asked
   * for are not stored. Evicts least recently used blocks beyond maxBytes.
   */
  write(chain: readonly string[], from: number, to: number, src: { keys: KvArray[]; values: KvArray[]; capacity: number }): void {
    if (this.blockBytes > this.maxBytes) return;
    const BT = this.blockTokens;
    const { kvHeads: kvH, headDim: hd } = this;
    for (let i = from; i < Math.min(to, chain.length); i++) {
      const key = chain[i]!;
      const old = this.blocks.get(key);
      if (old) { this.blocks.delete(key); this.blocks.set(key, old); continue; }
      if (this.admitAfter > 1 && (this.asked.get(key) ?? 0) < this.admitAfter) { this.stats.declined++; continue; }
      const take = (bufs: KvArray[]) => bufs.map((t) => {
        const out = kvArrayLike(t, kvH * BT * hd);
        copySlots(t, src.capacity, i * BT, out, BT, 0, kvH, BT, hd);
        return out;
      });
      this.blocks.set(key, { keys: take(src.keys), values: take(src.values) });
      this.bytes += this.blockBytes;
    }
    this.evict();
  }

  private evict(): void {
    for (const key of this.blocks.keys()) {
      if (this.bytes <= this.maxBytes) break;
      this.blocks.delete(key);
      this.bytes -= this.blockBytes;
    }
    this.stats.blocks = this.blocks.size;
    this.stats.bytes = this.bytes;
  }

  /** drop every block (e.g. after the weights changed) */
  clear(): void {
    this.blocks.clear();
    this.asked.clear();
    this.bytes = 0;
    this.evict();
  }
}
