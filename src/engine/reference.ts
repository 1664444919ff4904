/**
 * The Float64 oracle: a plain, unoptimised forward pass of the Llama-family decoder, written to be read next to
 * the math in ../shared/fixtures/hf-reference/README.md. Tests compare the ONNX engine with it; it is never used
 * for real work. One sequence at a time, no padding (positions are 0..T-1, continued by the KV cache).
 *
 * Per token x (hidden[0] = embed_tokens[id]); for each decoder block l = 0..L-1:
 *   h = RMSNorm(x; input_layernorm)                              RMSNorm(x; w) = w ⊙ x / sqrt(mean(x²) + eps)
 *   q, k, v = h·Wqᵀ (+bq), h·Wkᵀ (+bk), h·Wvᵀ (+bv)              heads = contiguous head_dim-wide slices
 *   (qwen3) q_h, k_h = RMSNorm(q_h; q_norm), RMSNorm(k_h; k_norm)
 *   q_h, k_h = RoPE(·, position)                                 rotate-half form, inv_freq by RoPE type (below),
 *                                                                cos/sin × yarn's attention factor
 *   attn_h = softmax(q_h·K_{h/g}ᵀ / sqrt(head_dim) + causal) · V_{h/g}        g = heads / kv_heads (GQA); on a
 *                                                                sliding-window layer only keys at positions
 *                                                                > position − W
 * inv_freq_j = θ^(−2j/hd), j < hd/2, then by type (written from the formulas of transformers' modeling_rope_utils,
 * independently of rope.ts): linear ÷ factor; llama3 by wavelength band (÷ factor above the low-frequency wavelength,
 * kept below the high-frequency one, interpolated between); yarn blends f/factor and f by a clamped linear ramp over
 * the dimension index between the correction dims of beta_fast and beta_slow; dynamic NTK uses
 * θ' = θ·(factor·n/max_pos − factor + 1)^(hd/(hd−2)) for a call whose last position + 1 is n > max_pos.
 *   x = x + concat(attn_h)·Woᵀ
 *   h = RMSNorm(x; post_attention_layernorm);  x = x + (silu(h·Wgᵀ) ⊙ h·Wuᵀ)·Wdᵀ
 *   hidden[l+1] = x (+ steering row l+1)                          the residual stream, before any final norm
 * logits = RMSNorm(hidden[L]; norm) · lm_headᵀ (tied: embed_tokens).
 */
import { readTensorF32 } from '../checkpoint/read.ts';
import { roundToBf16 } from '../checkpoint/dtype.ts';
import { layerWeights, tensorName, type LayerWeights } from '../checkpoint/tensors.ts';
import type { Checkpoint, ModelConfig } from '../checkpoint/types.ts';
import { SafekeepError } from '../util/errors.ts';
import { hookName, parseHookName, resolveHookNames, type HookPoint } from './graph/hooks.ts';
import { argmax } from './run/argmax.ts';
import type { HookIntervention, Intervention, Steering } from './types.ts';

/** Weights upcast to f64, by HF name. Cached per checkpoint object and weight precision. */
type Weights = Map<string, Float64Array>;
const weightCache = new WeakMap<Checkpoint, Map<WeightPrecision, Weights>>();

/**
 * 'stored': the checkpoint's values, exactly upcast. 'bf16': every weight rounded to BF16 (RNE) first, i.e. what
 * the engine's `--dtype bf16` computes with (a no-op for a BF16 checkpoint).
 */
type WeightPrecision = 'stored' | 'bf16';

function weights(ckpt: Checkpoint, precision: WeightPrecision = 'stored'): Weights {
  let byPrecision = weightCache.get(ckpt);
  if (!byPrecision) { byPrecision = new Map(); weightCache.set(ckpt, byPrecision); }
  let w = byPrecision.get(precision);
  if (!w) {
    w = new Map();
    for (const [name, e] of ckpt.tensors) {
      const x = readTensorF32(e);
      w.set(name, Float64Array.from(precision === 'bf16' ? roundToBf16(x) : x));
    }
    byPrecision.set(precision, w);
  }
  return w;
}

