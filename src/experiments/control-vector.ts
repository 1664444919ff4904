/**
 * Directions as llama.cpp control vectors (the GGUF files llama.cpp's `--control-vector` and repeng's
 * `ControlVector.export_gguf` / `import_gguf` share), and back.
 *
 * The file: `general.architecture = "controlvector"`, `controlvector.model_hint` (a string), `controlvector.layer_count`
 * (the number of direction tensors), and one 1-D F32 tensor `direction.<k>` of n_embd values per steered layer.
 *
 * Layer numbering (llama.cpp's common_control_vector_load_one and its build_cvec): `direction.k` is added to the
 * output of decoder block k (0-based) — `cur = cur + direction.k` right after that block's last residual add — at
 * every position, prompt included. k = 0 is refused by its loader (block 0's output is never steered). Here row l of
 * a direction is at hidden[l] = the output of block l−1, so
 *
 *     our row l  ↔  direction.(l−1),   l = 2..L   (rows 0 = embeddings and 1 = block 0's output have no k)
 *
 * Sign: llama.cpp adds `scale · direction.k` with the vector as stored (no normalisation); export writes our rows as
 * they are (harmful-minus-benign mean differences), so a positive `--control-vector-scaled FILE s` moves hidden
 * states towards the harmful mean. Our steering (`steer`, `generate --steer-*`, the engine's Steering) subtracts
 * α·v̂, so llama.cpp's scale s on direction.(l−1) alone (`--control-vector-layer-range l−1 l−1`) is our steering at
 * layer l with α = −s·‖row l‖, and an `--intervene` "add" with alpha = s·‖row l‖. Several tensors for one k are
 * summed in float32, as llama.cpp sums them.
 */
import { GGML_TYPE_F32, ggufTensorF32, readGguf, writeGguf, type GgufKv, type GgufValue } from '../checkpoint/gguf.ts';
import type { Directions } from '../analysis/direction.ts';
import { SafekeepError } from '../util/errors.ts';
import { quoteClipped } from '../util/quote.ts';

export const CONTROL_VECTOR_ARCH = 'controlvector';
/** a control vector with more layers than any model has is a broken file, refused before rows are allocated */
const MAX_CONTROL_LAYER = 4096;

/** llama.cpp's k for our row l */
export const controlLayerOfRow = (row: number): number => row - 1;
/** our row l for llama.cpp's k */
export const rowOfControlLayer = (k: number): number => k + 1;

/**
 * Write rows 2..L of `dir` ([L+1, d]) as a control vector (tensors direction.1 … direction.(L−1), in that order).
 * Returns the rows that have no control-vector layer and were therefore not written (0 and 1, when present).
 */
export function writeControlVector(path: string, dir: Directions, modelHint: string): { written: number[]; dropped: number[] } {
  const rows = Array.from({ length: dir.layers }, (_, l) => l);
  const written = rows.filter((l) => controlLayerOfRow(l) >= 1);
  if (!written.length) throw new SafekeepError(`${path}: the direction has ${dir.layers} rows; a control vector needs hidden[2] or later (llama.cpp never steers block 0's output)`);
  const tensors = written.map((l) => ({
    name: `direction.${controlLayerOfRow(l)}`,
    shape: [dir.d],
    data: Float32Array.from(dir.data.subarray(l * dir.d, (l + 1) * dir.d)),
  }));
  const kvs: Array<[string, GgufKv]> = [
    ['general.architecture', { type: 'string', value: CONTROL_VECTOR_ARCH }],
    [`${CONTROL_VECTOR_ARCH}.model_hint`, { type: 'string', value: modelHint }],
    [`${CONTROL_VECTOR_ARCH}.layer_count`, { type: 'uint32', value: tensors.length }],
  ];
  writeGguf(path, kvs, tensors);
  return { written, dropped: rows.filter((l) => !written.includes(l)) };
}

export interface ControlVector {
  /** [maxK+2, d]: row l = direction.(l−1); rows 0, 1 and layers the file does not name are zero */
  direction: Directions;
  /** the rows the file sets */
  rows: number[];
  modelHint: string | null;
  metadata: Map<string, GgufValue>;
}

/**
 * Read a control vector (ours, llama.cpp's cvector-generator's, repeng's) with the checks llama.cpp's loader makes:
 * every tensor named direction.<k> with k ≥ 1, F32, 1-D, one n_embd for all. Any other tensor refuses the file, as
 * it refuses it there.
 */
export function readControlVector(path: string): ControlVector {
  const file = readGguf(path);
  const arch = file.metadata.get('general.architecture');
  if (arch !== undefined && arch !== CONTROL_VECTOR_ARCH) throw new SafekeepError(`${path}: general.architecture is ${quoteClipped(arch)}, not a control vector (${CONTROL_VECTOR_ARCH})`);
  if (!file.tensors.length) throw new SafekeepError(`${path}: no direction tensors`);
  let d = -1;
  const byLayer = new Map<number, Float32Array>();
  for (const t of file.tensors) {
    const m = /^direction\.(\d+)$/.exec(t.name);
    const k = m ? Number(m[1]) : NaN;
    if (!Number.isSafeInteger(k)) throw new SafekeepError(`${path}: tensor ${quoteClipped(t.name)} is not direction.<layer>`);
    if (k === 0) throw new SafekeepError(`${path}: tensor direction.0: layer 0 is refused by llama.cpp (block 0's output is never steered)`);
    if (k > MAX_CONTROL_LAYER) throw new SafekeepError(`${path}: tensor ${t.name}: layer ${k} is beyond ${MAX_CONTROL_LAYER}`);
    if (t.type !== GGML_TYPE_F32 || t.shape.length !== 1) throw new SafekeepError(`${path}: tensor ${t.name} must be 1-D F32, is type ${t.type} [${t.shape}]`);
    if (d === -1) d = t.shape[0]!;
    else if (t.shape[0] !== d) throw new SafekeepError(`${path}: tensor ${t.name} has ${t.shape[0]} values, the others ${d}`);
    const v = ggufTensorF32(file, t);
    const acc = byLayer.get(k);
    if (acc) for (let i = 0; i < d; i++) acc[i] = Math.fround(acc[i]! + v[i]!);
    else byLayer.set(k, v);
  }
  if (d < 1) throw new SafekeepError(`${path}: direction tensors are empty`);
  const layers = rowOfControlLayer(Math.max(...byLayer.keys())) + 1;
  const data = new Float64Array(layers * d);
  for (const [k, v] of byLayer) data.set(v, rowOfControlLayer(k) * d);
  const hint = file.metadata.get(`${CONTROL_VECTOR_ARCH}.model_hint`);
  return {
    direction: { layers, d, data },
    rows: [...byLayer.keys()].map(rowOfControlLayer).sort((a, b) => a - b),
    modelHint: typeof hint === 'string' ? hint : null,
    metadata: file.metadata,
  };
}
