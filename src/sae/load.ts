/**
 * `loadSae(path)`: a sparse autoencoder from disk, in any of the layouts the paper's models' dictionaries are
 * published in (as SAELens's loaders read them: sae_lens/loading/pretrained_sae_loaders.py,
 * jbloomAus/SAELens @ 91ca16ccd0684e4dd6323cd4f23ded734339ec54):
 * - SAELens folder: cfg.json + sae_weights.safetensors (W_enc [d_in, d_sae], b_enc, W_dec [d_sae, d_in], b_dec,
 *   threshold for jumprelu) — `sae_lens_disk_loader`;
 * - Gemma Scope: params.npz (Gemma 2) or params.safetensors (Gemma Scope 2) with w_enc, w_dec, b_enc, b_dec,
 *   threshold — `gemma_2_sae_huggingface_loader`: jumprelu, apply_b_dec_to_input false; the hook comes from the path
 *   (`layer_N` and res / mlp), or `hookName`;
 * - Llama Scope: hyperparams.json + checkpoints/final.safetensors (encoder.weight [d_sae, d_in], decoder.weight
 *   [d_in, d_sae], biases) — `llama_scope_sae_huggingface_loader`, with the norm factor s = √d_model /
 *   dataset_average_activation_norm.in folded as `SAE.from_pretrained` folds its release table's
 *   norm_scaling_factor (W_enc·s, W_dec/s, b_dec/s) and the scalar threshold scaled by s as that loader does.
 * Pickles (Goodfire's .pth, any torch.save file) are never unpickled here: `PTH_CONVERSION` converts one to a SAELens
 * folder in Python.
 *
 * Weights stay in the dtype they are stored in (bf16 / f16 as 16-bit patterns: half the memory of f32), except that
 * a cfg.json dtype below the stored one rounds them to it, as SAELens's `.to(dtype)` does. Computation is f32.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { readSafetensorsHeader } from '../checkpoint/safetensors.ts';
import { readTensorBytes } from '../checkpoint/read.ts';
import { parseJsonBounded } from '../util/json-bounded.ts';
import { SafekeepError } from '../util/errors.ts';
import { readNpz } from './npz.ts';
import { parseSaeCfg } from './config.ts';
import { castStored, roundTo, toF32 } from './matrix.ts';
import type { Sae, SaeConfig, StoredDtype, StoredMatrix } from './types.ts';

/** One tensor of a weight file, its bytes read on demand. */
interface RawTensor {
  name: string;
  dtype: StoredDtype | 'F64';
  shape: number[];
  bytes(): Uint8Array;
}

/** How a pickle becomes a SAELens folder (Goodfire's layout: encoder_linear / decoder_linear, ReLU, no b_dec on input). */
export const PTH_CONVERSION = `python -c "import sys,json,os,torch;from safetensors.torch import save_file;s=torch.load(sys.argv[1],map_location='cpu',weights_only=True);o=sys.argv[2];os.makedirs(o,exist_ok=True);e=s['encoder_linear.weight'];save_file({'W_enc':e.T.contiguous(),'b_enc':s['encoder_linear.bias'],'W_dec':s['decoder_linear.weight'].T.contiguous(),'b_dec':s['decoder_linear.bias']},o+'/sae_weights.safetensors');json.dump({'architecture':'standard','d_in':e.shape[1],'d_sae':e.shape[0],'dtype':str(e.dtype).split('.')[1],'apply_b_dec_to_input':False,'hook_name':sys.argv[3]},open(o+'/cfg.json','w'))" SAE.pth OUT_DIR blocks.19.hook_resid_post`;

const PICKLE = /\.(pth|pt|bin|pkl|pickle|ckpt)$/i;

function safetensorsTensors(file: string): Map<string, RawTensor> {
  const h = readSafetensorsHeader(file);
  return new Map(h.entries.map((e) => {
    if (e.dtype !== 'F32' && e.dtype !== 'BF16' && e.dtype !== 'F16' && e.dtype !== 'F64') throw new SafekeepError(`${file}: tensor ${e.name} is ${e.dtype}; SAE weights are floats`);
    return [e.name, { name: e.name, dtype: e.dtype, shape: e.shape, bytes: () => readTensorBytes(e as Parameters<typeof readTensorBytes>[0]) }];
  }));
}

function npzTensors(file: string): Map<string, RawTensor> {
  return new Map(readNpz(file).map((a) => [a.name, a]));
}

