/**
 * In-place KV buffers: decoding writes each new slot into room left in the buffer instead of copying the whole cache
 * every step (the bytes moved per token stay O(new slots)). A `KvCache` holds per layer one key and one value buffer
 * [B, kvH, C, hd] with a capacity C ≥ length: slots 0..length-1 are filled, the rest is room for later steps.
 * A step feeds the whole buffer to the graph (the additive bias masks the unused capacity and each row's left
 * padding), the graph returns only the T new slots [B, kvH, T, hd], and `appendKv` writes them into the buffer:
 * a decode step moves B·kvH·T·hd floats per layer instead of the whole cache. When a step does not fit, the
 * buffer is reallocated with room for up to KV_CHUNK more slots and copied once, so a long decode copies the
 * cache once per chunk.
 *
 * Sharing rule: appending writes slots ≥ length of the buffer a past points to. If two steps continue from the
 * same past, the second must not overwrite what the first wrote: each buffer remembers how far it has been written
 * (`written`), and a past whose length is below that is copied into a fresh buffer instead (copy on write). So a
 * KvCache value never changes under its holder; only capacity beyond its length is reused.
 */
import * as ort from 'onnxruntime-node';
import type { KvDType } from '../graph/config.ts';
import { MASKED } from '../graph/io.ts';

// the KV element type is part of the resolved config (the graph casts to it), so it is defined there
export { KV_DTYPES, type KvDType } from '../graph/config.ts';
/** a KV buffer's data: Float32Array (f32) or Uint16Array (f16 bits) */
export type KvArray = Float32Array | Uint16Array;

/** n zeroed elements of `dtype` */
export const kvArray = (dtype: KvDType, n: number): KvArray => (dtype === 'f16' ? new Uint16Array(n) : new Float32Array(n));
/** n zeroed elements of `like`'s element type */
export const kvArrayLike = (like: KvArray, n: number): KvArray => (like instanceof Uint16Array ? new Uint16Array(n) : new Float32Array(n));
/** the tensor over `data` (no copy), 'float16' for f16 bits */
export const kvTensor = (data: KvArray, dims: readonly number[]): ort.Tensor =>
  data instanceof Uint16Array ? new ort.Tensor('float16', data, dims) : new ort.Tensor('float32', data, dims);
/** bytes per KV element */
export const kvBytes = (dtype: KvDType): number => (dtype === 'f16' ? 2 : 4);

/** slots of room added when a buffer is reallocated for single-token (decode) steps */
export const KV_CHUNK = 256;

/**
 * Per-layer KV of `batch` rows; row b's real slots are starts[b]..length-1. Tensors are [B, kvH, C, hd] with
 * C = capacity ≥ length (slots ≥ length: room for later steps, masked and never read as real slots).
 */
export interface KvCache {
  keys: ort.Tensor[];
  values: ort.Tensor[];
  batch: number;
  length: number;
  starts: number[];
}

/** slots allocated per row (the tensors' dim 2) */
export function kvCapacity(kv: KvCache): number {
  const t = kv.keys[0];
  return t ? t.dims[2]! : kv.length;
}

/** how far each buffer has been written (keyed by the layer-0 key buffer of a KvCache) */
const written = new WeakMap<KvArray, number>();

function keyBuffer(kv: KvCache): KvArray | undefined {
  return kv.keys[0]?.data as KvArray | undefined;
}

/** whether T more slots can be written into `kv`'s buffers in place (room, and no later step already wrote there) */
export function canAppendInPlace(kv: KvCache, T: number): boolean {
  const buf = keyBuffer(kv);
  if (!buf) return false;
  return kvCapacity(kv) >= kv.length + T && (written.get(buf) ?? kv.length) <= kv.length;
}

/** An empty cache: [B, kvH, 0, hd] per layer. */
export function emptyKv(layers: number, batch: number, kvHeads: number, headDim: number, dtype: KvDType = 'f32'): KvCache {
  const empty = () => kvTensor(kvArray(dtype, 0), [batch, kvHeads, 0, headDim]);
  return {
    keys: Array.from({ length: layers }, empty),
    values: Array.from({ length: layers }, empty),
    batch,
    length: 0,
    starts: new Array<number>(batch).fill(0),
  };
}

