/**
 * The decode batch's KV: one buffer per layer [R, kvH, C, hd] (R rows allocated, C slots each) in which the B ≤ R
 * sequences in flight occupy rows 0..B−1, every row's real slots ending at the same length P (row b holds slots
 * starts[b]..P−1). So a decode step is the graph's ordinary step on a `KvCache` view of the first B rows (kv.ts): the
 * graph reads the buffer in place, the bias (kv.ts `capacityBias`) masks each row's slots before its start, and the
 * step writes the new slot P of every row in place.
 *
 * Sequences join and leave between steps: `addRow` copies a finished prefill's KV into row B so that it ends at P
 * (when it is longer than P the rows are re-laid out first, all shifted right), `removeRow` moves the last row into
 * the freed one (one row's slots copied) so rows 0..B−1 stay contiguous. `reserve` re-lays the buffer out when a
 * step has no room: dead slots left of the smallest start are dropped and room for the decode steps still wanted is
 * added, so the buffer never grows with the number of sequences that passed through it.
 *
 * Padding: no pad tokens are ever computed (each row's step is its own next token); a row shorter than P has masked
 * slots on its left, which only the attention scores of that row touch.
 */
import * as ort from 'onnxruntime-node';
import { copySlots, kvArray, kvTensor, rowSlotsKv, type KvArray, type KvCache, type KvDType } from './kv.ts';

/** One sequence's KV as a batch-1 cache holds it: per layer [1, kvH, cap, hd] with `length` filled slots. */
export interface RowSource {
  keys: KvArray[];
  values: KvArray[];
  /** slots per head in the source arrays (≥ length) */
  capacity: number;
  length: number;
}

export class RowKv {
  /** rows in use */
  batch = 0;
  /** filled slots (every row ends here) */
  length = 0;
  /** first real slot per row in use */
  starts: number[] = [];
  private rows = 0;
  private capacity = 0;
  private keys: KvArray[] = [];
  private values: KvArray[] = [];

  /** `dtype`: the KV element type (the engine's `kvDType`) */
  constructor(readonly layers: number, readonly kvHeads: number, readonly headDim: number, private readonly maxRows: number, readonly dtype: KvDType = 'f32') {}

  /** floats allocated (both K and V, every layer; a buffer re-laid out in place may be longer than rows × capacity) */
  get allocatedFloats(): number {
    return 2 * this.layers * (this.keys[0]?.length ?? 0);
  }

  get slotCapacity(): number {
    return this.capacity;
  }

  /** whether `rows` × `capacity` slots fit the buffers already allocated, using at least half of them (else a new
   * buffer releases the rest) */
  private fitsInPlace(rows: number, capacity: number): boolean {
    const have = this.keys[0]?.length ?? 0;
    const need = rows * this.kvHeads * capacity * this.headDim;
    return need <= have && 2 * need >= have;
  }

  /**
   * Re-lay the buffer out with `rows` rows, the rows' slots ending at `length`, capacity `capacity` (copies the real
   * slots of every row). In the buffers already allocated when the new layout fits them (`fitsInPlace`), so a
   * re-layout during decode needs no second buffer: a new one would be alive next to the old one until V8 collects
   * it, twice the decode KV at the peak. Otherwise into new buffers (the old ones released).
   */
  private relayout(rows: number, length: number, capacity: number): void {
    const { kvHeads: kvH, headDim: hd } = this;
    const shift = length - this.length;
    /** row b head h's real slots: [from, from + n) in the old layout, [to, to + n) in the new one (floats) */
    const blocks: { from: number; to: number; n: number }[] = [];
    for (let b = 0; b < this.batch; b++) {
      const s = this.starts[b]!;
      for (let h = 0; h < kvH; h++) {
        blocks.push({ from: ((b * kvH + h) * this.capacity + s) * hd, to: ((b * kvH + h) * capacity + s + shift) * hd, n: (this.length - s) * hd });
      }
    }
    if (this.keys.length && this.fitsInPlace(rows, capacity)) {
      // blocks keep their order and stay disjoint, so moving the left-moving ones first to last, then the
      // right-moving ones last to first, never writes over a block not yet moved
      for (const t of [...this.keys, ...this.values]) {
        for (const k of blocks) if (k.to < k.from) t.copyWithin(k.to, k.from, k.from + k.n);
        for (let i = blocks.length - 1; i >= 0; i--) { const k = blocks[i]!; if (k.to > k.from) t.copyWithin(k.to, k.from, k.from + k.n); }
      }
    } else {
      const alloc = () => kvArray(this.dtype, rows * kvH * capacity * hd);
      const move = (src: KvArray) => {
        const dst = alloc();
        for (const k of blocks) (dst as Float32Array).set((src as Float32Array).subarray(k.from, k.from + k.n), k.to);
        return dst;
      };
      // one layer at a time, each old layer unreferenced as soon as it is copied (collectable before the next)
      const relay = (bufs: KvArray[]) => {
        if (!bufs.length) return Array.from({ length: this.layers }, alloc);
        for (let l = 0; l < bufs.length; l++) bufs[l] = move(bufs[l]!);
        return bufs;
      };
      this.keys = relay(this.keys);
      this.values = relay(this.values);
    }
    this.starts = this.starts.map((s) => s + shift);
    this.rows = rows;
    this.capacity = capacity;
    this.length = length;
  }

  /** the smallest length the rows in use fit in (their longest real span) */
  private span(): number {
    return this.batch === 0 ? 0 : this.length - Math.min(...this.starts);
  }

