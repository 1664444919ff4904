/**
 * directions.safetensors: the directions `reproduce` computed, as one file that `steer --direction FILE`,
 * `generate --intervene` and Python's `safetensors` read.
 *
 * Tensors (F32, [L+1, d], row l = the direction at hidden[l]: 0 = embeddings, l = output of block l−1):
 * - `refusal.<configuration>`: harmful-minus-benign mean difference of that configuration's extraction split
 *   (`refusal.chatbot` is the paper's refusal direction r)
 * - `schema.harmful`, `schema.benign`: the Schema Directions (JSON-schema minus flattened-prose means per category)
 * Metadata (strings): `format` = safekeep-directions/1, `lStar` (the chosen layer), `layerRule`, `schemaPairs`,
 * `model`, `rows` (the row convention), `provenance` (JSON: the run's manifest).
 */
import { readSafetensorsHeader, writeSafetensors } from '../checkpoint/safetensors.ts';
import { readTensorF32 } from '../checkpoint/read.ts';
import type { Directions } from '../analysis/direction.ts';
import { SafekeepError } from '../util/errors.ts';

export const DIRECTIONS_FORMAT = 'safekeep-directions/1';
export const DIRECTIONS_FILE = 'directions.safetensors';
/** the tensor `steer --direction FILE` uses when the file name carries no `#name` */
export const DEFAULT_DIRECTION = 'schema.harmful';

export interface DirectionsMeta {
  model: string;
  lStar: number;
  layerRule: string;
  schemaPairs: string;
  provenance: unknown;
}

export function writeDirectionsFile(path: string, directions: Record<string, Directions>, meta: DirectionsMeta): void {
  const tensors = Object.fromEntries(Object.entries(directions).map(([name, d]) => [name, { dtype: 'F32' as const, shape: [d.layers, d.d], data: Float32Array.from(d.data) }]));
  writeSafetensors(path, tensors, {
    format: DIRECTIONS_FORMAT, model: meta.model, lStar: String(meta.lStar), layerRule: meta.layerRule, schemaPairs: meta.schemaPairs,
    rows: 'row l = hidden[l]: 0 = embeddings, l = output of decoder block l-1 (before the final norm)',
    provenance: JSON.stringify(meta.provenance ?? {}),
  });
}

/** Every direction of a directions file, its ℓ* and metadata (SafekeepError when it is not one). */
export function readDirectionsFile(path: string): { directions: Map<string, Directions>; lStar: number; metadata: Record<string, string> } {
  const h = readSafetensorsHeader(path);
  if (h.metadata.format !== DIRECTIONS_FORMAT) throw new SafekeepError(`${path}: not a directions file (metadata format is ${JSON.stringify(h.metadata.format ?? null)}, expected ${DIRECTIONS_FORMAT})`);
  const directions = new Map<string, Directions>();
  for (const e of h.entries) {
    if (e.dtype !== 'F32' || e.shape.length !== 2) throw new SafekeepError(`${path}: tensor ${e.name} is ${e.dtype} [${e.shape}], expected F32 [layers, d]`);
    directions.set(e.name, { layers: e.shape[0]!, d: e.shape[1]!, data: Float64Array.from(readTensorF32({ ...e, dtype: 'F32' })) });
  }
  return { directions, lStar: Number(h.metadata.lStar), metadata: h.metadata };
}

/** `FILE.safetensors[#name]` → the direction `name` (default `schema.harmful`), every row ([layers, d]). */
export function namedDirection(spec: string): { path: string; name: string; direction: Directions; metadata: Record<string, string> } {
  const hash = spec.lastIndexOf('#');
  const [path, name] = hash > 0 ? [spec.slice(0, hash), spec.slice(hash + 1)] : [spec, DEFAULT_DIRECTION];
  const { directions, metadata } = readDirectionsFile(path);
  const direction = directions.get(name);
  if (!direction) throw new SafekeepError(`${path}: no direction '${name}' (has ${[...directions.keys()].join(', ')})`);
  return { path, name, direction, metadata };
}

/**
 * `FILE.safetensors[#name]` → the direction `name` (default `schema.harmful`) at `layer` ([d]), checked against d
 * when given (the engine checks it otherwise).
 */
export function directionFromFile(spec: string, layer: number, d?: number): { v: Float64Array; name: string } {
  const { path, name, direction: dir } = namedDirection(spec);
  if (d !== undefined && dir.d !== d) throw new SafekeepError(`${path}: direction '${name}' has d = ${dir.d}, the model's d_model is ${d}`);
  if (!Number.isInteger(layer) || layer < 0 || layer >= dir.layers) throw new SafekeepError(`${path}: layer ${layer} is not in 0..${dir.layers - 1}`);
  return { v: dir.data.slice(layer * dir.d, (layer + 1) * dir.d), name: `${name} from ${path}` };
}