/** The raw tensor as stored dtype data (F64 → f32, rounded as torch's `.to(float32)`). */
function storedData(t: RawTensor): { dtype: StoredDtype; data: Float32Array | Uint16Array } {
  const b = t.bytes();
  if (t.dtype === 'F64') return { dtype: 'F32', data: Float32Array.from(new Float64Array(b.buffer, b.byteOffset, b.byteLength / 8)) };
  if (t.dtype === 'F32') return { dtype: 'F32', data: new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4) };
  return { dtype: t.dtype, data: new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2) };
}

function need(tensors: Map<string, RawTensor>, name: string, file: string): RawTensor {
  const t = tensors.get(name);
  if (!t) throw new SafekeepError(`${file}: no tensor '${name}' (has ${[...tensors.keys()].join(', ') || 'none'})`);
  return t;
}

function checkShape(t: RawTensor, shape: number[], file: string, as: string): void {
  if (t.shape.join() !== shape.join()) throw new SafekeepError(`${file}: ${t.name} has shape [${t.shape}], ${as} needs [${shape}]`);
}

/** A [rows, cols] matrix from a tensor stored as [rows, cols], or as [cols, rows] when `transposed`; cast to `dtype` if lower. */
function matrix(t: RawTensor, rows: number, cols: number, transposed: boolean, dtype: StoredDtype, file: string, as: string): StoredMatrix {
  checkShape(t, transposed ? [cols, rows] : [rows, cols], file, as);
  let { dtype: stored, data } = storedData(t);
  if (transposed) {
    const out = stored === 'F32' ? new Float32Array(rows * cols) : new Uint16Array(rows * cols);
    for (let c = 0; c < cols; c++) for (let r = 0; r < rows; r++) out[r * cols + c] = data[c * rows + r]!;
    data = out;
  }
  const m: StoredMatrix = { dtype: stored, rows, cols, data };
  return castTo(m, dtype);
}

/** SAELens casts every weight to the cfg dtype; a lower one is applied here (upcasts are exact and are not stored). */
function castTo(m: StoredMatrix, dtype: StoredDtype): StoredMatrix {
  return dtype === 'F32' ? m : castStored(m, dtype);
}

/** A bias or threshold as f32, rounded to the cfg dtype as SAELens's cast does. [n] */
function vector(t: RawTensor, n: number, dtype: StoredDtype, file: string, as: string): Float32Array {
  checkShape(t, [n], file, as);
  return roundTo(Float32Array.from(toF32(storedData(t))), dtype);
}

const bytesOf = (m: StoredMatrix): number => m.data.byteLength;

function assemble(config: SaeConfig, tensors: Map<string, RawTensor>, names: { W_enc: string; W_dec: string; b_enc: string; b_dec: string; threshold: string | Float32Array }, file: string, transposed = false): Sae {
  const { dIn, dSae, dtype } = config;
  const W_enc = matrix(need(tensors, names.W_enc, file), dIn, dSae, transposed, dtype, file, `W_enc [d_in, d_sae]${transposed ? ' transposed' : ''}`);
  const W_dec = matrix(need(tensors, names.W_dec, file), dSae, dIn, transposed, dtype, file, `W_dec [d_sae, d_in]${transposed ? ' transposed' : ''}`);
  const b_enc = vector(need(tensors, names.b_enc, file), dSae, dtype, file, 'b_enc [d_sae]');
  const b_dec = vector(need(tensors, names.b_dec, file), dIn, dtype, file, 'b_dec [d_in]');
  const thr = names.threshold;
  const threshold = config.architecture !== 'jumprelu' ? null : typeof thr !== 'string' ? thr
    : tensors.has(thr) ? vector(tensors.get(thr)!, dSae, dtype, file, 'threshold [d_sae]') : null;
  if (config.architecture === 'jumprelu' && !threshold) throw new SafekeepError(`${file}: a jumprelu SAE needs a '${names.threshold}' tensor`);
  return { config, W_enc, W_dec, b_enc, b_dec, threshold, bytes: bytesOf(W_enc) + bytesOf(W_dec) + 4 * (2 * dSae + dIn) };
}

function readJson(file: string): unknown {
  const st = statSync(file);
  if (!st.isFile() || st.size > 4 << 20) throw new SafekeepError(`${file}: not a small JSON file`);
  return parseJsonBounded(readFileSync(file, 'utf8'), file);
}

