/**
 * Opens a Hugging Face checkpoint folder: config.json (+ generation_config.json), and the weights from
 * `model.safetensors` or a sharded `model.safetensors.index.json`. Validates every header and that every tensor the
 * family needs is present with the right shape and a supported dtype; extra tensors (e.g. rotary inv_freq, a stored
 * lm_head of a tied model) are ignored. No tensor data is read here.
 */
import { existsSync, statSync } from 'node:fs';
import { parseJsonBounded } from '../util/json-bounded.ts';
import { readRegularText } from './regular-file.ts';
import { join, resolve } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { parseModelConfig } from './config.ts';
import { expectedTensors } from './tensors.ts';
import { readSafetensorsHeader, type SafetensorsEntry } from './safetensors.ts';
import type { Checkpoint, DType, TensorEntry } from './types.ts';
import { sha256Hex } from '../util/hash.ts';

const LOADABLE: readonly string[] = ['F32', 'BF16', 'F16'];

/** config.json and generation_config.json are a few kB; an index names each tensor once (a few MB at most). */
const MAX_CONFIG_BYTES = 4 * 1024 * 1024;
const MAX_INDEX_BYTES = 64 * 1024 * 1024;

/** A JSON file of the checkpoint: a regular file, bounded in size and nesting, or one clear error. */
function readJson(file: string, maxBytes = MAX_CONFIG_BYTES): { value: unknown; bytes: Buffer } {
  const text = readRegularText(file, maxBytes);
  try {
    return { value: parseJsonBounded(text, file), bytes: Buffer.from(text, 'utf8') };
  } catch (e) {
    throw new SafekeepError((e as Error).message.replace(': not valid JSON', ': invalid JSON'));
  }
}

/**
 * Layers the weights hold (distinct `model.layers.<i>.` indices): compared with num_hidden_layers before the
 * expected-tensor list is built, so a config claiming a billion layers is one line about the files.
 */
function layersInWeights(names: Iterable<string>): number {
  const seen = new Set<number>();
  for (const n of names) {
    const m = /^model\.layers\.(\d+)\./.exec(n);
    if (m) seen.add(Number(m[1]));
  }
  return seen.size;
}

/** The .safetensors files of a folder and, per tensor name, which file the index says holds it (null = unsharded). */
function weightFiles(dir: string): { files: string[]; weightMap: Map<string, string> | null } {
  const indexFile = join(dir, 'model.safetensors.index.json');
  if (existsSync(indexFile)) {
    const idx = readJson(indexFile, MAX_INDEX_BYTES).value;
    const wm = (idx as { weight_map?: unknown } | null)?.weight_map;
    if (wm === null || typeof wm !== 'object' || Array.isArray(wm)) throw new SafekeepError(`${indexFile}: missing weight_map object`);
    const weightMap = new Map<string, string>();
    for (const [name, f] of Object.entries(wm as Record<string, unknown>)) {
      if (typeof f !== 'string' || f.includes('/') || f.includes('\\') || !f.endsWith('.safetensors')) {
        throw new SafekeepError(`${indexFile}: weight_map[${JSON.stringify(name)}] must be a .safetensors file name in the folder, got ${JSON.stringify(f)}`);
      }
      weightMap.set(name, join(dir, f));
    }
    const files = [...new Set(weightMap.values())].sort();
    for (const f of files) if (!existsSync(f)) throw new SafekeepError(`${indexFile}: shard ${f} is missing`);
    return { files, weightMap };
  }
  const single = join(dir, 'model.safetensors');
  if (existsSync(single)) return { files: [single], weightMap: null };
  throw new SafekeepError(`${dir}: no model.safetensors or model.safetensors.index.json (only safetensors checkpoints are supported)`);
}

export async function loadCheckpoint(dirIn: string): Promise<Checkpoint> {
  const dir = resolve(dirIn);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new SafekeepError(`${dirIn}: not a folder`);
  const configFile = join(dir, 'config.json');
  if (!existsSync(configFile)) throw new SafekeepError(`${dir}: no config.json (not a Hugging Face checkpoint folder)`);
  const genFile = join(dir, 'generation_config.json');
  const hasGen = existsSync(genFile);
  const cfgJson = readJson(configFile);
  const genJson = hasGen ? readJson(genFile) : null;
  const configBytes = cfgJson.bytes;
  const genBytes = genJson?.bytes ?? null;
  const config = parseModelConfig(cfgJson.value, genJson?.value ?? null, configFile, genFile);

  const { files, weightMap } = weightFiles(dir);
  const found = new Map<string, SafetensorsEntry>();
  for (const f of files) {
    for (const e of readSafetensorsHeader(f).entries) {
      const prev = found.get(e.name);
      if (prev && weightMap === null) throw new SafekeepError(`${f}: tensor ${e.name} appears twice`);
      // with an index, the index decides which shard's copy counts
      if (prev && weightMap?.get(e.name) !== e.file) continue;
      found.set(e.name, e);
    }
  }
  const held = layersInWeights(found.keys());
  if (config.numLayers > held) {
    throw new SafekeepError(`${configFile}: num_hidden_layers ${config.numLayers}, but the weights (${files.length} file${files.length === 1 ? '' : 's'}) hold ${held} layer${held === 1 ? '' : 's'}`);
  }
  const tensors = new Map<string, TensorEntry>();
  for (const [name, shape] of expectedTensors(config)) {
    const where = weightMap?.get(name);
    const e = found.get(name);
    if (!e) {
      throw new SafekeepError(where
        ? `${where}: tensor ${name} is missing (model.safetensors.index.json says it is in this shard)`
        : `${files.join(', ')}: tensor ${name} is missing (needed by ${config.family} with ${config.numLayers} layers)`);
    }
    if (where && where !== e.file) throw new SafekeepError(`${where}: tensor ${name} is missing (model.safetensors.index.json says it is here; found in ${e.file})`);
    if (e.shape.length !== shape.length || e.shape.some((s, i) => s !== shape[i])) {
      throw new SafekeepError(`${e.file}: tensor ${name} has shape ${JSON.stringify(e.shape)}, expected ${JSON.stringify(shape)} from config.json`);
    }
    if (!LOADABLE.includes(e.dtype)) throw new SafekeepError(`${e.file}: tensor ${name} has dtype ${e.dtype} (supported: ${LOADABLE.join(', ')})`);
    tensors.set(name, { name, file: e.file, dtype: e.dtype as DType, shape: e.shape, offset: e.offset, byteLength: e.byteLength });
  }
  return { dir, config, tensors, configHash: sha256Hex(genBytes ? [configBytes, genBytes] : [configBytes]) };
}

/** The distinct dtypes of the model's tensors, e.g. ['BF16'] or ['BF16', 'F32']. */
export function checkpointDTypes(ckpt: Checkpoint): DType[] {
  return [...new Set([...ckpt.tensors.values()].map((t) => t.dtype))].sort();
}

/** Number of parameters of the model (tied embeddings counted once). */
export function parameterCount(ckpt: Checkpoint): number {
  let n = 0;
  for (const t of ckpt.tensors.values()) n += t.shape.reduce((a, b) => a * b, 1);
  return n;
}
