/**
 * `npm run bench:8b [-- --layers 1,2 --dtype q4 --keep DIR]`: does a Llama-3.1-8B-shaped model run in ≤ 8 GB RAM at
 * q4? Writing 32 random 8B layers (16 GB BF16) is not needed to answer it: RSS is linear in the layer count, so this
 * writes 8B-shaped random BF16 checkpoints with few layers (default 1 and 2: hidden 4096, 32 heads / 8 KV heads,
 * intermediate 14336, vocab 128256, untied), quantizes each in a child process (so quantization buffers are not
 * counted), then measures in a fresh child: peak RSS (VmHWM) after session creation, a 256-token prefill
 * (hidden states at the last position, logits at the last position) and 16 decode steps. The 32-layer figure is
 * extrapolated linearly from the per-layer slope: RSS(32) = RSS(a) + (32 − a) · (RSS(b) − RSS(a)) / (b − a); the same
 * for the anonymous part (RssAnon; the rest is file-backed pages of the mmapped quantized weights).
 * Disk: ~2.6 GB per layer-count checkpoint (BF16 embedding + lm_head 2 GB) plus its quantized copy in the cache.
 */
import { spawnSync } from 'node:child_process';
import { peakRss } from './common.ts';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngineFromCheckpoint } from '../src/engine/engine.ts';
import type { ComputeDType } from '../src/engine/graph.ts';
import { quantizedWeights } from '../src/engine/quant-store.ts';
import { quantScheme } from '../src/engine/session.ts';

const SHAPE = {
  hiddenSize: 4096, numHeads: 32, numKvHeads: 8, headDim: 128, intermediateSize: 14336, vocabSize: 128256,
  tieWordEmbeddings: false, dtype: 'BF16' as const, seed: 1, std: 0.02,
};
const FULL_LAYERS = 32;

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;

async function child(mode: string, dir: string, dtype: ComputeDType): Promise<void> {
  const ck = await loadCheckpoint(dir);
  const cacheDir = join(dir, '..', 'cache');
  if (mode === 'quantize') {
    if (dtype === 'q4' || dtype === 'q8') quantizedWeights(ck, dtype === 'q8' ? 8 : 4, quantScheme(dtype), cacheDir);
    return;
  }
  const before = process.memoryUsage().rss;
  const t0 = performance.now();
  const engine = await createEngineFromCheckpoint(ck, { dtype, cacheDir, threads: Number(flag('threads') ?? 0) || undefined });
  const startS = (performance.now() - t0) / 1000;
  const afterSession = process.memoryUsage().rss;
  const prompt = Array.from({ length: 256 }, (_, i) => 1 + ((i * 7919) % 128000));
  const t1 = performance.now();
  await engine.forward([prompt], { hiddenAt: 'last', logitsAt: 'last' });
  const prefillS = (performance.now() - t1) / 1000;
  const t2 = performance.now();
  await engine.generate([prompt.slice(0, 32)], { maxNewTokens: 16, stopIds: [] });
  const genS = (performance.now() - t2) / 1000;
  const peak = peakRss();
  const status = readFileSync('/proc/self/status', 'utf8');
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN) * 1024;
  await engine.dispose();
  process.stdout.write(JSON.stringify({ before, afterSession, peak, anon: kb('RssAnon'), file: kb('RssFile'), startS, prefillTps: 256 / prefillS, genS }) + '\n');
}

async function main(): Promise<void> {
  const dtype = (flag('dtype') ?? 'q4') as ComputeDType;
  const mode = flag('mode');
  if (mode) return child(mode, flag('run')!, dtype);
  const layerCounts = (flag('layers') ?? '1,2').split(',').map(Number);
  const keep = flag('keep');
  const root = keep ?? mkdtempSync(join(tmpdir(), 'safekeep-8b-'));
  const me = fileURLToPath(import.meta.url);
  const rows: { layers: number; peak: number; afterSession: number; anon: number; file: number; prefillTps: number; startS: number }[] = [];
  try {
    for (const n of layerCounts) {
      const dir = join(root, `llama8b-${n}l`, 'model');
      if (!existsSync(join(dir, 'model.safetensors'))) {
        process.stderr.write(`writing an 8B-shaped ${n}-layer BF16 checkpoint to ${dir} ...\n`);
        await writeRandomCheckpoint(dir, 'llama', { ...SHAPE, numLayers: n });
      }
      const q = spawnSync(process.execPath, ['--import', 'tsx', me, '--mode', 'quantize', '--run', dir, '--dtype', dtype], { stdio: ['ignore', 'inherit', 'inherit'] });
      if (q.status !== 0) throw new Error('quantize child failed');
      const m = spawnSync(process.execPath, ['--import', 'tsx', me, '--mode', 'measure', '--run', dir, '--dtype', dtype, ...(flag('threads') ? ['--threads', flag('threads')!] : [])],
        { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
      if (m.status !== 0) throw new Error('measure child failed');
      const r = JSON.parse(m.stdout.trim().split('\n').at(-1)!) as { peak: number; afterSession: number; anon: number; file: number; prefillTps: number; startS: number };
      rows.push({ layers: n, ...r });
      process.stdout.write(`${dtype}, ${n} layer(s): peak RSS ${gib(r.peak)} (at the end: anonymous ${gib(r.anon)}, file-backed ${gib(r.file)}), after session ${gib(r.afterSession)}, session start ${r.startS.toFixed(1)} s, prefill 1×256 ${r.prefillTps.toFixed(1)} tok/s\n`);
    }
    if (rows.length >= 2) {
      const [a, b] = [rows[0]!, rows.at(-1)!];
      const slope = (b.peak - a.peak) / (b.layers - a.layers);
      const full = a.peak + (FULL_LAYERS - a.layers) * slope;
      const anonSlope = (b.anon - a.anon) / (b.layers - a.layers);
      const anonFull = b.anon + (FULL_LAYERS - b.layers) * anonSlope;
      process.stdout.write(`per layer ${gib(slope)}; extrapolated ${FULL_LAYERS}-layer Llama-3.1-8B shape at ${dtype}: peak RSS ≈ ${gib(full)} (${(full / 1e9).toFixed(2)} GB; target ≤ 8 GB), of which anonymous ≈ ${gib(anonFull)} (the rest: file-backed pages of the mmapped quantized weights, reclaimable)\n`);
    }
  } finally {
    if (!keep) rmSync(root, { recursive: true, force: true });
  }
}

await main();