function loadSaeLens(dir: string): Sae {
  const cfgFile = join(dir, 'cfg.json');
  const config = parseSaeCfg(readJson(cfgFile), cfgFile, dir);
  const weights = join(dir, 'sae_weights.safetensors');
  if (!existsSync(weights)) throw new SafekeepError(`${dir}: cfg.json without sae_weights.safetensors`);
  const tensors = safetensorsTensors(weights);
  const known = new Set(['W_enc', 'W_dec', 'b_enc', 'b_dec', 'threshold']);
  for (const name of tensors.keys()) {
    // a tensor SAELens would load into the module (e.g. a finetuning scale) changes the math
    if (!known.has(name) && name !== 'scaling_factor') throw new SafekeepError(`${weights}: tensor '${name}' is not read (W_enc, W_dec, b_enc, b_dec, threshold)`);
  }
  const scale = tensors.get('scaling_factor');
  if (scale && toF32(storedData(scale)).some((v) => v !== 1)) {
    throw new SafekeepError(`${weights}: a scaling_factor other than 1 (a finetuning scale) is not implemented`);
  }
  if (config.architecture !== 'jumprelu' && tensors.has('threshold')) throw new SafekeepError(`${weights}: a threshold tensor in a ${config.architecture} SAE`);
  return assemble(config, tensors, { W_enc: 'W_enc', W_dec: 'W_dec', b_enc: 'b_enc', b_dec: 'b_dec', threshold: 'threshold' }, weights);
}

/**
 * The TransformerLens hook a Gemma Scope path names: the repository (`gemma-scope-2b-pt-res`, `-mlp`, `-att`) or
 * Gemma Scope 2's folder (`resid_post_all/layer_7_width_16k_l0_big`), and `layer_N`; null when it names none.
 */
export function gemmaScopeHook(path: string): string | null {
  const layer = /layer_(\d+)/.exec(path)?.[1];
  if (layer === undefined) return null;
  const site = (re: RegExp) => re.test(path.replace(/\\/g, '/'));
  if (site(/-att(\/|$|-)|(^|\/)attn_out/)) return null;
  if (site(/-res(\/|$|-)|(^|\/)resid_post/)) return `blocks.${layer}.hook_resid_post`;
  if (site(/-mlp(\/|$|-)|(^|\/)mlp_out/)) return `blocks.${layer}.hook_mlp_out`;
  return null;
}

function loadGemmaScope(file: string, hookName: string | null): Sae {
  if (/embedding/.test(file)) throw new SafekeepError(`${file}: Gemma Scope's embedding SAEs (rescaled by √d_in in SAELens) are not read`);
  if (/-att(\/|$|-)/.test(file) && !hookName) throw new SafekeepError(`${file}: Gemma Scope's attention SAEs read hook_z (per-head reshaping), which is not implemented`);
  const tensors = file.endsWith('.npz') ? npzTensors(file) : safetensorsTensors(file);
  const w = need(tensors, 'w_enc', file);
  if (w.shape.length !== 2) throw new SafekeepError(`${file}: w_enc has shape [${w.shape}], not [d_in, d_sae]`);
  for (const name of tensors.keys()) if (!['w_enc', 'w_dec', 'b_enc', 'b_dec', 'threshold'].includes(name)) throw new SafekeepError(`${file}: array '${name}' is not read (w_enc, w_dec, b_enc, b_dec, threshold)`);
  const config: SaeConfig = {
    architecture: 'jumprelu', dIn: w.shape[0]!, dSae: w.shape[1]!, k: null, rescaleActsByDecoderNorm: false,
    applyBDecToInput: false, normalizeActivations: 'none', hookName: hookName ?? gemmaScopeHook(file), dtype: 'F32',
    layout: 'gemma-scope', source: file,
  };
  return assemble(config, tensors, { W_enc: 'w_enc', W_dec: 'w_dec', b_enc: 'b_enc', b_dec: 'b_dec', threshold: 'threshold' }, file);
}

