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
import type { KvCache } from './kv.ts';

/** One sequence's KV as a batch-1 cache holds it: per layer [1, kvH, cap, hd] with `length` filled slots. */
export interface RowSource {
  keys: Float32Array[];
  values: Float32Array[];
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
  private keys: Float32Array[] = [];
  private values: Float32Array[] = [];

  constructor(readonly layers: number, readonly kvHeads: number, readonly headDim: number, private readonly maxRows: number) {}

  /** floats allocated (both K and V, every layer) */
  get allocatedFloats(): number {
    return 2 * this.layers * this.rows * this.kvHeads * this.capacity * this.headDim;
  }

  get slotCapacity(): number {
    return this.capacity;
  }

  /**
   * Re-lay the buffer out with `rows` rows, the rows' slots ending at `length`, capacity `capacity` (copies the real
   * slots of every row; the old buffer is released).
   */
  private relayout(rows: number, length: number, capacity: number): void {
    const { kvHeads: kvH, headDim: hd } = this;
    const shift = length - this.length;
    const alloc = () => new Float32Array(rows * kvH * capacity * hd);
    const move = (src: Float32Array, dst: Float32Array) => {
      for (let b = 0; b < this.batch; b++) {
        const s = this.starts[b]!;
        const n = this.length - s;
        for (let h = 0; h < kvH; h++) {
          const from = ((b * kvH + h) * this.capacity + s) * hd;
          dst.set(src.subarray(from, from + n * hd), ((b * kvH + h) * capacity + s + shift) * hd);
        }
      }
    };
    const keys = this.keys.length ? this.keys.map((src) => { const d = alloc(); move(src, d); return d; }) : Array.from({ length: this.layers }, alloc);
    const values = this.values.length ? this.values.map((src) => { const d = alloc(); move(src, d); return d; }) : Array.from({ length: this.layers }, alloc);
    this.keys = keys;
    this.values = values;
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
    this.relayout(this.fitRows(this.batch), span, span + Math.max(1, ahead));
  }

  /** rows to allocate for `n` rows in use: doubling, at most maxRows, and shrunk when far fewer are in use */
  private fitRows(n: number): number {
    if (n <= this.rows && n > this.rows / 4) return this.rows;
    return Math.min(this.maxRows, Math.max(n, 4, 2 * n));
  }

  /**
   * Add a sequence whose KV is `src` (its `length` slots) as row `batch`; `ahead`: slots the decode will still append
   * (room left when the buffer is re-laid out). `expect`: the rows and the longest KV about to join as well, so that
   * one re-layout makes room for them too instead of one per joiner. Returns the row index.
   */
  addRow(src: RowSource, ahead: number, expect: { rows: number; length: number } = { rows: 0, length: 0 }): number {
    if (this.batch >= this.maxRows) throw new Error(`RowKv: all ${this.maxRows} rows in use`);
    const n = src.length;
    if (this.batch === 0) { this.length = 0; this.starts = []; }
    const length = Math.max(this.length, n);
    const need = this.batch + 1;
    if (need > this.rows || length > this.length || length + 1 > this.capacity) {
      const span = Math.max(this.span(), n, expect.length);
      this.relayout(Math.max(this.fitRows(need), Math.min(this.maxRows, need + expect.rows)), span, span + Math.max(1, ahead));
    }
    const b = this.batch;
    const { kvHeads: kvH, headDim: hd } = this;
    const start = this.length - n;
    const copy = (from: Float32Array[], to: Float32Array[]) => {
      for (let l = 0; l < this.layers; l++) {
        for (let h = 0; h < kvH; h++) {
          const s = h * src.capacity * hd;
          to[l]!.set(from[l]!.subarray(s, s + n * hd), ((b * kvH + h) * this.capacity + start) * hd);
        }
      }
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
      const stride = this.kvHeads * this.capacity * this.headDim;
      for (const bufs of [this.keys, this.values]) {
        for (const t of bufs) t.copyWithin(b * stride, last * stride, (last + 1) * stride);
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
      keys: this.keys.map((k) => new ort.Tensor('float32', k.subarray(0, n), dims)),
      values: this.values.map((v) => new ort.Tensor('float32', v.subarray(0, n), dims)),
      batch: this.batch,
      length: this.length,
      starts: this.starts.slice(),
    };
  }

  /** After a step on `view()`: its present must be this buffer with one more slot (written in place by appendKv). */
  advance(present: KvCache): void {
    if ((present.keys[0]?.data as Float32Array | undefined)?.buffer !== this.keys[0]?.buffer || present.length !== this.length + 1) {
      throw new Error('RowKv: the step did not append in place');
    }
    this.length++;
  }

  /** Row b's real slots as a batch-1 source (a copy): what a one-at-a-time cache would hold. For tests. */
  rowSlots(b: number): RowSource {
    const n = this.length - this.starts[b]!;
    const { kvHeads: kvH, headDim: hd } = this;
    const take = (bufs: Float32Array[]) => bufs.map((t) => {
      const out = new Float32Array(kvH * n * hd);
      for (let h = 0; h < kvH; h++) {
        const from = ((b * kvH + h) * this.capacity + this.starts[b]!) * hd;
        out.set(t.subarray(from, from + n * hd), h * n * hd);
      }
      return out;
    });
    return { keys: take(this.keys), values: take(this.values), capacity: n, length: n };
  }
}
