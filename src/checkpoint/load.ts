/**
 * Opens a Hugging Face checkpoint folder: config.json (+ generation_config.json), and the weights from
 * `model.safetensors` or a sharded `model.safetensors.index.json`. Validates every header and that every tensor the
 * family needs is present with the right shape and a supported dtype; extra tensors (e.g. rotary inv_freq, a stored
 * lm_head of a tied model) are ignored. No tensor data is read here.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { parseModelConfig } from './config.ts';
import { expectedTensors } from './tensors.ts';
import { readSafetensorsHeader, type SafetensorsEntry } from './safetensors.ts';
import type { Checkpoint, DType, TensorEntry } from './types.ts';
import { sha256Hex } from '../util/hash.ts';

const LOADABLE: readonly string[] = ['F32', 'BF16', 'F16'];

function readJson(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new SafekeepError(`${file}: cannot read (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new SafekeepError(`${file}: invalid JSON (${(e as Error).message})`);
  }
}

/** The .safetensors files of a folder and, per tensor name, which file the index says holds it (null = unsharded). */
function weightFiles(dir: string): { files: string[]; weightMap: Map<string, string> | null } {
  const indexFile = join(dir, 'model.safetensors.index.json');
  if (existsSync(indexFile)) {
    const idx = readJson(indexFile);
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
  const configBytes = readFileSync(configFile);
  const genBytes = hasGen ? readFileSync(genFile) : null;
  const config = parseModelConfig(readJson(configFile), hasGen ? readJson(genFile) : null, configFile, genFile);

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
