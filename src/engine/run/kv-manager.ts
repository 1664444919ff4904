/**
 * The scheduler's KV manager: it owns every slot of K/V the scheduler holds — each prefilling sequence's prompt KV
 * (batch 1, grown chunk by chunk), one decode buffer per decode group (runtime/row-kv.ts: a row per sequence, rows
 * joining and leaving between steps) and the prefix cache's blocks (runtime/kv-blocks.ts) — and every copy between
 * them: a prefix hit into a prompt's KV, a chunk's completed blocks into the store, a pack's pasts into one step and
 * its new slots back, a finished prefill into its group's buffer, a leaving row's slot move. The planner asks it
 * what fits and where rows are; the step runner asks it for a step's past and hands it the step's present.
 *
 * On a device that keeps KV (webgpu, `Stepper.kvOnDevice`) a decode buffer also has a device copy: a decode step's
 * present stays on the device (runtime/device-kv.ts) and is the next step's past, so the cache does not cross per
 * step. The host buffer stays the layout's authority; before it is changed (a row joins or leaves, a re-layout for
 * room) the device copy is read back into it (`sync`) and dropped, and the next step feeds the host buffer once.
 * Prompt KV and the prefix cache stay host memory (a prompt crosses once, when it joins).
 */
import type * as ort from 'onnxruntime-node';
import type { ModelConfig } from '../../checkpoint/types.ts';
import { disposeDevice, onDevice } from '../runtime/device-kv.ts';
import { KvBlockStore } from '../runtime/kv-blocks.ts';
import { appendKv, kvArray, kvBytes, kvCapacity, kvOfArrays, KV_CHUNK, packRowsKv, rowSlotsKv, type KvArray, type KvCache, type KvDType } from '../runtime/kv.ts';
import { RowKv } from '../runtime/row-kv.ts';
import type { PackLayout } from './prefill-pack.ts';
import { timed, timedAsync, type SchedulerStats } from './scheduler-stats.ts';
import type { Seq } from './sequence.ts';

export interface KvManagerOptions {
  /** bytes of prefix-cache blocks (0 = off) */
  prefixCacheBytes: number;
  /** tokens per prefix-cache block (asked, and checked, only when there is a cache) */
  blockTokens: () => number;
  /** prompts that must ask for a prefix-cache block before it is stored (runtime/kv-blocks.ts, admission) */
  prefixAdmitAfter: number;
  /** most rows of a decode buffer (the scheduler's maxRunning when the buffer is made) */
  maxRows: () => number;
}

export class KvManager {
  /** the prefix cache (null when off: a dynamic-NTK RoPE makes a prefix's KV depend on the whole prompt's length) */
  readonly prefixStore: KvBlockStore | null;
  /** each decode group's buffer, by group key */
  private readonly decode = new Map<string, RowKv>();
  /** a decode buffer's device copy (its rows in use, [B, kvH, C, hd] per layer), newer than the host buffer */
  private readonly device = new Map<string, { keys: ort.Tensor[]; values: ort.Tensor[] }>();

  constructor(private readonly c: ModelConfig, private readonly dtype: KvDType, private readonly stats: SchedulerStats, o: KvManagerOptions,
    private readonly readback?: (ts: readonly ort.Tensor[]) => Promise<KvArray[]>) {
    this.prefixStore = o.prefixCacheBytes > 0 && c.rope.type !== 'dynamic'
      ? new KvBlockStore(c.numLayers, c.numKvHeads, c.headDim, o.blockTokens(), o.prefixCacheBytes, kvBytes(dtype), o.prefixAdmitAfter)
      : null;
    this.maxRows = o.maxRows;
  }

  private readonly maxRows: () => number;

  /** q's prefix-cache keys (computed once; [] without a cache) */
  keysOf(q: Seq): string[] {
    if (q.prefill.keys) return q.prefill.keys;
    const store = this.prefixStore;
    q.prefill.keys = store ? store.chain(q.ids, q.edits.prefillSalt) : [];
    store?.ask(q.prefill.keys);
    return q.prefill.keys;
  }

