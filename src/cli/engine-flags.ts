/**
 * What the model commands share: engine flags (--model, --dtype, --device, --threads, --max-memory) turned into
 * engine options, and reading IDS.json / V.json / interventions.
 */
import { dirname, resolve } from 'node:path';
import { readJsonFile } from '../data/jsonfile.ts';
import { directionFromFile } from '../experiments/directions-file.ts';
import { DEVICES, type Device, type EngineOptions } from '../engine/engine-config.ts';
import { createEngine, type OnnxEngine } from '../engine/engine.ts';
import { KV_DTYPES, type KvDType } from '../engine/runtime/kv.ts';
import { parseBytes } from '../engine/runtime/memory.ts';
import { COMPUTE_DTYPES, defaultDType, type ComputeDType } from '../engine/graph/precision.ts';
import type { Intervention } from '../engine/types.ts';
import { alphaField, isF32, isObject, kindField, knownFields, layerField, positionsField, type Fail } from '../engine/run/intervention-json.ts';
import { resolveModel } from '../hub/resolve.ts';
import { hiddenRowOf } from '../sae/hook.ts';
import { loadSae } from '../sae/load.ts';
import { rowInto } from '../sae/matrix.ts';
import { SafekeepError } from '../util/errors.ts';
import type { FlagDef, ParsedArgs } from './args.ts';
import { numberValue, requireValue } from './args.ts';
import { engineEnv, hubEnv } from './env.ts';

// the flag rows live in a file of their own, which commands that open no engine can import without onnxruntime
export { ENGINE_FLAG_DEFS, ENGINE_FLAGS } from './engine-flag-defs.ts';

/** what each --dtype means (precision.ts, session.ts) */
const DTYPE_HELP = 'f32: f32 weights and math (default on cpu); bf16: bf16-rounded weights, f32 math; '
  + 'f16: f16 weights on the device, linear layers in f16, residual stream/norms/softmax/outputs f32 (default on cuda and webgpu; '
  + 'on cpu: f16-rounded weights, f32 math); bf16w: the same with bf16 (cuda only); q8/q4: MatMulNBits block-quantized weights (default symmetric blocks of 32: 5 / 9 bits per weight).';

export function engineOptions(args: ParsedArgs): EngineOptions {
  const device = args.values.get('device') ?? 'cpu';
  if (!(DEVICES as readonly string[]).includes(device)) throw new SafekeepError(`--device must be one of ${DEVICES.join(', ')}, got '${device}'`);
  const dtype = (args.values.get('dtype') ?? defaultDType(device as Device)) as ComputeDType;
  if (!COMPUTE_DTYPES.includes(dtype)) throw new SafekeepError(`--dtype must be one of ${COMPUTE_DTYPES.join(', ')}, got '${dtype}'. ${DTYPE_HELP}`);
  // the environment's defaults (cli/env.ts), then the flags
  const opts: EngineOptions = { ...engineEnv(), dtype, device: device as Device };
  const kv = args.values.get('kv-dtype');
  if (kv !== undefined) {
    if (!(KV_DTYPES as readonly string[]).includes(kv)) throw new SafekeepError(`--kv-dtype must be one of ${KV_DTYPES.join(', ')}, got '${kv}'`);
    opts.kvDType = kv as KvDType;
  }
  if (args.values.has('threads')) {
    const t = numberValue(args, 'threads');
    if (!Number.isInteger(t) || t < 1) throw new SafekeepError(`--threads must be a positive integer, got ${t}`);
    opts.threads = t;
  }
  // --max-memory 6GB|6GiB|500MB: the engine plans batches, chunks and the prefix cache under it (memory.ts)
  const mem = args.values.get('max-memory');
  if (mem !== undefined) opts.maxMemory = parseBytes(mem);
  return opts;
}

/** `--model` is a checkpoint folder or a hub id (pulled into models/ on first use). */
export async function openEngine(args: ParsedArgs): Promise<OnnxEngine> {
  const options = engineOptions(args);
  return createEngine(await resolveModel(requireValue(args, 'model'), hubEnv()), options);
}

/** IDS.json = {"input_ids": [[int, ...], ...]} */
export function readIdsFile(path: string): number[][] {
  const j = readJsonFile(path);
  const ids = (j as { input_ids?: unknown } | null)?.input_ids;
  if (!Array.isArray(ids) || ids.length === 0) throw new SafekeepError(`${path}: needs "input_ids": a non-empty list of token-id lists`);
  ids.forEach((s, i) => {
    if (!Array.isArray(s) || s.length === 0) throw new SafekeepError(`${path}: input_ids[${i}] must be a non-empty list of token ids`);
    s.forEach((v, t) => {
      if (!Number.isSafeInteger(v) || (v as number) < 0) throw new SafekeepError(`${path}: input_ids[${i}][${t}] = ${JSON.stringify(v)} is not a token id`);
    });
  });
  return ids as number[][];
}

/** V.json = {"vector": [d floats]} */
export function readVectorFile(path: string): number[] {
  const j = readJsonFile(path);
  const v = (j as { vector?: unknown } | null)?.vector;
  if (!Array.isArray(v) || v.length === 0 || !v.every((x) => typeof x === 'number' && Number.isFinite(x))) {
    throw new SafekeepError(`${path}: needs "vector": a list of finite numbers`);
  }
  return v as number[];
}