/**
 * Copy `rows` [B·kvH] of `slots` slots each (hd floats per slot) from src (capacity srcCap, starting at slot
 * srcFrom) to dst (capacity dstCap, starting at slot dstFrom).
 */
export function copySlots(src: KvArray, srcCap: number, srcFrom: number, dst: KvArray, dstCap: number, dstFrom: number,
  rows: number, slots: number, hd: number): void {
  if (slots === 0) return;
  // a TypedArray copy between element types would convert values (f16 bits read as numbers)
  if (src.constructor !== dst.constructor) throw new Error('copySlots: source and destination KV element types differ');
  for (let r = 0; r < rows; r++) {
    const s = (r * srcCap + srcFrom) * hd;
    (dst as Float32Array).set((src as Float32Array).subarray(s, s + slots * hd), (r * dstCap + dstFrom) * hd);
  }
}

/**
 * The cache after a step: `past` (null = empty) extended by the T new slots per row that the step computed
 * (`newKeys[l]`/`newValues[l]`: [B, kvH, T, hd]). In place when `past` has room (`canAppendInPlace`); otherwise a new
 * buffer of capacity length + T + min(reserve, KV_CHUNK), past and new slots copied in (no copy at all when there is
 * no past and no reserve: the new slots are the buffer). `reserve`: slots the caller expects to append later.
 */
export function appendKv(past: KvCache | null, newKeys: KvArray[], newValues: KvArray[], shape: {
  batch: number; width: number; kvHeads: number; headDim: number; starts: number[]; reserve: number;
}): KvCache {
  const { batch: B, width: T, kvHeads: kvH, headDim: hd } = shape;
  const P = past?.length ?? 0;
  const rows = B * kvH;
  if (past && canAppendInPlace(past, T)) {
    const C = kvCapacity(past);
    past.keys.forEach((t, l) => copySlots(newKeys[l]!, T, 0, t.data as KvArray, C, P, rows, T, hd));
    past.values.forEach((t, l) => copySlots(newValues[l]!, T, 0, t.data as KvArray, C, P, rows, T, hd));
    written.set(keyBuffer(past)!, P + T);
    return { keys: past.keys, values: past.values, batch: B, length: P + T, starts: shape.starts };
  }
  const C = P + T + Math.max(0, Math.min(shape.reserve, KV_CHUNK));
  const grow = (old: ort.Tensor | undefined, fresh: KvArray): ort.Tensor => {
    if (P === 0 && C === T) return kvTensor(fresh, [B, kvH, C, hd]);
    const buf = kvArrayLike(fresh, rows * C * hd);
    if (old && P > 0) copySlots(old.data as KvArray, old.dims[2]!, 0, buf, C, 0, rows, P, hd);
    copySlots(fresh, T, 0, buf, C, P, rows, T, hd);
    return kvTensor(buf, [B, kvH, C, hd]);
  };
  const keys = newKeys.map((k, l) => grow(past?.keys[l], k));
  const values = newValues.map((v, l) => grow(past?.values[l], v));
  const out: KvCache = { keys, values, batch: B, length: P + T, starts: shape.starts };
  written.set(keyBuffer(out)!, P + T);
  return out;
}

/**
 * Per layer the filled slots as contiguous [B, kvH, length, hd] arrays (the buffer itself when capacity = length,
 * else a copy). For callers that keep a cache's contents (prefix.ts).
 */
export function compactKv(kv: KvCache): { keys: KvArray[]; values: KvArray[] } {
  const C = kvCapacity(kv);
  const compact = (t: ort.Tensor): KvArray => {
    const data = t.data as KvArray;
    if (C === kv.length) return data;
    const [B, kvH, , hd] = t.dims as [number, number, number, number];
    const out = kvArrayLike(data, B * kvH * kv.length * hd);
    copySlots(data, C, 0, out, kv.length, 0, B * kvH, kv.length, hd);
    return out;
  };
  return { keys: kv.keys.map(compact), values: kv.values.map(compact) };
}

