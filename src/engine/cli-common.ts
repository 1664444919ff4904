/**
 * What `safekeep forward` and `safekeep generate` share: engine flags (--model, --dtype, --device, --threads,
 * --max-memory), reading IDS.json, and atomic JSON output.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, basename } from 'node:path';
import type { FlagDef, ParsedArgs } from '../cli/args.ts';
import { numberValue, requireValue } from '../cli/args.ts';
import { resolveModel } from '../hub/resolve.ts';
import { SafekeepError } from '../util/errors.ts';
import { createEngine, type EngineOptions, type OnnxEngine } from './engine.ts';
import { parseBytes } from './memory.ts';
import { COMPUTE_DTYPES, defaultDType, type ComputeDType } from './precision.ts';

/** flag-table rows every model command shares (--model, --dtype, --device, --threads, --max-memory) */
export const ENGINE_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'model', value: 'M', help: 'checkpoint folder or Hugging Face repo id (pulled into models/ on first use)' },
  { name: 'dtype', value: 'f32|bf16|f16|bf16w|q8|q4', default: 'f32 on cpu, f16 on cuda', help: 'weight/compute precision' },
  { name: 'device', value: 'cpu|cuda', default: 'cpu', help: 'execution provider' },
  { name: 'threads', value: 'N', default: 'one per physical core', help: 'intra-op threads' },
  { name: 'max-memory', value: '6GB', help: 'peak-RSS budget: batches, chunks and prefix cache are planned under it' },
];
export const ENGINE_FLAGS = ENGINE_FLAG_DEFS.map((f) => f.name);

/** what each --dtype means (precision.ts, session.ts) */
export const DTYPE_HELP = 'f32: f32 weights and math (default on cpu); bf16: bf16-rounded weights, f32 math; '
  + 'f16: f16 weights on the device, linear layers in f16, residual stream/norms/softmax/outputs f32 (default on cuda; '
  + 'on cpu: f16-rounded weights, f32 math); bf16w: the same with bf16 (cuda only); q8/q4: MatMulNBits block-32 weights.';

export function engineOptions(args: ParsedArgs): EngineOptions {
  const device = args.values.get('device') ?? 'cpu';
  if (device !== 'cpu' && device !== 'cuda') throw new SafekeepError(`--device must be cpu or cuda, got '${device}'`);
  const dtype = (args.values.get('dtype') ?? defaultDType(device)) as ComputeDType;
  if (!COMPUTE_DTYPES.includes(dtype)) throw new SafekeepError(`--dtype must be one of ${COMPUTE_DTYPES.join(', ')}, got '${dtype}'. ${DTYPE_HELP}`);
  const opts: EngineOptions = { dtype, device };
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
  return createEngine(await resolveModel(requireValue(args, 'model')), options);
}

export function readJsonFile(path: string, what: string): unknown {
  if (!existsSync(path)) throw new SafekeepError(`${what} ${path}: no such file`);
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as unknown;
  } catch (e) {
    throw new SafekeepError(`${what} ${path}: not valid JSON (${(e as Error).message})`);
  }
}

/** IDS.json = {"input_ids": [[int, ...], ...]} */
export function readIdsFile(path: string): number[][] {
  const j = readJsonFile(path, '--ids');
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
  const j = readJsonFile(path, '--steer-vector');
  const v = (j as { vector?: unknown } | null)?.vector;
  if (!Array.isArray(v) || v.length === 0 || !v.every((x) => typeof x === 'number' && Number.isFinite(x))) {
    throw new SafekeepError(`${path}: needs "vector": a list of finite numbers`);
  }
  return v as number[];
}

export function writeFileAtomic(path: string, data: string | Uint8Array): void {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  } catch (e) {
    throw new SafekeepError(`${path}: cannot write (${(e as Error).message})`);
  }
}