/**
 * `--steer-vector SPEC` (generate): `V.json` = {"vector": [d floats]}, or `FILE.safetensors[#name]` = row `layer` of a
 * direction in a directions file (reproduce's directions.safetensors, directions import's), as steer, --intervene and
 * the server take it.
 */
export function readSteerVector(spec: string, layer: number): number[] {
  return /\.safetensors(#.*)?$/.test(spec) ? Array.from(directionFromFile(spec, layer).v) : readVectorFile(spec);
}

/** `--intervene FILE.json` (forward, generate) */
export const INTERVENE_FLAG_DEF: FlagDef = {
  name: 'intervene', value: 'FILE.json',
  help: '{"interventions": [{"layer": l, "kind": "add"|"ablate"|"clamp", "vector": [d floats], "alpha": a, "positions": "all"|"generated"}]}: '
    + 'add h+a·r̂, ablate h−(h·r̂)r̂, clamp the projection on r̂ to a; several at once. "vector": "directions.safetensors#refusal.chatbot" '
    + 'takes row l of a direction reproduce wrote, "sae:SAE_DIR#J" the decoder row of feature J of the SAE reading hidden[l] (paths relative to FILE.json)',
};

/**
 * FILE.json = {"interventions": [...]} (or the bare list). Each entry's fields are read as the server reads them
 * (engine/run/intervention-json.ts: unknown fields, an ablation's alpha, a missing alpha refused by name); the engine
 * checks what needs the model (layer range, width, overflow).
 */
export function readInterventionsFile(path: string): Intervention[] {
  const j = readJsonFile(path);
  const list = Array.isArray(j) ? j : (j as { interventions?: unknown } | null)?.interventions;
  if (!Array.isArray(list) || list.length === 0) throw new SafekeepError(`${path}: needs "interventions": a non-empty list`);
  const fail: Fail = (message) => { throw new SafekeepError(message); };
  return list.map((o, i) => {
    const where = `${path}: interventions[${i}]`;
    if (!isObject(o)) throw new SafekeepError(`${where} must be an object`);
    knownFields(o, ['layer', 'kind', 'vector', 'alpha', 'positions'], where, fail);
    const layer = layerField(o.layer, `${where}.layer`, fail);
    const kind = kindField(o.kind, `${where}.kind`, fail);
    // a direction from a directions file (reproduce's directions.safetensors): row `layer`, path relative to FILE.json;
    // or an SAE feature's decoder row ("sae:SAE_DIR#J")
    const vector = typeof o.vector !== 'string' ? o.vector
      : o.vector.startsWith('sae:') ? saeFeatureVector(resolve(dirname(path), o.vector.slice(4)), layer, `${where}.vector`)
        : Array.from(directionFromFile(resolve(dirname(path), o.vector), layer).v);
    if (!Array.isArray(vector) || !vector.every(isF32)) throw new SafekeepError(`${where}.vector must be a list of finite numbers within the float32 range (|x| ≤ 3.4e38), "FILE.safetensors[#name]" or "sae:SAE_DIR#feature"`);
    const alpha = alphaField(kind, o.alpha, `${where}.alpha`, fail);
    const positions = positionsField(o.positions, `${where}.positions`, fail);
    return { layer, kind, vector, ...(alpha !== undefined ? { alpha } : {}), ...(positions !== undefined ? { positions } : {}) };
  });
}

/**
 * "sae:SAE_DIR#J": feature J's decoder row W_dec[J] of the SAE at SAE_DIR (any layout loadSae reads), for an
 * intervention at hidden[layer] — which must be the row the SAE reads (blocks.l.hook_resid_post → l + 1). An add
 * of alpha then moves the stream by alpha along the feature's direction: steering by feature.
 */
function saeFeatureVector(spec: string, layer: number, where: string): number[] {
  const hash = spec.lastIndexOf('#');
  const feature = hash > 0 ? Number(spec.slice(hash + 1)) : NaN;
  if (!Number.isInteger(feature) || feature < 0) throw new SafekeepError(`${where}: "sae:SAE_DIR#feature" needs a feature index after '#'`);
  const sae = loadSae(spec.slice(0, hash));
  const row = hiddenRowOf(sae.config.hookName, Number.MAX_SAFE_INTEGER, where);
  if (row !== layer) throw new SafekeepError(`${where}: the SAE reads ${sae.config.hookName} = hidden[${row}], the intervention is at layer ${layer}`);
  if (feature >= sae.config.dSae) throw new SafekeepError(`${where}: feature ${feature} is not in 0..${sae.config.dSae - 1}`);
  return Array.from(rowInto(sae.W_dec, feature, new Float32Array(sae.config.dIn)));
}

/** what an output file records of the interventions (no vectors) */
export const interventionSummary = (list: readonly Intervention[]) =>
  list.map((iv) => ({ layer: iv.layer, kind: iv.kind, ...(iv.alpha !== undefined ? { alpha: iv.alpha } : {}), positions: iv.positions ?? 'all' }));