function W(w: Weights, name: string): Float64Array {
  const t = w.get(name);
  if (!t) throw new Error(`reference: tensor ${name} not loaded`);
  return t;
}

/** KV cache: per layer, per position, the roped keys / values of all KV heads. [L][T] of [kv_heads · head_dim] */
interface ReferenceKV {
  keys: Float64Array[][];
  values: Float64Array[][];
  /** number of cached positions */
  length: number;
}

interface ReferenceForwardOptions {
  /** hidden[layer] -= alpha · v/|v| (engine convention) */
  steer?: Steering;
  /** row l is added to hidden[l]. [L+1, d_model] */
  steerMatrix?: Float32Array | Float64Array;
  /** add / ablate / clamp (types.ts), every position of this call */
  interventions?: Intervention[];
  /** cache from a previous call: `ids` continue that sequence */
  past?: ReferenceKV;
  /** default 'stored' */
  weights?: WeightPrecision;
  /** hook points (graph/hooks.ts names or globs) whose values are returned in `hooks` */
  capture?: readonly string[];
  /** edits at hook points, applied here by their definitions (run/hooked.ts `HookIntervention`) */
  hookEdits?: readonly HookIntervention[];
}

interface ReferenceForwardResult {
  /** captured hook points: [T, d] / z [T, H, hd] / pattern [H, T, S] with S = cached + T keys (0 where masked) */
  hooks: Map<string, Float64Array>;
  /** [L+1, T, d_model], hidden[L] before the final norm */
  hidden: Float64Array;
  /** [T, vocab] */
  logits: Float64Array;
  /** cache covering past + these tokens */
  kv: ReferenceKV;
}

// ---- small pure functions -------------------------------------------------------------------------------------

