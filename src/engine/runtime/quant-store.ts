/**
 * Quantized weights, made once per checkpoint and scheme and cached beside the graph cache (never in the user's
 * checkpoint folder): `<cacheDir>/quant/<key>/weights.bin` + `index.json`, key = sha256 of (QUANT_VERSION,
 * config hash, each weight file's real path + size + mtime, bits, scheme, block).
 *
 * Every linear layer is quantized (quant.ts): q/k/v as one row-concatenated `self_attn.qkv_proj.weight`, gate/up as
 * `mlp.gate_up_proj.weight` (row concatenation commutes with row-wise block quantization, so this equals quantizing
 * each and concatenating), o/down, and `lm_head.weight` (the embedding's copy when tied). Everything else (embedding
 * rows for the Gather, norms, biases) is copied byte for byte in its stored dtype, so the session reads all its
 * external data from this one folder. The folder is written under a unique temp name and renamed: complete or
 * absent. Two processes quantizing the same checkpoint at once each write their own temp folder; the first rename
 * wins and the other keeps the published copy instead of deleting it under a reader's feet.
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { readTensorBytes, readTensorF32 } from '../../checkpoint/read.ts';
import { layerWeights, lmHeadName, tensorName } from '../../checkpoint/tensors.ts';
import type { Checkpoint } from '../../checkpoint/types.ts';
import { tempPathFor, writeFileAtomic } from '../../util/atomic.ts';
import { sha256Hex } from '../../util/hash.ts';
import type { QuantBlock, QuantScheme } from '../graph/config.ts';
import type { QuantIndex, QuantStore, StoredTensor } from '../graph/quant-index.ts';
import { quantizeBlockwise, type QuantBits } from './quant.ts';
import { resolveWeightFiles, weightFilesStamp } from './weight-files.ts';

const QUANT_VERSION = 2;

/** Groups of HF weights quantized as one row-concatenated matrix: stored name → parts */
function linearGroups(ckpt: Checkpoint): Map<string, string[]> {
  const groups = new Map<string, string[]>();
  for (let l = 0; l < ckpt.config.numLayers; l++) {
    const w = layerWeights(ckpt.config, l);
    groups.set(tensorName('qkv', l), [w.q, w.k, w.v]);
    groups.set(w.o, [w.o]);
    groups.set(tensorName('gateUp', l), [w.gate, w.up]);
    groups.set(w.down, [w.down]);
  }
  groups.set(tensorName('lmHead'), [lmHeadName(ckpt.config)]);
  return groups;
}

function quantKey(ckpt: Checkpoint, bits: QuantBits, scheme: QuantScheme, block: QuantBlock): string {
  const { realFiles } = resolveWeightFiles(ckpt);
  return sha256Hex(`safekeep-quant v${QUANT_VERSION}\n${ckpt.configHash}\n${bits}\n${scheme}\n${block}\n` + weightFilesStamp(realFiles)).slice(0, 32);
}

/** The quantized weights of `ckpt` from the cache root `cacheDir`, or made now (progress on stderr unless quiet). */
export function quantizedWeights(ckpt: Checkpoint, bits: QuantBits, scheme: QuantScheme, block: QuantBlock, cacheDir: string, quiet = false): QuantStore {
  const dir = join(cacheDir, 'quant', quantKey(ckpt, bits, scheme, block));
  const file = join(dir, 'weights.bin');
  const indexPath = join(dir, 'index.json');
  if (existsSync(indexPath) && existsSync(file)) {
    return { dir, file, index: JSON.parse(readFileSync(indexPath, 'utf8')) as QuantIndex, cached: true };
  }
  const tmp = tempPathFor(dir);
  mkdirSync(tmp, { recursive: true });
  const fd = openSync(join(tmp, 'weights.bin'), 'w');
  const index: QuantIndex = { version: QUANT_VERSION, bits, scheme, block, tensors: {}, linears: {} };
  let pos = 0;
  const put = (name: string, data: Uint8Array, dtype: StoredTensor['dtype'], shape: number[]): void => {
    const pad = (64 - (pos % 64)) % 64;
    if (pad) { writeFully(fd, new Uint8Array(pad)); pos += pad; }
    writeFully(fd, data);
    index.tensors[name] = { offset: pos, length: data.byteLength, dtype, shape };
    pos += data.byteLength;
  };
  const t0 = Date.now();
  try {
    const groups = linearGroups(ckpt);
    const inGroups = new Set([...groups.values()].flat());
    let done = 0;
    for (const [name, parts] of groups) {
      const entries = parts.map((p) => {
        const e = ckpt.tensors.get(p);
        if (!e) throw new Error(`quantize: checkpoint has no tensor ${p}`);
        return e;
      });
      const k = entries[0]!.shape[1]!;
      const n = entries.reduce((s, e) => s + e.shape[0]!, 0);
      const w = new Float32Array(n * k);
      let row = 0;
      for (const e of entries) { w.set(readTensorF32(e), row * k); row += e.shape[0]!; }
      const q = quantizeBlockwise(w, n, k, bits, block, scheme === 'sym');
      put(`${name}.codes`, q.codes, 'U8', [n, q.kBlocks, (block * bits) / 8]);
      put(`${name}.scales`, new Uint8Array(q.scales.buffer), 'F32', [n, q.kBlocks]);
      if (q.zeroPoints) put(`${name}.zp`, q.zeroPoints, 'U8', [q.zeroPoints.length]);
      index.linears[name] = [n, k];
      done++;
      if (!quiet && (done % 16 === 0 || done === groups.size)) {
        process.stderr.write(`\rquantize q${bits} ${scheme}: ${done}/${groups.size} matrices, ${((Date.now() - t0) / 1000).toFixed(0)} s`);
      }
    }
    if (!quiet) process.stderr.write('\n');
    for (const e of ckpt.tensors.values()) {
      if (inGroups.has(e.name) && e.name !== tensorName('embed')) continue;
      put(e.name, readTensorBytes(e), e.dtype, e.shape);
    }
    closeSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
  writeFileAtomic(join(tmp, 'index.json'), JSON.stringify(index));
  if (!publish(tmp, dir)) return { dir, file, index: JSON.parse(readFileSync(indexPath, 'utf8')) as QuantIndex, cached: true };
  return { dir, file, index, cached: false };
}

/** writeSync may write fewer bytes than asked (large buffers): loop until all of `data` is written. */
function writeFully(fd: number, data: Uint8Array): void {
  for (let done = 0; done < data.byteLength;) done += writeSync(fd, data, done, Math.min(data.byteLength - done, 1 << 30));
}

/**
 * Renames the complete folder `tmp` to `dir`. false: another process published `dir` first (a rename onto a
 * non-empty folder fails), so `tmp` is dropped and theirs is used. A `dir` without index.json (an interrupted older
 * layout) is replaced.
 */
function publish(tmp: string, dir: string): boolean {
  try {
    renameSync(tmp, dir);
    return true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw e;
  }
  if (existsSync(join(dir, 'index.json')) && existsSync(join(dir, 'weights.bin'))) {
    rmSync(tmp, { recursive: true, force: true });
    return false;
  }
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return true;
}
