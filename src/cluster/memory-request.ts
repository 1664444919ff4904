/**
 * The default `--mem` of a job that loads the model: the f32 weights computed from 16-bit storage (2 × the weight
 * files) at their load-time peak (WEIGHT_PEAK.f32, measured in engine/runtime/memory.ts), plus 2 GiB for Node,
 * onnxruntime, activations, KV and the arena — rounded up to whole GiB, at least 4G. An upper bound for f16/q8/q4
 * runs (their weights are smaller); `--mem` overrides it. Without any `--mem` a job gets the cluster's default
 * memory, often a few GB, and an 8B model's task is killed while loading.
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { WEIGHT_PEAK } from '../engine/runtime/memory.ts';

const GiB = 2 ** 30;

/** bytes of the *.safetensors files in a model folder (links followed); 0 when the folder is not there (yet) */
export function modelWeightBytes(dir: string): number {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return 0;
  }
  return names.filter((n) => n.endsWith('.safetensors')).reduce((s, n) => s + statSync(join(dir, n)).size, 0);
}

/** Slurm `--mem` value (e.g. `24G`) for a task whose model's weight files hold `weightBytes` */
export function taskMemoryRequest(weightBytes: number): string {
  const bytes = 2 * weightBytes * WEIGHT_PEAK.f32 + 2 * GiB;
  return `${Math.max(4, Math.ceil(bytes / GiB))}G`;
}

/** Slurm's --mem syntax: a positive integer with an optional K, M, G or T suffix (MB when none) */
export function isSlurmMemory(s: string): boolean {
  return /^[1-9]\d*[KMGT]?$/i.test(s);
}