  /** where q's prefill would start if its prefix lookup ran now (prompt tokens found cached), and the first key it would compute */
  lookAhead(q: Seq): { filled: number; firstMissing: string | undefined } {
    const store = this.prefixStore;
    const keys = this.keysOf(q);
    const hit = store ? store.cachedBlocks(keys, q.ids.length - 1) : 0;
    return { filled: hit * (store?.blockTokens ?? 0), firstMissing: hit < keys.length ? keys[hit] : undefined };
  }

  /** the prefix cache lookup: the cached full blocks of the prompt become the start of q's KV */
  startPrefill(q: Seq): void {
    timed(this.stats, 'prefixCache', () => {
      const p = q.prefill;
      const store = this.prefixStore;
      // a captured prompt position must be computed, not read from cached KV (which holds no hidden states)
      if (!store || q.capture.promptPositions) { p.chain = []; return; }
      const n = q.ids.length;
      p.chain = this.keysOf(q);
      if (p.chain.length === 0) return;
      const c = this.c;
      const size = c.numKvHeads * n * c.headDim;
      const dst = { keys: Array.from({ length: c.numLayers }, () => kvArray(this.dtype, size)), values: Array.from({ length: c.numLayers }, () => kvArray(this.dtype, size)), capacity: n };
      const hit = store.read(p.chain, n - 1, dst);
      if (hit === 0) return;
      p.kv = kvOfArrays(dst.keys, dst.values, c.numKvHeads, n, c.headDim, hit);
      p.filled = hit;
      p.stored = hit / store.blockTokens;
    });
  }

  /** q's prompt KV after a chunk step (the step's present) */
  setPrefill(q: Seq, present: KvCache | null): void {
    q.prefill.kv = present;
  }

  /** q's prefill ended or failed: its prompt KV is released */
  release(q: Seq): void {
    q.prefill.kv = null;
  }

  /** q's KV now holds T more prompt tokens: store the full blocks they completed */
  afterChunk(q: Seq, T: number): void {
    const p = q.prefill;
    p.filled += T;
    const store = this.prefixStore;
    if (store && p.chain && p.chain.length > 0) {
      const full = Math.floor(p.filled / store.blockTokens);
      if (full > p.stored) {
        const kv = p.kv!;
        timed(this.stats, 'prefixCache', () => store.write(p.chain!, p.stored, full, { keys: kv.keys.map((t) => t.data as KvArray), values: kv.values.map((t) => t.data as KvArray), capacity: kvCapacity(kv) }));
        p.stored = full;
      }
    }
  }

  /** the past of a packed prefill step: each row's prompt KV right-aligned at its start (null when no row has one) */
  packPast(seqs: readonly Seq[], lay: PackLayout): KvCache | null {
    if (lay.past === 0) return null;
    const { numKvHeads: kvH, headDim: hd, numLayers: L } = this.c;
    return timed(this.stats, 'rowKv', () => packRowsKv(seqs.map((q) => q.prefill.kv), lay.rows.map((r) => r.pastLen), lay.width, lay.rows.map((r) => r.start), kvH, hd, L, this.dtype));
  }

  /** row b's last `kept` new slots of a packed step's present appended to q's prompt KV */
  appendPacked(q: Seq, present: KvCache, b: number, kept: number): void {
    const { numKvHeads: kvH, headDim: hd } = this.c;
    const fresh = rowSlotsKv(present, b, present.length - kept, kept);
    q.prefill.kv = timed(this.stats, 'rowKv', () => appendKv(q.prefill.kv, fresh.keys, fresh.values, { batch: 1, width: kept, kvHeads: kvH, headDim: hd, starts: [0], reserve: 0 }));
  }

