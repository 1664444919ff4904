/**
 * A resumable, never-half-written store of per-row all-layer activations.
 *
 * Layout for a cache named N in folder D:
 *   D/N.safetensors   `hidden` float32 [n, L+1, d_model]  (+ metadata: rows hash)    — written last, atomically
 *   D/N.json          manifest (caller's fields + rows with prompt hash and token count)
 *   D/N.parts/        while running: plan.json (rows hash, batches) and one part-<b>.safetensors per finished batch
 * Several caches over the same rows can be filled by one pass (`buildActivationCaches`), e.g. the last prompt
 * token and the first generated token from one prefill.
 * Batches are fixed by the plan (rows in order, packed under a token budget), so a run that is killed and rerun
 * computes exactly the same batches and the final file is byte-identical to an uninterrupted run. Every file is
 * written to a temp name and renamed; a part either exists complete or not at all.
 */
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { readSafetensorsHeader, writeSafetensors, type TensorToWrite } from '../checkpoint/safetensors.ts';
import { writeJsonAtomic } from '../util/atomic.ts';
import { sha256Hex } from '../util/hash.ts';
import { SafekeepError } from '../util/errors.ts';
import { ItemProgress } from '../util/progress.ts';
import { lockFolder } from '../util/lock.ts';

export interface CacheRow {
  /** stable row key, e.g. `<pairId>:harmful` */
  key: string;
  /** token ids fed to the model */
  ids: number[];
  /** sha256 of the rendered prompt text */
  promptHash: string;
}

/** Computes the activations of a batch of rows: one [L+1, d] Float32Array per row, in order. */
type BatchCompute = (rows: readonly CacheRow[]) => Promise<Float32Array[]>;
/** The same for several caches filled by one pass: [cache][row]. */
export type MultiBatchCompute = (rows: readonly CacheRow[]) => Promise<Float32Array[][]>;

interface CommonOptions {
  dir: string;
  rows: readonly CacheRow[];
  layers: number;
  d: number;
  /** padded tokens per batch (rows × longest row), default 4096 */
  batchTokens?: number;
  /** most rows per batch, default 16 */
  maxBatch?: number;
  /** extra manifest fields (model, tokenizer, dataset, configuration texts ...) */
  manifest: Record<string, unknown>;
  /** progress label on stderr */
  label?: string;
  /** no progress lines */
  quiet?: boolean;
}

interface StoreOptions extends CommonOptions {
  name: string;
  compute: BatchCompute;
}

export interface MultiStoreOptions extends CommonOptions {
  /** caches filled by one pass over the rows (manifests get `kind` per cache from `kinds`) */
  names: string[];
  kinds?: string[];
  compute: MultiBatchCompute;
}

export interface StoreResult {
  path: string;
  manifestPath: string;
  /** true when the final file already existed with the same rows (nothing computed) */
  reused: boolean;
  /** batches found complete from an interrupted run */
  resumedBatches: number;
  computedRows: number;
}

/** Deterministic batch plan: consecutive rows packed while rows × longest ≤ budget. [batch] → [start, end) */
export function planBatches(lengths: readonly number[], batchTokens: number, maxBatch: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let start = 0;
  while (start < lengths.length) {
    let end = start + 1;
    let longest = lengths[start]!;
    while (end < lengths.length && end - start < maxBatch) {
      const l = Math.max(longest, lengths[end]!);
      if (l * (end - start + 1) > batchTokens) break;
      longest = l;
      end++;
    }
    out.push([start, end]);
    start = end;
  }
  return out;
}

export function rowsHash(rows: readonly CacheRow[]): string {
  return sha256Hex(rows.map((r) => `${r.key}\t${r.promptHash}\t${r.ids.length}`).join('\n'));
}

/** Is there a complete cache `dir/name` for exactly these rows? */
export function cacheIsComplete(dir: string, name: string, rows: readonly CacheRow[]): boolean {
  const path = join(dir, `${name}.safetensors`);
  if (!existsSync(path) || !existsSync(join(dir, `${name}.json`))) return false;
  try {
    return readSafetensorsHeader(path).metadata.rows_hash === rowsHash(rows);
  } catch {
    return false;
  }
}

export async function buildActivationCache(o: StoreOptions): Promise<StoreResult> {
  const { name, compute, ...rest } = o;
  const [r] = await buildActivationCaches({ ...rest, names: [name], compute: async (rows) => [await compute(rows)] });
  return r!;
}

/** Where a pass's parts live: `<dir>/<name1>+<name2>.parts`. */
const partsDirName = (names: readonly string[]): string => `${names.join('+')}.parts`;
export const partFileName = (b: number): string => `part-${String(b).padStart(6, '0')}.safetensors`;