/**
 * Additive attention bias [B, T, C + T] for T new slots on a buffer of capacity C holding P filled slots: column
 * j < C is buffer slot j, visible iff starts[b] ≤ j < P; column C + u is new slot P + u, visible to new slot P + t
 * iff u ≤ t and P + u ≥ starts[b]. With C = P this is `attentionBias(B, T, P, starts)` (batch.ts). Query rows on pad
 * slots see nothing (a uniform softmax over MASKED, finite, ignored by callers). `window` W (sliding-window layers):
 * additionally only slots within W − 1 of the query (transformers' `kv_idx > q_idx - sliding_window`; real slots are
 * contiguous, so slot distance = position distance).
 */
export function capacityBias(batch: number, width: number, past: number, capacity: number, starts: readonly number[], window: number | null = null): Float32Array {
  const S = capacity + width;
  const out = new Float32Array(batch * width * S).fill(MASKED);
  for (let b = 0; b < batch; b++) {
    const s = starts[b]!;
    for (let t = 0; t < width; t++) {
      const row = (b * width + t) * S;
      const from = window === null ? s : Math.max(s, past + t - window + 1);
      for (let j = from; j < past; j++) out[row + j] = 0;
      for (let u = Math.max(0, from - past); u <= t; u++) out[row + capacity + u] = 0;
    }
  }
  return out;
}

/** A batch-1 cache over per-layer [kvH, capacity, hd] arrays whose first `length` slots are filled. */
export function kvOfArrays(keys: KvArray[], values: KvArray[], kvHeads: number, capacity: number, headDim: number, length: number): KvCache {
  const dims = [1, kvHeads, capacity, headDim];
  return {
    keys: keys.map((k) => kvTensor(k, dims)),
    values: values.map((v) => kvTensor(v, dims)),
    batch: 1,
    length,
    starts: [0],
  };
}

/**
 * Rows of several batch-1 caches as one batched past for a step: row b holds the first lens[b] slots of srcs[b],
 * right-aligned so every row ends at P = max(lens) (kv.ts's layout: row b's real slots start at P − lens[b]); per
 * layer [B, kvH, P + room, hd], the room left for the step's new slots to be appended in place. `starts` are the
 * rows' first real slots (a caller may put them later, e.g. on pads among the new slots).
 */
export function packRowsKv(srcs: readonly (KvCache | null)[], lens: readonly number[], room: number, starts: readonly number[], kvHeads: number, headDim: number, layers: number, dtype: KvDType = 'f32'): KvCache {
  const B = srcs.length;
  const P = Math.max(0, ...lens);
  const C = P + room;
  const dims = [B, kvHeads, C, headDim];
  const pack = (side: 'keys' | 'values', l: number) => {
    const out = kvArray(dtype, B * kvHeads * C * headDim);
    srcs.forEach((src, b) => {
      const n = lens[b]!;
      if (n === 0 || !src) return;
      copySlots(src[side][l]!.data as KvArray, kvCapacity(src), 0, out.subarray(b * kvHeads * C * headDim), C, P - n, kvHeads, n, headDim);
    });
    return kvTensor(out, dims);
  };
  return {
    keys: Array.from({ length: layers }, (_, l) => pack('keys', l)),
    values: Array.from({ length: layers }, (_, l) => pack('values', l)),
    batch: B, length: P, starts: [...starts],
  };
}

/** Row b's slots from..from+n of a batched cache, per layer as [kvH, n, hd] arrays (copies). */
export function rowSlotsKv(kv: KvCache, b: number, from: number, n: number): { keys: KvArray[]; values: KvArray[] } {
  const C = kvCapacity(kv);
  const take = (t: ort.Tensor) => {
    const [, kvH, , hd] = t.dims as [number, number, number, number];
    const data = t.data as KvArray;
    const out = kvArrayLike(data, kvH * n * hd);
    copySlots(data.subarray(b * kvH * C * hd), C, from, out, n, 0, kvH, n, hd);
    return out;
  };
  return { keys: kv.keys.map(take), values: kv.values.map(take) };
}