  /**
   * Make sure the next decode step has room for one more slot per row, leaving room for `ahead` slots in all when
   * the buffer must be re-laid out (the decode steps still wanted, so one re-layout serves them).
   */
  reserve(ahead: number): void {
    if (this.length + 1 <= this.capacity) return;
    const span = this.span();
    const capacity = span + Math.max(1, ahead);
    // the rows in use only, when that fits the buffer in place and the usual row count would not (a join later
    // re-lays out again, but no decode step ever holds two buffers)
    let rows = this.fitRows(this.batch);
    if (!this.fitsInPlace(rows, capacity) && this.fitsInPlace(this.batch, capacity)) rows = this.batch;
    this.relayout(rows, span, capacity);
  }

  /** rows to allocate for `n` rows in use: doubling, at most maxRows, and shrunk when far fewer are in use */
  private fitRows(n: number): number {
    if (n <= this.rows && n > this.rows / 4) return this.rows;
    return Math.min(this.maxRows, Math.max(n, 4, 2 * n));
  }

  /**
   * Add a sequence whose KV is `src` (its `length` slots) as row `batch`; `ahead`: slots the decode will still append
   * (room left when the buffer is re-laid out). `expect`: the rows and the longest KV about to join as well, and the
   * decode steps likely to run before the last of them joins (`steps`: the filled length moves on by that much while
   * they prefill), so that one re-layout makes room for them all instead of a re-layout per joiner or mid-decode.
   * Returns the row index.
   */
  addRow(src: RowSource, ahead: number, expect: { rows: number; length: number; steps?: number } = { rows: 0, length: 0 }): number {
    if (this.batch >= this.maxRows) throw new Error(`RowKv: all ${this.maxRows} rows in use`);
    const n = src.length;
    if (this.batch === 0) { this.length = 0; this.starts = []; }
    const length = Math.max(this.length, n);
    const need = this.batch + 1;
    if (need > this.rows || length > this.length || length + 1 > this.capacity) {
      const span = Math.max(this.span(), n, expect.length);
      this.relayout(Math.max(this.fitRows(need), Math.min(this.maxRows, need + expect.rows)), span, span + Math.max(1, ahead) + (expect.steps ?? 0));
    }
    const b = this.batch;
    const start = this.length - n;
    const row = this.rowFloats(b);
    const copy = (from: KvArray[], to: KvArray[]) => {
      for (let l = 0; l < this.layers; l++) copySlots(from[l]!, src.capacity, 0, to[l]!.subarray(row), this.capacity, start, this.kvHeads, n, this.headDim);
    };
    copy(src.keys, this.keys);
    copy(src.values, this.values);
    this.starts.push(start);
    this.batch++;
    return b;
  }

  /** Free row b: the last row moves into it (returns the index that moved, or −1 when b was the last). */
  removeRow(b: number): number {
    const last = this.batch - 1;
    if (b < 0 || b > last) throw new Error(`RowKv: no row ${b}`);
    let moved = -1;
    if (b !== last) {
      // only the last row's real slots move (per head): its masked left part and the room right of length are never read
      const s = this.starts[last]!;
      for (const t of [...this.keys, ...this.values]) {
        copySlots(t.subarray(this.rowFloats(last)), this.capacity, s, t.subarray(this.rowFloats(b)), this.capacity, s, this.kvHeads, this.length - s, this.headDim);
      }
      this.starts[b] = this.starts[last]!;
      moved = last;
    }
    this.starts.pop();
    this.batch--;
    if (this.batch === 0) { this.length = 0; this.starts = []; }
    return moved;
  }

  /** The rows in use as a `KvCache` for one step (views of the buffer; the step appends slot `length` in place). */
  view(): KvCache {
    const n = this.batch * this.kvHeads * this.capacity * this.headDim;
    const dims = [this.batch, this.kvHeads, this.capacity, this.headDim];
    return {
      keys: this.keys.map((k) => kvTensor(k.subarray(0, n), dims)),
      values: this.values.map((v) => kvTensor(v.subarray(0, n), dims)),
      batch: this.batch,
      length: this.length,
      starts: this.starts.slice(),
    };
  }

  /** After a step on `view()`: its present must be this buffer with one more slot (written in place by appendKv). */
  advance(present: KvCache): void {
    if ((present.keys[0]?.data as KvArray | undefined)?.buffer !== this.keys[0]?.buffer || present.length !== this.length + 1) {
      throw new Error('RowKv: the step did not append in place');
    }
    this.length++;
  }

  /** whether the next decode step needs a re-layout first (no room for one more slot) */
  get full(): boolean {
    return this.length + 1 > this.capacity;
  }

  /**
   * After a decode step whose present stayed on the device (runtime/device-kv.ts): the rows are one slot longer there,
   * and this buffer holds their slots only up to the last `loadRows`
   */
  advanceOnDevice(): void {
    this.length++;
  }

  /** The rows in use written back from the device: per layer the data of `view()`'s tensors ([B, kvH, C, hd]). */
  loadRows(keys: readonly KvArray[], values: readonly KvArray[]): void {
    const n = this.batch * this.kvHeads * this.capacity * this.headDim;
    for (let l = 0; l < this.layers; l++) {
      if (keys[l]!.length !== n || values[l]!.length !== n) throw new Error(`RowKv: loadRows got ${keys[l]!.length} elements for ${n}`);
      (this.keys[l] as Float32Array).set(keys[l] as Float32Array);
      (this.values[l] as Float32Array).set(values[l] as Float32Array);
    }
  }

  /** Row b's real slots as a batch-1 source (a copy): what a one-at-a-time cache would hold. For tests. */
  rowSlots(b: number): RowSource {
    const n = this.length - this.starts[b]!;
    return { ...rowSlotsKv(this.view(), b, this.starts[b]!, n), capacity: n, length: n };
  }

  /** where row b starts in a layer's buffer (floats) */
  private rowFloats(b: number): number {
    return b * this.kvHeads * this.capacity * this.headDim;
  }
}
