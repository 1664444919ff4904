/**
 * `safekeep quantize --model M --dtype q8|q4 [--scheme sym|asym] [--block 32|64|128] [--report] [--ids IDS.json] [--out REPORT.json]
 *  [--threads N]`
 *
 * Makes (or finds) the block-quantized MatMulNBits weights (default symmetric blocks of 32, 5 / 9 bits per weight) of a checkpoint in the cache ($SAFEKEEP_CACHE/quant/…; the
 * checkpoint folder is never written). `--report`: per-layer error of the quantized model's hidden states against
 * f32 on a reference prompt (all positions): relative L2 error ‖h_q − h‖/‖h‖ and cosine — what directions computed
 * from quantized activations lose. The reference prompt is IDS.json's first sequence, else a fixed English sentence
 * through the model's tokenizer, else token ids 1..32.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs, requireValue, type FlagTable } from '../args.ts';
import { loadCheckpoint } from '../../checkpoint/load.ts';
import { resolveModel } from '../../hub/resolve.ts';
import { engineOptions, readIdsFile } from '../engine-flags.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { createEngineFromCheckpoint } from '../../engine/engine.ts';
import { QUANT_BLOCKS, resolveEngineConfig } from '../../engine/engine-config.ts';
import { quantizedWeights } from '../../engine/runtime/quant-store.ts';
import { engineEnv, hubEnv } from '../env.ts';
import { loadPromptTokenizer } from '../../prompts/tokenizer.ts';
import { SafekeepError } from '../../util/errors.ts';

export const summary = 'quantize a checkpoint to q8/q4 (MatMulNBits, cached) and report per-layer error vs f32';

export const flags: FlagTable = {
  usage: 'quantize --model M --dtype q8|q4 [--scheme sym|asym] [--block 32|64|128] [--report] [--ids IDS.json] [--out REPORT.json] [--threads N]',
  flags: [
    { name: 'model', value: 'M', help: 'checkpoint folder or Hugging Face repo id' },
    { name: 'dtype', value: 'q8|q4', help: 'quantized weight type' },
    { name: 'scheme', value: 'sym|asym', default: 'sym (SAFEKEEP_QUANT_SCHEME)', help: 'quantization scheme' },
    { name: 'block', value: '32|64|128', default: '32 (SAFEKEEP_QUANT_BLOCK)', help: 'weights per block; other commands use the store of SAFEKEEP_QUANT_BLOCK' },
    { name: 'threads', value: 'N', default: 'one per physical core', help: 'intra-op threads' },
    { name: 'ids', value: 'IDS.json', help: 'reference prompt for --report (first sequence)' },
    { name: 'out', value: 'REPORT.json', help: 'write the --report table as JSON' },
    { name: 'report', boolean: true, help: 'per-layer hidden-state error vs f32' },
  ],
  example: 'quantize --model models/planted --dtype q8 --report',
};

const REFERENCE_TEXT = 'The quick brown fox jumps over the lazy dog. Please summarise the attached report in three sentences.';

interface LayerError {
  layer: number;
  /** ‖h_q − h‖ / ‖h‖ over all positions */
  relError: number;
  cosine: number;
}

/** Per-layer error of hidden states `h` [L+1, T, d] against `ref`. */
export function layerErrors(h: Float32Array, ref: Float32Array, layers: number): LayerError[] {
  const n = ref.length / layers;
  return Array.from({ length: layers }, (_, l) => {
    let num = 0;
    let den = 0;
    let dot = 0;
    let na = 0;
    for (let i = l * n; i < (l + 1) * n; i++) {
      const a = h[i]!;
      const b = ref[i]!;
      num += (a - b) ** 2;
      den += b * b;
      dot += a * b;
      na += a * a;
    }
    return { layer: l, relError: den > 0 ? Math.sqrt(num / den) : 0, cosine: na > 0 && den > 0 ? dot / Math.sqrt(na * den) : 1 };
  });
}

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const dtype = requireValue(args, 'dtype');
  if (dtype !== 'q8' && dtype !== 'q4') throw new SafekeepError(`--dtype must be q8 or q4, got '${dtype}'`);
  const schemeFlag = args.values.get('scheme');
  if (schemeFlag !== undefined && schemeFlag !== 'sym' && schemeFlag !== 'asym') throw new SafekeepError(`--scheme must be sym or asym, got '${schemeFlag}'`);
  // --scheme, else SAFEKEEP_QUANT_SCHEME, else the default; the cache root from SAFEKEEP_CACHE (cli/env.ts)
  const blockFlag = args.values.get('block');
  const quantBlock = blockFlag === undefined ? undefined : QUANT_BLOCKS.find((b) => String(b) === blockFlag);
  if (blockFlag !== undefined && quantBlock === undefined) throw new SafekeepError(`--block must be one of ${QUANT_BLOCKS.join(', ')}, got '${blockFlag}'`);
  const cfg = resolveEngineConfig({ ...engineEnv(), dtype, ...(schemeFlag ? { quantScheme: schemeFlag } : {}), ...(quantBlock ? { quantBlock } : {}) });
  const scheme = cfg.quant!.scheme;
  const modelDir = await resolveModel(requireValue(args, 'model'), hubEnv());
  const ckpt = await loadCheckpoint(modelDir);
  const t0 = performance.now();
  const store = quantizedWeights(ckpt, cfg.quant!.bits, scheme, cfg.quant!.block, cfg.cacheDir, cfg.quiet);
  const mb = statSync(store.file).size / 2 ** 20;
  process.stdout.write(`${dtype} ${scheme} block ${store.index.block}: ${store.cached ? 'cached' : `made in ${((performance.now() - t0) / 1000).toFixed(1)} s`} → ${store.file} (${mb.toFixed(1)} MiB)\n`);
  if (!args.booleans.has('report')) return 0;

  let ids: number[];
  if (args.values.has('ids')) ids = readIdsFile(args.values.get('ids')!)[0]!;
  else if (existsSync(join(modelDir, 'tokenizer.json'))) ids = (await loadPromptTokenizer(modelDir)).encode(REFERENCE_TEXT);
  else ids = Array.from({ length: 32 }, (_, i) => (i + 1) % ckpt.config.vocabSize);
  const base = engineOptions({ ...args, values: new Map([...args.values].filter(([k]) => k === 'threads')) });
  const f32 = await createEngineFromCheckpoint(ckpt, { ...base, dtype: 'f32' });
  const [ref] = await f32.forward([ids], { hiddenAt: 'all', logitsAt: 'none' });
  await f32.dispose();
  const q = await createEngineFromCheckpoint(ckpt, { ...base, dtype, quantScheme: scheme, quantBlock: cfg.quant!.block });
  const [res] = await q.forward([ids], { hiddenAt: 'all', logitsAt: 'none' });
  await q.dispose();
  const errs = layerErrors(res!.hidden, ref!.hidden, ckpt.config.numLayers + 1);
  process.stdout.write(`hidden-state error vs f32 on a ${ids.length}-token reference prompt (all positions)\nlayer  rel.error  cosine\n`);
  for (const e of errs) process.stdout.write(`${String(e.layer).padStart(5)}  ${e.relError.toFixed(5).padStart(9)}  ${e.cosine.toFixed(6)}\n`);
  const out = args.values.get('out');
  if (out) {
    writeFileAtomic(out, JSON.stringify({ model: modelDir, dtype, scheme, block: store.index.block, promptTokens: ids.length, layers: errs }, null, 1) + '\n');
    process.stdout.write(`report → ${out}\n`);
  }
  return 0;
}
