/**
 * `npm run bench:8b [-- --layers 32 --dtype q4 --keep DIR --threads N]`: does a Llama-3.1-8B-shaped model run in
 * ≤ 8 GB RAM at q4? Writes an 8B-shaped random BF16 checkpoint (hidden 4096, 32 heads / 8 KV heads, intermediate
 * 14336, vocab 128256, untied; streamed, one tensor in memory at a time; 16 GB of disk for 32 layers), quantizes it
 * in a child process (so quantization buffers are not counted), then measures in a fresh child: session creation,
 * a 256-token prefill (hidden states and logits at the last position) and 16 decode steps, reading VmHWM (peak RSS)
 * and RssAnon / RssFile after each stage, and attributing the file-backed pages of the quantized weight file to
 * what they hold (block scales / zero points that MatMulNBits reads in place, embedding rows that the Gather
 * touched — with this machine's 8 MB read-ahead a few hundred rows page in most of the table — and anything else).
 *
 * `--layers 32` is the real answer (~35 min here: writing 16 GB of random BF16 and quantizing dominate; `--keep`
 * reuses both). Fewer layers (default `1,2`) are quick, and the 32-layer figure is then extrapolated per component:
 * the anonymous part and the scales/zero-point pages grow linearly with layers; embedding pages do not.
 */
import { spawnSync } from 'node:child_process';
import { flag, peakRss } from './common.ts';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngineFromCheckpoint } from '../src/engine/engine.ts';
import type { ComputeDType } from '../src/engine/graph/precision.ts';
import { resolveEngineConfig } from '../src/engine/engine-config.ts';
import { engineEnv } from '../src/cli/env.ts';
import type { QuantStore } from '../src/engine/graph/quant-index.ts';
import { quantizedWeights } from '../src/engine/runtime/quant-store.ts';

const SHAPE = {
  hiddenSize: 4096, numHeads: 32, numKvHeads: 8, headDim: 128, intermediateSize: 14336, vocabSize: 128256,
  tieWordEmbeddings: false, dtype: 'BF16' as const, seed: 1, std: 0.02,
};
const FULL_LAYERS = 32;

const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;

async function child(mode: string, dir: string, dtype: ComputeDType): Promise<void> {
  const ck = await loadCheckpoint(dir);
  const cacheDir = join(dir, '..', 'cache');
  const cfg = resolveEngineConfig({ ...engineEnv(), dtype, cacheDir });
  if (mode === 'quantize') {
    if (cfg.quant) quantizedWeights(ck, cfg.quant.bits, cfg.quant.scheme, cfg.quant.block, cacheDir, cfg.quiet);
    return;
  }
  const store = cfg.quant ? quantizedWeights(ck, cfg.quant.bits, cfg.quant.scheme, cfg.quant.block, cacheDir, cfg.quiet) : null;
  const stages: Stage[] = [];
  const t0 = performance.now();
  const engine = await createEngineFromCheckpoint(ck, { ...engineEnv(), dtype, cacheDir, threads: Number(flag('threads') ?? 0) || undefined });
  const startS = (performance.now() - t0) / 1000;
  stages.push(stage('session', store));
  const prompt = Array.from({ length: 256 }, (_, i) => 1 + ((i * 7919) % 128000));
  const t1 = performance.now();
  await engine.forward([prompt], { hiddenAt: 'last', logitsAt: 'last' });
  const prefillS = (performance.now() - t1) / 1000;
  stages.push(stage('prefill 256', store));
  const t2 = performance.now();
  await engine.generate([prompt.slice(0, 32)], { maxNewTokens: 16, stopIds: [] });
  const decodeTps = 16 / ((performance.now() - t2) / 1000);
  stages.push(stage('decode 16', store));
  await engine.dispose();
  process.stdout.write(JSON.stringify({ stages, startS, prefillTps: 256 / prefillS, decodeTps }) + '\n');
}

interface Measured {
  stages: Stage[];
  startS: number;
  prefillTps: number;
  decodeTps: number;
}

interface Stage {
  name: string;
  /** VmHWM so far */
  peak: number;
  anon: number;
  file: number;
  /** file-backed RSS of the quantized weight file by what the pages hold */
  scalesFile: number;
  embedFile: number;
  otherFile: number;
}