/** y = W x (+ b), W [out, in] row-major. */
export function linear(Wm: Float64Array, x: Float64Array, b?: Float64Array): Float64Array {
  const n = x.length;
  const out = Wm.length / n;
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = b ? b[o]! : 0;
    const row = o * n;
    for (let i = 0; i < n; i++) s += Wm[row + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

/** w ⊙ x / sqrt(mean(x²) + eps) */
export function rmsNorm(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  let ss = 0;
  for (let i = 0; i < x.length; i++) ss += x[i]! * x[i]!;
  const r = 1 / Math.sqrt(ss / x.length + eps);
  const y = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) y[i] = w[i]! * x[i]! * r;
  return y;
}

/** RoPE, rotate-half form, on one head vector [head_dim] in place: x·cos + rotate_half(x)·sin (cos, sin × scale). */
function ropeInPlace(x: Float64Array, invFreq: Float64Array, position: number, scale = 1): void {
  const half = invFreq.length;
  for (let j = 0; j < half; j++) {
    const a = position * invFreq[j]!;
    const c = Math.cos(a) * scale;
    const s = Math.sin(a) * scale;
    const x1 = x[j]!;
    const x2 = x[j + half]!;
    x[j] = x1 * c - x2 * s;
    x[j + half] = x2 * c + x1 * s;
  }
}

/**
 * inv_freq [head_dim/2] of a call whose last position + 1 is `seqLength`, and the factor on cos/sin. The oracle's own
 * implementation of the RoPE types (tests compare it with transformers' fixtures and with rope.ts).
 */
export function referenceRope(c: ModelConfig, seqLength: number): { invFreq: Float64Array; scale: number } {
  const hd = c.headDim;
  const r = c.rope;
  const theta = r.type === 'dynamic' && seqLength > r.maxPositionEmbeddings
    ? c.ropeTheta * Math.pow(r.factor * seqLength / r.maxPositionEmbeddings - r.factor + 1, hd / (hd - 2))
    : c.ropeTheta;
  const invFreq = Float64Array.from({ length: hd / 2 }, (_, j) => Math.pow(theta, -(2 * j) / hd));
  let scale = 1;
  if (r.type === 'linear') invFreq.forEach((f, j) => { invFreq[j] = f / r.factor; });
  else if (r.type === 'llama3') {
    invFreq.forEach((f, j) => {
      const wavelength = 2 * Math.PI / f;
      const low = r.originalMaxPositionEmbeddings / r.lowFreqFactor; // longest wavelength kept partly
      const high = r.originalMaxPositionEmbeddings / r.highFreqFactor; // shorter than this: unchanged
      if (wavelength > low) invFreq[j] = f / r.factor;
      else if (wavelength >= high) {
        const smooth = (r.originalMaxPositionEmbeddings / wavelength - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor);
        invFreq[j] = smooth * f + (1 - smooth) * f / r.factor;
      }
    });
  } else if (r.type === 'yarn') {
    // dimension (of hd) at which a frequency makes `rotations` turns over the original context
    const dimAt = (rotations: number) => hd * Math.log(r.originalMaxPositionEmbeddings / (rotations * 2 * Math.PI)) / (2 * Math.log(c.ropeTheta));
    let lo = dimAt(r.betaFast);
    let hi = dimAt(r.betaSlow);
    if (r.truncate) { lo = Math.floor(lo); hi = Math.ceil(hi); }
    lo = Math.max(lo, 0);
    hi = Math.min(hi, hd - 1);
    if (lo === hi) hi += 0.001;
    invFreq.forEach((f, j) => {
      const ramp = Math.min(1, Math.max(0, (j - lo) / (hi - lo))); // 0: keep f (extrapolate), 1: f / factor
      invFreq[j] = ramp * (f / r.factor) + (1 - ramp) * f;
    });
    scale = r.attentionFactor;
  }
  return { invFreq, scale };
}

export function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/** Steering rows [L+1][d] (null = none) from the two option forms. */
function steeringRows(c: ModelConfig, opts: ReferenceForwardOptions): (Float64Array | null)[] {
  const rows: (Float64Array | null)[] = new Array(c.numLayers + 1).fill(null);
  const d = c.hiddenSize;
  if (opts.steerMatrix) {
    if (opts.steerMatrix.length !== (c.numLayers + 1) * d) throw new SafekeepError(`steering matrix must be [${c.numLayers + 1}, ${d}]`);
    for (let l = 0; l <= c.numLayers; l++) {
      const r = Float64Array.from(opts.steerMatrix.subarray(l * d, (l + 1) * d));
      if (r.some((v) => v !== 0)) rows[l] = r;
    }
  }
  if (opts.steer) {
    const { layer, vector, alpha } = opts.steer;
    if (!Number.isInteger(layer) || layer < 0 || layer > c.numLayers) throw new SafekeepError(`steering layer ${layer} out of range 0..${c.numLayers}`);
    if (vector.length !== d) throw new SafekeepError(`steering vector has ${vector.length} values, d_model is ${d}`);
    let n = 0;
    for (let i = 0; i < d; i++) n += Number(vector[i]) ** 2;
    n = Math.sqrt(n);
    if (n === 0) throw new SafekeepError('steering vector is zero');
    const r = rows[layer] ?? new Float64Array(d);
    for (let i = 0; i < d; i++) r[i] = r[i]! - (alpha * Number(vector[i])) / n;
    rows[layer] = r;
  }
  return rows;
}

/** r / |r| in Float64 */
function unit(r: ArrayLike<number>): Float64Array {
  let n = 0;
  for (let i = 0; i < r.length; i++) n += Number(r[i]) ** 2;
  n = Math.sqrt(n);
  if (n === 0) throw new SafekeepError('intervention vector is zero');
  return Float64Array.from({ length: r.length }, (_, i) => Number(r[i]) / n);
}

/** x ← x + alpha·r̂ */
function addAlong(x: Float64Array, r: ArrayLike<number>, alpha: number): void {
  const u = unit(r);
  for (let i = 0; i < x.length; i++) x[i] = x[i]! + alpha * u[i]!;
}

/** x ← x − (x·r̂)r̂ + value·r̂: the projection on r̂ set to value (0 = directional ablation) */
function setProjection(x: Float64Array, r: ArrayLike<number>, value: number): void {
  const u = unit(r);
  let along = 0;
  for (let i = 0; i < x.length; i++) along += x[i]! * u[i]!;
  for (let i = 0; i < x.length; i++) x[i] = x[i]! + (value - along) * u[i]!;
}

/**
 * The edits at hook point `name` on token t of T (x in place), by their definitions: patches (x = the source's value
 * at t), head ablations (z's head slices zeroed), adds (x + α r̂), then the ablate / clamp (projection set).
 */
function hookEditor(list: readonly HookIntervention[], c: ModelConfig): (name: string, t: number, T: number, x: Float64Array) => void {
  const shape = { numLayers: c.numLayers };
  const at = (positions: number[] | undefined, t: number, T: number) => positions === undefined || positions.some((p) => (p < 0 ? T + p : p) === t);
  const rank = { patch: 0, ablate_heads: 1, add: 2, ablate: 3, clamp: 3 } as const;
  const byName = new Map<string, HookIntervention[]>();
  for (const iv of list) for (const n of resolveHookNames([iv.hook], shape)) byName.set(n, [...(byName.get(n) ?? []), iv]);
  for (const ivs of byName.values()) ivs.sort((a, b) => rank[a.kind] - rank[b.kind]);
  return (name, t, T, x) => {
    for (const iv of byName.get(name) ?? []) {
      if (iv.kind === 'patch') {
        if (at(iv.positions, t, T)) x.set(Float64Array.from(iv.from.get(name).data.subarray(t * x.length, (t + 1) * x.length)));
      } else if (iv.kind === 'ablate_heads') {
        if (at(iv.positions, t, T)) for (const h of iv.heads) x.fill(0, h * c.headDim, (h + 1) * c.headDim);
      } else if (iv.kind === 'add') {
        if (at(iv.positions, t, T)) addAlong(x, iv.vector, iv.alpha);
      } else setProjection(x, iv.vector, iv.kind === 'clamp' ? iv.alpha : 0);
    }
  };
}

// ---- the forward pass -------------------------------------------------------------------------------------------

/** A hook call of one token at one layer: `x` edited in place at `point` (and captured when asked). */
type TokenHook = (point: HookPoint, x: Float64Array) => void;

/**
 * One token's q [H·hd], k and v [kvH·hd] after the attention norm, q and k per head normed (qwen3 qk-norm) and roped
 * at `pos`: what the token adds to the cache, and what it attends with.
 */
function projectQkv(c: ModelConfig, w: Weights, lw: LayerWeights, x: Float64Array, pos: number,
  rope: { invFreq: Float64Array; scale: number }): { q: Float64Array; k: Float64Array; v: Float64Array } {
  const hd = c.headDim;
  const h = rmsNorm(x, W(w, lw.attnNorm), c.rmsNormEps);
  const q = linear(W(w, lw.q), h, lw.bias ? W(w, lw.bias.q) : undefined);
  const k = linear(W(w, lw.k), h, lw.bias ? W(w, lw.bias.k) : undefined);
  const v = linear(W(w, lw.v), h, lw.bias ? W(w, lw.bias.v) : undefined);
  for (const [vec, nHeads, norm] of [[q, c.numHeads, lw.qkNorm?.q], [k, c.numKvHeads, lw.qkNorm?.k]] as const) {
    for (let hh = 0; hh < nHeads; hh++) {
      let head: Float64Array = vec.slice(hh * hd, (hh + 1) * hd);
      if (norm) head = rmsNorm(head, W(w, norm), c.rmsNormEps);
      ropeInPlace(head, rope.invFreq, pos, rope.scale);
      vec.set(head, hh * hd);
    }
  }
  return { q, k, v };
}

/**
 * One token's attention over cache positions j0..n−1 of its layer (keys / values [n] of [kvH·hd]; query head hh reads
 * KV head hh / g): z [H·hd], the heads side by side. With `pattern`, head hh's probability of position j goes to
 * data[hh·headStride + base + j] (the [H, T, S] pattern: base = t·S, headStride = T·S).
 */
function attendToken(c: ModelConfig, q: Float64Array, keys: readonly Float64Array[], values: readonly Float64Array[], j0: number, n: number,
  pattern: { data: Float64Array; base: number; headStride: number } | null): Float64Array {
  const hd = c.headDim;
  const group = c.numHeads / c.numKvHeads;
  const attn = new Float64Array(c.numHeads * hd);
  for (let hh = 0; hh < c.numHeads; hh++) {
    const kvh = Math.floor(hh / group);
    const scores = new Float64Array(n);
    let max = -Infinity;
    for (let j = j0; j < n; j++) {
      const kj = keys[j]!;
      let s = 0;
      for (let i = 0; i < hd; i++) s += q[hh * hd + i]! * kj[kvh * hd + i]!;
      scores[j] = s / Math.sqrt(hd);
      if (scores[j]! > max) max = scores[j]!;
    }
    let z = 0;
    for (let j = j0; j < n; j++) { scores[j] = Math.exp(scores[j]! - max); z += scores[j]!; }
    for (let j = j0; j < n; j++) {
      const pj = scores[j]! / z;
      if (pattern) pattern.data[hh * pattern.headStride + pattern.base + j] = pj;
      const vj = values[j]!;
      for (let i = 0; i < hd; i++) attn[hh * hd + i] = attn[hh * hd + i]! + pj * vj[kvh * hd + i]!;
    }
  }
  return attn;
}

/**
 * The rest of a decoder block for one token after attention: x + z·Woᵀ, then + the gated MLP; the new residual
 * stream [d] (x itself untouched). Hooks attn_out, resid_mid, mlp_out in that order, each edited in place.
 */
function blockTail(c: ModelConfig, w: Weights, lw: LayerWeights, xIn: Float64Array, attn: Float64Array, hook: TokenHook): Float64Array {
  const d = c.hiddenSize;
  const x = Float64Array.from(xIn);
  const o = linear(W(w, lw.o), attn);
  hook('attn_out', o);
  for (let i = 0; i < d; i++) x[i] = x[i]! + o[i]!;
  hook('resid_mid', x);
  // gated MLP
  const h = rmsNorm(x, W(w, lw.mlpNorm), c.rmsNormEps);
  const g = linear(W(w, lw.gate), h);
  const u = linear(W(w, lw.up), h);
  for (let i = 0; i < g.length; i++) g[i] = silu(g[i]!) * u[i]!;
  const m = linear(W(w, lw.down), g);
  hook('mlp_out', m);
  for (let i = 0; i < d; i++) x[i] = x[i]! + m[i]!;
  return x;
}

/** the captured hook points as arrays: per-token rows stacked [T, width], patterns as recorded [H, T, S] */
function stackCaptures(c: ModelConfig, names: ReadonlySet<string>, captured: ReadonlyMap<string, Float64Array[]>,
  patterns: ReadonlyMap<number, Float64Array>, T: number): Map<string, Float64Array> {
  const hooks = new Map<string, Float64Array>();
  for (const name of names) {
    const { layer, point } = parseHookName(name, c);
    if (point === 'pattern') { hooks.set(name, patterns.get(layer)!); continue; }
    const rows = captured.get(name)!;
    const out = new Float64Array(T * rows[0]!.length);
    rows.forEach((r, t) => out.set(r, t * r.length));
    hooks.set(name, out);
  }
  return hooks;
}

export function referenceForward(ckpt: Checkpoint, ids: number[], opts: ReferenceForwardOptions = {}): ReferenceForwardResult {
  const c = ckpt.config;
  const w = weights(ckpt, opts.weights);
  const d = c.hiddenSize;
  const L = c.numLayers;
  const T = ids.length;
  const steer = steeringRows(c, opts);
  const past = opts.past;
  const start = past?.length ?? 0;
  // dynamic NTK: the frequencies of this call's length (transformers recomputes them per forward as the length grows)
  const rope = referenceRope(c, start + T);
  const keys = Array.from({ length: L }, (_, l) => [...(past?.keys[l] ?? [])]);
  const values = Array.from({ length: L }, (_, l) => [...(past?.values[l] ?? [])]);

  const hidden = new Float64Array((L + 1) * T * d);
  const emb = W(w, tensorName('embed'));
  let xs: Float64Array[] = ids.map((id) => {
    if (!Number.isInteger(id) || id < 0 || id >= c.vocabSize) throw new SafekeepError(`token id ${id} out of range 0..${c.vocabSize - 1}`);
    return emb.slice(id * d, (id + 1) * d);
  });
  const ivs = opts.interventions ?? [];
  // hook points: edited in place by their definitions, captured per token
  const captureNames = new Set(resolveHookNames(opts.capture ?? [], c));
  const edit = hookEditor(opts.hookEdits ?? [], c);
  const captured = new Map<string, Float64Array[]>();
  const hook = (l: number, point: HookPoint, t: number, x: Float64Array): void => {
    const name = hookName(l, point);
    edit(name, t, T, x);
    if (captureNames.has(name)) { const rows = captured.get(name) ?? []; rows[t] = Float64Array.from(x); captured.set(name, rows); }
  };
  const S = start + T;
  const patterns = new Map<number, Float64Array>(); // [H, T, S] per layer whose pattern is captured
  const record = (l: number): void => {
    xs.forEach((x, t) => {
      const s = steer[l];
      if (s) for (let i = 0; i < d; i++) x[i] = x[i]! + s[i]!;
      for (const iv of ivs) if (iv.layer === l && iv.kind === 'add') addAlong(x, iv.vector, iv.alpha!);
      for (const iv of ivs) if (iv.layer === l && iv.kind !== 'add') setProjection(x, iv.vector, iv.kind === 'clamp' ? iv.alpha! : 0);
      if (l > 0) hook(l - 1, 'resid_post', t, x); // hidden[l] = resid_post of block l-1
      hidden.set(x, (l * T + t) * d);
    });
  };
  record(0);

  for (let l = 0; l < L; l++) {
    const lw = layerWeights(c, l);
    xs.forEach((x, t) => hook(l, 'resid_pre', t, x));
    const pattern = captureNames.has(hookName(l, 'pattern')) ? new Float64Array(c.numHeads * T * S) : null;
    if (pattern) patterns.set(l, pattern);
    // 1. project and rope every new token, extending the cache
    const qs: Float64Array[] = [];
    for (let t = 0; t < T; t++) {
      const { q, k, v } = projectQkv(c, w, lw, xs[t]!, start + t, rope);
      qs.push(q);
      keys[l]!.push(k);
      values[l]!.push(v);
    }
    // 2. causal attention: token t sees cache positions 0..start+t (a sliding-window layer: the last W of them);
    // 3. the block's output projection and gated MLP
    const next: Float64Array[] = [];
    const win = c.attentionWindows[l] ?? null;
    for (let t = 0; t < T; t++) {
      const n = start + t + 1;
      const j0 = win === null ? 0 : Math.max(0, n - win);
      const attn = attendToken(c, qs[t]!, keys[l]!, values[l]!, j0, n, pattern ? { data: pattern, base: t * S, headStride: T * S } : null);
      hook(l, 'z', t, attn);
      next.push(blockTail(c, w, lw, xs[t]!, attn, (point, x) => hook(l, point, t, x)));
    }
    xs = next;
    record(l + 1);
  }

  const head = c.tieWordEmbeddings ? emb : W(w, tensorName('lmHead'));
  const logits = new Float64Array(T * c.vocabSize);
  xs.forEach((x, t) => logits.set(linear(head, rmsNorm(x, W(w, tensorName('finalNorm')), c.rmsNormEps)), t * c.vocabSize));
  return { hidden, logits, kv: { keys, values, length: start + T }, hooks: stackCaptures(c, captureNames, captured, patterns, T) };
}

// ---- greedy generation ------------------------------------------------------------------------------------------

interface ReferenceGenerateOptions {
  maxNewTokens: number;
  /** default: the checkpoint's eos ids; [] = never stop */
  stopIds?: number[];
  steer?: Steering;
  steerMatrix?: Float32Array | Float64Array;
  /** positions 'generated': only the fed-back tokens */
  interventions?: Intervention[];
  weights?: WeightPrecision;
  /** edits at hook points, every prompt position and generated token */
  hookEdits?: readonly HookIntervention[];
}

interface ReferenceGenerateResult {
  generatedIds: number[];
  finish: 'stop' | 'length';
  /** row k = logits that chose generated token k (row 0 = last prompt position). [steps, vocab] */
  stepLogits: Float64Array;
  /** hidden states of the first generated token, computed when it is fed back. [L+1, d_model] (null if none generated) */
  firstTokenHidden: Float64Array | null;
  /** last prompt position of the prefill. [L+1, d_model] */
  promptLastHidden: Float64Array;
}

/** Rows [L+1] of position t from hidden [L+1, T, d]. → [L+1, d] */
export function hiddenAt(hidden: Float64Array, L: number, T: number, d: number, t: number): Float64Array {
  const out = new Float64Array((L + 1) * d);
  for (let l = 0; l <= L; l++) out.set(hidden.subarray((l * T + t) * d, (l * T + t + 1) * d), l * d);
  return out;
}

/** Greedy decoding with the KV cache; steering applies to the prompt and every generated token (positions 'generated': only the latter). */
export function referenceGenerate(ckpt: Checkpoint, prompt: number[], opts: ReferenceGenerateOptions): ReferenceGenerateResult {
  const c = ckpt.config;
  const V = c.vocabSize;
  const L = c.numLayers;
  const d = c.hiddenSize;
  const stop = new Set(opts.stopIds ?? c.eosTokenIds);
  const fwd = { steer: opts.steer, steerMatrix: opts.steerMatrix, weights: opts.weights, interventions: opts.interventions, hookEdits: opts.hookEdits };
  const prefill = {
    ...(opts.steer?.positions === 'generated' ? { weights: opts.weights, hookEdits: opts.hookEdits } : fwd),
    interventions: (opts.interventions ?? []).filter((iv) => (iv.positions ?? 'all') === 'all'),
  };
  let r = referenceForward(ckpt, prompt, prefill);
  const promptLastHidden = hiddenAt(r.hidden, L, prompt.length, d, prompt.length - 1);
  let last = r.logits.subarray((prompt.length - 1) * V);
  const generatedIds: number[] = [];
  const steps: Float64Array[] = [];
  let firstTokenHidden: Float64Array | null = null;
  let finish: 'stop' | 'length' = 'length';
  while (generatedIds.length < opts.maxNewTokens) {
    steps.push(Float64Array.from(last));
    const tok = argmax(last);
    generatedIds.push(tok);
    if (stop.has(tok)) { finish = 'stop'; break; }
    if (generatedIds.length === opts.maxNewTokens && firstTokenHidden !== null) break;
    r = referenceForward(ckpt, [tok], { ...fwd, past: r.kv });
    if (firstTokenHidden === null) firstTokenHidden = hiddenAt(r.hidden, L, 1, d, 0);
    last = r.logits;
  }
  const stepLogits = new Float64Array(steps.length * V);
  steps.forEach((s, i) => stepLogits.set(s, i * V));
  return { generatedIds, finish, stepLogits, firstTokenHidden, promptLastHidden };
}