/** The deterministic batch plan of a pass and each batch's padded tokens (rows × longest: its compute cost). */
export function planPass(o: CommonOptions): { batches: Array<[number, number]>; tokens: number[] } {
  const lengths = o.rows.map((r) => r.ids.length);
  const batches = planBatches(lengths, o.batchTokens ?? 4096, o.maxBatch ?? 16);
  return { batches, tokens: batches.map(([a, e]) => (e - a) * Math.max(...lengths.slice(a, e))) };
}

/**
 * Everything needed to assemble a pass's caches from its parts without the model: written by each shard as
 * `pass.json` next to its parts, so `safekeep merge` writes exactly the files a single process would.
 */
export interface PassRecord {
  rowsHash: string;
  names: string[];
  kinds: string[] | null;
  layers: number;
  d: number;
  batchTokens: number;
  batches: Array<[number, number]>;
  rows: Array<{ key: string; promptHash: string; tokens: number }>;
  manifest: Record<string, unknown>;
}

function passRecord(o: MultiStoreOptions): PassRecord {
  return {
    rowsHash: rowsHash(o.rows),
    names: o.names,
    kinds: o.kinds ?? null,
    layers: o.layers,
    d: o.d,
    batchTokens: o.batchTokens ?? 4096,
    batches: planPass(o).batches,
    rows: o.rows.map((r) => ({ key: r.key, promptHash: r.promptHash, tokens: r.ids.length })),
    manifest: o.manifest,
  };
}

/** Are the final caches of this pass already in `dir` for exactly its rows? */
export function passIsComplete(dir: string, p: Pick<PassRecord, 'names' | 'rowsHash'>): boolean {
  return p.names.every((n) => {
    const path = join(dir, `${n}.safetensors`);
    if (!existsSync(path) || !existsSync(join(dir, `${n}.json`))) return false;
    try { return readSafetensorsHeader(path).metadata.rows_hash === p.rowsHash; } catch { return false; }
  });
}

/** A shard's share of a pass: only these batches, into `partsRoot/<names>.parts/`, never assembled here. */
interface ShardFill {
  partsRoot: string;
  /** batch indices of the pass's plan this shard computes */
  batches: readonly number[];
  /** after each finished batch: rows and padded tokens just written */
  onBatch?: (rows: number, tokens: number) => void;
}

/**
 * Fills several caches over the same rows in one pass (e.g. the prompt's last token and the first generated token
 * from one prefill). Parts hold one tensor per cache; each final file is written atomically. With `shard`, only the
 * shard's batches are computed into its own parts folder (plus `pass.json`); `safekeep merge` assembles them.
 */
export async function buildActivationCaches(o: MultiStoreOptions, shard?: ShardFill): Promise<StoreResult[]> {
  if (shard) return fillCaches(o, shard); // a shard writes only inside its own folder
  // one writer per cache folder: a second run into the same --results is told who holds it
  const release = lockFolder(o.dir);
  try {
    return await fillCaches(o);
  } finally {
    release();
  }
}