/** Memory now: /proc/self/status plus the weight file's mapped pages from /proc/self/smaps, attributed by offset. */
function stage(name: string, store: QuantStore | null): Stage {
  const status = readFileSync('/proc/self/status', 'utf8');
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN) * 1024;
  const out: Stage = { name, peak: peakRss(), anon: kb('RssAnon'), file: kb('RssFile'), scalesFile: 0, embedFile: 0, otherFile: 0 };
  if (!store) return out;
  const ranges = Object.entries(store.index.tensors).map(([t, e]) => ({ t, a: e.offset, b: e.offset + e.length }));
  let current: { a: number; b: number } | null = null;
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \S+\s*(.*)$/.exec(line);
    if (m) {
      current = m[4] === store.file ? { a: parseInt(m[3]!, 16), b: parseInt(m[3]!, 16) + parseInt(m[2]!, 16) - parseInt(m[1]!, 16) } : null;
      continue;
    }
    const r = /^Rss:\s+(\d+) kB/.exec(line);
    if (!r || !current) continue;
    // the tensor this mapping overlaps most (onnxruntime maps each external tensor on its own, page-aligned)
    const c = current;
    const hit = ranges.reduce<{ t: string; o: number } | null>((bestHit, x) => {
      const o = Math.min(c.b, x.b) - Math.max(c.a, x.a);
      return o > 0 && (!bestHit || o > bestHit.o) ? { t: x.t, o } : bestHit;
    }, null);
    const bytes = Number(r[1]) * 1024;
    if (hit && /\.(scales|zp)$/.test(hit.t)) out.scalesFile += bytes;
    else if (hit?.t === 'model.embed_tokens.weight') out.embedFile += bytes;
    else out.otherFile += bytes;
  }
  return out;
}

async function main(): Promise<void> {
  const dtype = (flag('dtype') ?? 'q4') as ComputeDType;
  const mode = flag('mode');
  if (mode) return child(mode, flag('run')!, dtype);
  const layerCounts = (flag('layers') ?? '1,2').split(',').map(Number);
  const keep = flag('keep');
  const root = keep ?? mkdtempSync(join(tmpdir(), 'safekeep-8b-'));
  const me = fileURLToPath(import.meta.url);
  const rows: { layers: number; r: Measured }[] = [];
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
      const r = JSON.parse(m.stdout.trim().split('\n').at(-1)!) as Measured;
      rows.push({ layers: n, r });
      process.stdout.write(`${dtype}, ${n} layer(s): session start ${r.startS.toFixed(1)} s, prefill 1×256 ${r.prefillTps.toFixed(1)} tok/s, decode ${r.decodeTps.toFixed(2)} tok/s\n`);
      process.stdout.write('| stage | peak RSS (VmHWM) | anonymous | file-backed | of which scales/zp | embedding rows | other weight pages |\n| --- | --- | --- | --- | --- | --- | --- |\n');
      for (const st of r.stages) {
        process.stdout.write(`| ${st.name} | ${gib(st.peak)} (${(st.peak / 1e9).toFixed(2)} GB) | ${gib(st.anon)} | ${gib(st.file)} | ${gib(st.scalesFile)} | ${gib(st.embedFile)} | ${gib(st.otherFile)} |\n`);
      }
    }
    const full = rows.find((x) => x.layers === FULL_LAYERS);
    if (full) {
      const peak = full.r.stages.at(-1)!.peak;
      process.stdout.write(`measured: ${FULL_LAYERS}-layer Llama-3.1-8B shape at ${dtype}: peak RSS ${gib(peak)} = ${(peak / 1e9).toFixed(2)} GB (target ≤ 8 GB: ${peak <= 8e9 ? 'met' : 'NOT met'})\n`);
    } else if (rows.length >= 2) {
      // per component: anonymous memory and the scales/zero-point pages grow with the layers, embedding rows do not
      const [a, b] = [rows[0]!, rows.at(-1)!];
      const [ea, eb] = [a.r.stages.at(-1)!, b.r.stages.at(-1)!];
      const per = (f: (s: Stage) => number) => (f(eb) - f(ea)) / (b.layers - a.layers);
      const at32 = (f: (s: Stage) => number) => f(eb) + (FULL_LAYERS - b.layers) * per(f);
      const anon = at32((s) => s.anon);
      const scales = at32((s) => s.scalesFile);
      const rest = eb.file - eb.scalesFile; // embedding rows, the binary and libraries: not per layer
      const transient = Math.max(0, eb.peak - (eb.anon + eb.file));
      const total = anon + scales + rest + transient;
      process.stdout.write(`extrapolated to ${FULL_LAYERS} layers from ${a.layers} and ${b.layers}: anonymous ${gib(anon)} + scales/zp pages ${gib(scales)} + embedding and other file pages ${gib(rest)} + creation transient ${gib(transient)} ≈ ${gib(total)} (${(total / 1e9).toFixed(2)} GB; target ≤ 8 GB). Run --layers ${FULL_LAYERS} for the measured figure.\n`);
    }
  } finally {
    if (!keep) rmSync(root, { recursive: true, force: true });
  }
}

await main();