  /** the host bytes of K/V held now: the decode buffers (allocated, whole), the prefix-cache blocks and the prompt KV of `prefilling` */
  heldBytes(prefilling: readonly Seq[]): { decodeKv: number; prefixStore: number; prefillKv: number } {
    let decodeKv = 0;
    for (const b of this.decode.values()) decodeKv += b.allocatedFloats * kvBytes(this.dtype);
    let prefillKv = 0;
    for (const q of prefilling) for (const t of [...(q.prefill.kv?.keys ?? []), ...(q.prefill.kv?.values ?? [])]) prefillKv += (t.data as KvArray).byteLength;
    return { decodeKv, prefixStore: this.prefixStore?.stats.bytes ?? 0, prefillKv };
  }

  /** slots per row of a group's decode buffer (0 when it has none) */
  slotCapacity(key: string): number {
    return this.decode.get(key)?.slotCapacity ?? 0;
  }

  /** the device copy of a group's buffer read back into the host buffer and dropped (before the host changes it) */
  private async sync(key: string): Promise<void> {
    const d = this.device.get(key);
    if (!d) return;
    this.device.delete(key);
    const data = await timedAsync(this.stats, 'rowKv', () => this.readback!([...d.keys, ...d.values]));
    const L = this.c.numLayers;
    this.decode.get(key)!.loadRows(data.slice(0, L), data.slice(L));
    disposeDevice([...d.keys, ...d.values]);
  }

  /**
   * q's prompt KV joins its group's decode buffer as the last row (RowKv.addRow: `ahead` slots of room and the rows
   * `expect`ed to join soon when it is re-laid out); the prompt KV is released
   */
  async join(key: string, q: Seq, ahead: number, expect: { rows: number; length: number; steps: number }): Promise<void> {
    let buf = this.decode.get(key);
    if (!buf) {
      buf = new RowKv(this.c.numLayers, this.c.numKvHeads, this.c.headDim, this.maxRows(), this.dtype);
      this.decode.set(key, buf);
    }
    await this.sync(key);
    const kv = q.prefill.kv!;
    timed(this.stats, 'rowKv', () => buf.addRow({ keys: kv.keys.map((t) => t.data as KvArray), values: kv.values.map((t) => t.data as KvArray), capacity: kvCapacity(kv), length: kv.length }, Math.min(ahead, KV_CHUNK), expect));
    q.prefill.kv = null;
  }

  /** room for one more slot in every row of a group's buffer (`ahead`: the decode steps still wanted) */
  async reserve(key: string, ahead: number): Promise<void> {
    const buf = this.decode.get(key)!;
    if (!buf.full) return;
    await this.sync(key);
    timed(this.stats, 'rowKv', () => buf.reserve(Math.min(ahead, KV_CHUNK)));
  }

  /** the group's rows as a step's past (its device copy, or views of its host buffer; the step appends one slot) */
  view(key: string): KvCache {
    const buf = this.decode.get(key)!;
    const d = this.device.get(key);
    if (!d) return buf.view();
    return { keys: d.keys, values: d.values, batch: buf.batch, length: buf.length, starts: buf.starts.slice() };
  }

  /** after a decode step on `view(key)`: a present left on the device becomes the group's device copy */
  advance(key: string, present: KvCache): void {
    const buf = this.decode.get(key)!;
    if (!onDevice(present.keys[0])) {
      timed(this.stats, 'rowKv', () => buf.advance(present));
      return;
    }
    const old = this.device.get(key);
    if (old) disposeDevice([...old.keys, ...old.values]);
    this.device.set(key, { keys: present.keys, values: present.values });
    buf.advanceOnDevice();
  }

  /** free row b of a group's buffer: the last row moves into it (returns the index that moved, or −1) */
  async removeRow(key: string, b: number): Promise<number> {
    await this.sync(key);
    const buf = this.decode.get(key)!;
    return timed(this.stats, 'rowKv', () => buf.removeRow(b));
  }

  /** a group that ended: its buffers are released */
  dropGroup(key: string): void {
    const d = this.device.get(key);
    if (d) disposeDevice([...d.keys, ...d.values]);
    this.device.delete(key);
    this.decode.delete(key);
  }
}