async function fillCaches(o: MultiStoreOptions, shard?: ShardFill): Promise<StoreResult[]> {
  if (!shard) mkdirSync(o.dir, { recursive: true });
  const hash = rowsHash(o.rows);
  const paths = o.names.map((n) => ({ path: join(o.dir, `${n}.safetensors`), manifestPath: join(o.dir, `${n}.json`) }));
  if (o.names.every((n) => cacheIsComplete(o.dir, n, o.rows))) {
    return paths.map((p) => ({ ...p, reused: true, resumedBatches: 0, computedRows: 0 }));
  }

  const partsDir = join(shard?.partsRoot ?? o.dir, partsDirName(o.names));
  const { batches: plan, tokens } = planPass(o);
  const planPath = join(partsDir, 'plan.json');
  const planValue = { rowsHash: hash, names: o.names, layers: o.layers, d: o.d, batches: plan };
  if (existsSync(planPath)) {
    let old: unknown = null;
    try { old = JSON.parse(readFileSync(planPath, 'utf8')); } catch { /* unreadable → start over */ }
    if (JSON.stringify(old) !== JSON.stringify(planValue)) rmSync(partsDir, { recursive: true, force: true });
  }
  mkdirSync(partsDir, { recursive: true });
  if (!existsSync(planPath)) writeJsonAtomic(planPath, planValue);
  if (shard) writeJsonAtomic(join(partsDir, 'pass.json'), passRecord(o));

  const partPath = (b: number): string => join(partsDir, partFileName(b));
  const rowBytes = o.layers * o.d;
  const mine = shard ? shard.batches : plan.map((_, b) => b);
  const done = new Set(mine.filter((b) => existsSync(partPath(b))));
  const resumedBatches = done.size;
  const resumedRows = mine.reduce((s, b) => s + (done.has(b) ? plan[b]![1] - plan[b]![0] : 0), 0);
  const progress = new ItemProgress(o.label ?? o.names.join('+'), mine.reduce((s, b) => s + plan[b]![1] - plan[b]![0], 0), { resumed: resumedRows, unit: 'prompts', quiet: o.quiet });
  let computedRows = 0;
  for (const b of mine) {
    if (done.has(b)) continue;
    const [start, end] = plan[b]!;
    const batch = o.rows.slice(start, end);
    const outs = await o.compute(batch);
    const tensors: Record<string, TensorToWrite> = {};
    o.names.forEach((_, k) => {
      const rows = outs[k];
      if (!rows || rows.length !== batch.length) throw new Error(`compute returned ${rows?.length ?? 0} rows of cache ${k} for a batch of ${batch.length}`);
      const data = new Float32Array(batch.length * rowBytes);
      rows.forEach((h, i) => {
        if (h.length !== rowBytes) throw new Error(`row ${batch[i]!.key}: ${h.length} values, expected ${rowBytes}`);
        data.set(h, i * rowBytes);
      });
      tensors[`hidden.${k}`] = { dtype: 'F32', shape: [batch.length, o.layers, o.d], data };
    });
    writeSafetensors(partPath(b), tensors);
    computedRows += batch.length;
    progress.add(batch.length);
    shard?.onBatch?.(batch.length, tokens[b]!);
  }
  progress.finish();
  if (shard) return paths.map((p) => ({ ...p, reused: false, resumedBatches, computedRows }));

  assembleCaches(o.dir, passRecord(o), partPath);
  rmSync(partsDir, { recursive: true, force: true });
  return paths.map((p) => ({ ...p, reused: false, resumedBatches, computedRows }));
}

/**
 * Writes a pass's final caches into `dir` from its complete parts (`partPath(b)` for every batch b): the same
 * bytes whether the parts came from one process or from many shards.
 */
export function assembleCaches(dir: string, p: PassRecord, partPath: (b: number) => string): void {
  const rowBytes = p.layers * p.d;
  const n = p.rows.length;
  const all = p.names.map(() => new Float32Array(n * rowBytes));
  for (let b = 0; b < p.batches.length; b++) {
    const [start, end] = p.batches[b]!;
    const header = readSafetensorsHeader(partPath(b));
    const buf = readFileSync(partPath(b));
    p.names.forEach((_, k) => {
      const entry = header.entries.find((x) => x.name === `hidden.${k}`);
      if (!entry || entry.dtype !== 'F32' || entry.shape[0] !== end - start) {
        throw new SafekeepError(`${partPath(b)}: unexpected contents; delete its parts folder and rerun`);
      }
      all[k]!.set(new Float32Array(buf.buffer.slice(buf.byteOffset + entry.offset, buf.byteOffset + entry.offset + entry.byteLength)), start * rowBytes);
    });
  }
  mkdirSync(dir, { recursive: true });
  p.names.forEach((name, k) => {
    writeSafetensors(join(dir, `${name}.safetensors`), { hidden: { dtype: 'F32', shape: [n, p.layers, p.d], data: all[k]! } }, { rows_hash: p.rowsHash, format: 'safekeep-activations' });
    writeJsonAtomic(join(dir, `${name}.json`), {
      ...p.manifest,
      ...(p.kinds?.[k] ? { kind: p.kinds[k] } : {}),
      cache: { name, shape: [n, p.layers, p.d], rowsHash: p.rowsHash, batches: p.batches.length, batchTokens: p.batchTokens, filledWith: p.names },
      rows: p.rows,
    });
  });
}

/** Reads a finished cache: `hidden` [n, L+1, d] and its manifest. */
export function readActivationCache(dir: string, name: string): { n: number; layers: number; d: number; data: Float32Array; manifest: Record<string, unknown> } {
  const path = join(dir, `${name}.safetensors`);
  if (!existsSync(path)) throw new SafekeepError(`${path}: no such activation cache (run safekeep extract first)`);
  const header = readSafetensorsHeader(path);
  const e = header.entries.find((x) => x.name === 'hidden');
  if (!e || e.dtype !== 'F32' || e.shape.length !== 3) throw new SafekeepError(`${path}: not a safekeep activation cache (no float32 'hidden' [n, L+1, d])`);
  const buf = readFileSync(path);
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + e.offset, buf.byteOffset + e.offset + e.byteLength));
  const manifest = JSON.parse(readFileSync(join(dir, `${name}.json`), 'utf8')) as Record<string, unknown>;
  return { n: e.shape[0]!, layers: e.shape[1]!, d: e.shape[2]!, data, manifest };
}

