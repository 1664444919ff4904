/**
 * The token embedding looked up on the host (EngineConfig.embeddings = 'host', the CPU's default): a step's ids →
 * their rows of the stored table [V, d], read from the weight file by position (one read per token) and converted to
 * f32 exactly as the graph's Gather path converts them (graph/weights.ts `embedRows`: storage → f32, exact for BF16 and
 * F16; `dtype: 'bf16'` then rounds f32/f16 storage to bf16, round-to-nearest-even). The graph takes the rows as
 * `inputs_embeds` [B, T, d].
 *
 * Why not a Gather in the graph: onnxruntime reads an external-data initializer through a mapping of the file, and on
 * every page fault the kernel maps the cached pages around the one touched (fault-around), so the rows of a long
 * workload page in the whole table (113 MB on the SmolLM2 shape after one bench:generate run of random ids); when the
 * embedding is tied, onnxruntime's pre-packed lm_head already holds a second full copy. Reading the rows by position
 * maps nothing, so the table costs no resident memory at all; a step costs B·T reads of d elements (a 2,048-token
 * prefill on the SmolLM2 shape: 2,048 reads of 2.3 KB).
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { bf16BitsToF32, f16BitsToF32, roundToBf16 } from '../../checkpoint/dtype.ts';
import type { DType } from '../../checkpoint/types.ts';

/** Where the table's bytes are: [rows, dim] elements of `dtype` from byte `offset` of `file` (row-major). */
export interface EmbeddingTable {
  file: string;
  offset: number;
  dtype: DType;
  rows: number;
  dim: number;
  /** round f32/f16 storage to bf16 after the upcast (`--dtype bf16`) */
  roundBf16: boolean;
}

const ELEMENT_BYTES: Record<DType, number> = { F32: 4, BF16: 2, F16: 2 };

/**
 * ids [n] → their rows [n, d] as f32. An id outside 0..rows−1 is a RangeError naming it (the graph's Gather fails on
 * it too); a short read (the file shrank under the engine) is an Error naming the file.
 */
export function lookupEmbeddings(t: EmbeddingTable, ids: ArrayLike<bigint | number>): Float32Array {
  const rowBytes = t.dim * ELEMENT_BYTES[t.dtype];
  const n = ids.length;
  // F32 rows are read straight into the result; 16-bit rows into their bits, then widened
  const raw = new Uint8Array(n * rowBytes);
  const fd = openSync(t.file, 'r');
  try {
    for (let i = 0; i < n; i++) {
      const id = Number(ids[i]);
      if (!Number.isInteger(id) || id < 0 || id >= t.rows) throw new RangeError(`token id ${String(ids[i])} is outside the embedding table (${t.rows} rows)`);
      const got = readSync(fd, raw, i * rowBytes, rowBytes, t.offset + id * rowBytes);
      if (got !== rowBytes) throw new Error(`embedding: ${t.file} ended inside row ${id} (read ${got} of ${rowBytes} bytes)`);
    }
  } finally {
    closeSync(fd);
  }
  const f32 = t.dtype === 'F32' ? new Float32Array(raw.buffer) : (t.dtype === 'BF16' ? bf16BitsToF32 : f16BitsToF32)(new Uint16Array(raw.buffer));
  return t.roundBf16 && t.dtype !== 'BF16' ? roundToBf16(f32) : f32;
}