function loadLlamaScope(dir: string): Sae {
  const hpFile = join(dir, 'hyperparams.json');
  const hp = readJson(hpFile) as Record<string, unknown>;
  const num = (k: string): number => {
    const v = hp[k];
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new SafekeepError(`${hpFile}: '${k}' must be a number`);
    return v;
  };
  const avg = hp.dataset_average_activation_norm as { in?: unknown } | undefined;
  if (typeof avg?.in !== 'number' || !(avg.in > 0)) throw new SafekeepError(`${hpFile}: 'dataset_average_activation_norm.in' must be a positive number`);
  if (hp.apply_decoder_bias_to_pre_encoder === true) throw new SafekeepError(`${hpFile}: apply_decoder_bias_to_pre_encoder true is not implemented (SAELens reads Llama Scope with it off)`);
  if (hp.act_fn !== undefined && hp.act_fn !== 'jumprelu') throw new SafekeepError(`${hpFile}: act_fn '${String(hp.act_fn)}' is not implemented (jumprelu)`);
  const dIn = num('d_model');
  const dSae = num('d_sae');
  const s = Math.sqrt(dIn) / avg.in;
  const weights = [join(dir, 'checkpoints', 'final.safetensors'), join(dir, 'final.safetensors')].find((f) => existsSync(f));
  if (!weights) throw new SafekeepError(`${dir}: hyperparams.json without checkpoints/final.safetensors`);
  const tensors = safetensorsTensors(weights);
  const hookName = typeof hp.hook_point_in === 'string' ? hp.hook_point_in : null;
  if (typeof hp.hook_point_out === 'string' && hp.hook_point_out !== hookName) throw new SafekeepError(`${hpFile}: hook_point_out differs from hook_point_in (a transcoder), which is not read`);
  const config: SaeConfig = {
    architecture: 'jumprelu', dIn, dSae, k: null, rescaleActsByDecoderNorm: false, applyBDecToInput: false,
    normalizeActivations: 'none', hookName, dtype: 'BF16', layout: 'llama-scope', source: dir,
  };
  // torch.ones(d_sae, bf16) * (jump_relu_threshold · s)
  const threshold = roundTo(new Float32Array(dSae).fill(num('jump_relu_threshold') * s), 'BF16');
  // SAELens's cfg dtype for Llama Scope is bfloat16: weights are rounded to it, then the fold runs in bf16 too
  const sae = assemble(config, tensors, { W_enc: 'encoder.weight', W_dec: 'decoder.weight', b_enc: 'encoder.bias', b_dec: 'decoder.bias', threshold }, weights, true);
  return foldNormScale(sae, s);
}

/** SAELens `fold_activation_norm_scaling_factor` in the weights' dtype: W_enc·s, W_dec/s, b_dec/s. */
function foldNormScale(sae: Sae, s: number): Sae {
  const f = Math.fround(s);
  const scale = (m: StoredMatrix, by: (v: number) => number): StoredMatrix => castTo({ ...m, dtype: 'F32', data: Float32Array.from(toF32(m), by) }, m.dtype);
  return {
    ...sae,
    W_enc: scale(sae.W_enc, (v) => v * f),
    W_dec: scale(sae.W_dec, (v) => v / f),
    b_dec: roundTo(sae.b_dec.map((v) => v / f), sae.config.dtype),
  };
}

export interface LoadSaeOptions {
  /** the hook for layouts whose files do not name one (Gemma Scope outside its Hub paths) */
  hookName?: string;
}

/** The SAE at `path`: a folder in one of the layouts above, or a params.npz / params.safetensors file. */
export function loadSae(path: string, opts: LoadSaeOptions = {}): Sae {
  if (PICKLE.test(path)) throw new SafekeepError(`${path}: a pickle; safekeep never unpickles — convert it to a SAELens folder first: ${PTH_CONVERSION}`);
  if (!existsSync(path)) throw new SafekeepError(`${path}: no such SAE folder or file`);
  let sae: Sae;
  if (statSync(path).isFile()) {
    const name = basename(path);
    if (name === 'cfg.json' || name === 'sae_weights.safetensors') return loadSae(dirname(path), opts);
    if (name === 'hyperparams.json') return loadSae(dirname(path), opts);
    if (!/\.(npz|safetensors)$/.test(name)) throw new SafekeepError(`${path}: not an SAE file (cfg.json + sae_weights.safetensors, params.npz, params.safetensors or hyperparams.json)`);
    sae = loadGemmaScope(path, opts.hookName ?? null);
  } else if (existsSync(join(path, 'cfg.json'))) sae = loadSaeLens(path);
  else if (existsSync(join(path, 'hyperparams.json'))) sae = loadLlamaScope(path);
  else if (existsSync(join(path, 'params.npz'))) sae = loadGemmaScope(join(path, 'params.npz'), opts.hookName ?? null);
  else if (existsSync(join(path, 'params.safetensors'))) sae = loadGemmaScope(join(path, 'params.safetensors'), opts.hookName ?? null);
  else throw new SafekeepError(`${path}: no SAE here (expected cfg.json + sae_weights.safetensors, params.npz, params.safetensors or hyperparams.json)`);
  return opts.hookName ? { ...sae, config: { ...sae.config, hookName: opts.hookName } } : sae;
}
