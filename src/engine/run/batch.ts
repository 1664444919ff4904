/**
 * Pure helpers that turn ragged token sequences into the graph's batch inputs: left padding, position ids =
 * cumsum(mask) - 1, the additive attention bias (causal + padding, over cached and new slots), flat row indices,
 * and the steering matrix.
 */
import { SafekeepError } from '../../util/errors.ts';
import { MASKED } from '../graph/io.ts';
import { INTERVENTION_KINDS, STEER_POSITIONS, type Intervention, type PositionSelector, type Steering } from './types.ts';
import { ALPHA_RULE, F32_MAX, MAX_ALPHA } from './intervention-json.ts';

interface PaddedBatch {
  batch: number;
  /** padded length T */
  width: number;
  /** [B, T] left-padded ids (pad = 0) */
  ids: BigInt64Array;
  /** [B] number of left pad slots */
  pads: number[];
  lengths: number[];
}

export function leftPad(seqs: readonly (readonly number[])[], padId = 0): PaddedBatch {
  const lengths = seqs.map((s) => s.length);
  const width = Math.max(0, ...lengths);
  const ids = new BigInt64Array(seqs.length * width).fill(BigInt(padId));
  const pads = lengths.map((n) => width - n);
  seqs.forEach((s, b) => s.forEach((id, t) => { ids[b * width + pads[b]! + t] = BigInt(id); }));
  return { batch: seqs.length, width, ids, pads, lengths };
}

/**
 * Position ids [B, T] for T new slots after `past` cached slots; row b's first real slot is `starts[b]`
 * (position = slot - start; pad slots get 0).
 */
export function positionIds(batch: number, width: number, past: number, starts: readonly number[]): BigInt64Array {
  const out = new BigInt64Array(batch * width);
  for (let b = 0; b < batch; b++) {
    for (let t = 0; t < width; t++) out[b * width + t] = BigInt(Math.max(0, past + t - starts[b]!));
  }
  return out;
}

/**
 * Additive attention bias [B, T, P+T]: query slot P+t of row b sees key slot j iff starts[b] ≤ j ≤ P+t.
 * Query rows on pad slots see nothing (uniform softmax over MASKED, finite, ignored by callers).
 */
export function attentionBias(batch: number, width: number, past: number, starts: readonly number[]): Float32Array {
  const S = past + width;
  const out = new Float32Array(batch * width * S).fill(MASKED);
  for (let b = 0; b < batch; b++) {
    for (let t = 0; t < width; t++) {
      const row = (b * width + t) * S;
      for (let j = starts[b]!; j <= past + t; j++) out[row + j] = 0;
    }
  }
  return out;
}

/** Positions 0..length-1 named by a selector (validated). */
export function selectPositions(sel: PositionSelector | undefined, length: number, what: string): number[] {
  const s = sel ?? 'all';
  if (s === 'all') return Array.from({ length }, (_, i) => i);
  if (s === 'last') return length > 0 ? [length - 1] : [];
  if (s === 'none') return [];
  for (const p of s) {
    if (!Number.isInteger(p) || p < -length || p >= length) {
      throw new SafekeepError(`${what}: position ${p} is outside a sequence of ${length} tokens`);
    }
  }
  return s.map((p) => (p < 0 ? length + p : p));
}

/** The `Steering` shorthand as the intervention it stands for: add −alpha·v̂ at its layer (GenerationEdits' sign). */
export function steeringIntervention(steer: Steering): Intervention {
  return { layer: steer.layer, kind: 'add', vector: steer.vector, alpha: -steer.alpha, ...(steer.positions ? { positions: steer.positions } : {}) };
}

/** One set of the graph's intervention inputs: `steer` [L+1, d] (row l added to hidden[l]); `dir` [L+1, d] unit r̂ per
 * layer (zeros = none) and `value` [L+1]: the projection of hidden[l] on r̂ is set to value[l] after the adds. A step
 * takes one set for every row or one per row (run/step.ts, graph/intervene.ts). */
export interface InterventionInputs {
  steer: Float32Array;
  dir: Float32Array;
  value: Float32Array;
}

/** ‖m[row .. row+n)‖₂, scaled by the largest entry so that large entries do not overflow the sum of squares */
export function rowNorm(m: ArrayLike<number>, row: number, n: number): number {
  let scale = 0;
  for (let i = 0; i < n; i++) scale = Math.max(scale, Math.abs(m[row + i]!));
  if (scale === 0 || !Number.isFinite(scale)) return scale;
  let sum = 0;
  for (let i = 0; i < n; i++) sum += (m[row + i]! / scale) ** 2;
  return scale * Math.sqrt(sum);
}

/** The inputs for a list of interventions (validated: one SafekeepError naming the first bad one). */
export function interventionInputs(numLayers: number, dModel: number, list: readonly Intervention[]): InterventionInputs {
  const out = { steer: new Float32Array((numLayers + 1) * dModel), dir: new Float32Array((numLayers + 1) * dModel), value: new Float32Array(numLayers + 1) };
  const projected = new Set<number>();
  for (const iv of list) {
    const { layer, kind, vector, alpha } = iv;
    const what = list.length > 1 ? `intervention ${list.indexOf(iv)} (${kind} at layer ${layer})` : 'steering';
    if (!INTERVENTION_KINDS.includes(kind)) throw new SafekeepError(`${what}: kind must be one of ${INTERVENTION_KINDS.join(', ')}, got ${JSON.stringify(kind)}`);
    if (!Number.isInteger(layer) || layer < 0 || layer > numLayers) {
      throw new SafekeepError(`${what}: layer ${layer} is out of range 0..${numLayers} (hidden[0] = embeddings, hidden[${numLayers}] = last block)`);
    }
    if (iv.positions !== undefined && !STEER_POSITIONS.includes(iv.positions)) throw new SafekeepError(`${what}: positions must be one of ${STEER_POSITIONS.join(', ')}`);
    if (vector.length !== dModel) throw new SafekeepError(`${what}: vector has ${vector.length} values, the model's d_model is ${dModel}`);
    // the graph computes in float32: a value it cannot hold becomes ±Inf and then NaN in every later hidden state
    if (kind !== 'ablate' && (alpha === undefined || !Number.isFinite(alpha) || Math.abs(alpha) > MAX_ALPHA)) {
      throw new SafekeepError(`${what}: alpha ${ALPHA_RULE}, got ${alpha}`);
    }
    let scale = 0;
    for (let i = 0; i < dModel; i++) {
      const v = Number(vector[i]);
      if (!Number.isFinite(v) || Math.abs(v) > F32_MAX) throw new SafekeepError(`${what}: vector value ${i} (${vector[i]}) is not a finite float32 number`);
      scale = Math.max(scale, Math.abs(v));
    }
    // the norm scaled by the largest entry, so large (finite) entries do not overflow the sum of squares
    let norm = 0;
    for (let i = 0; i < dModel && scale > 0; i++) norm += (Number(vector[i]) / scale) ** 2;
    norm = scale * Math.sqrt(norm);
    if (norm === 0) throw new SafekeepError(`${what}: vector is all zeros`);
    const row = layer * dModel;
    if (kind === 'add') {
      for (let i = 0; i < dModel; i++) {
        out.steer[row + i] = out.steer[row + i]! + alpha! * (Number(vector[i]) / norm);
      }
      // the adds at one layer together: their sum is what the model's norms square (MAX_ALPHA says why)
      if (rowNorm(out.steer, row, dModel) > MAX_ALPHA) throw new SafekeepError(`${what}: the steering at layer ${layer} (all its adds together) has norm above ${MAX_ALPHA.toExponential()}, which overflows float32 in the model's norms; use smaller alphas`);
      continue;
    }
    // two projections at one layer would depend on their order (and on how their directions overlap)
    if (projected.has(layer)) throw new SafekeepError(`${what}: a second ablate/clamp at layer ${layer}; one per layer (combine the directions first)`);
    projected.add(layer);
    for (let i = 0; i < dModel; i++) out.dir[row + i] = Number(vector[i]) / norm;
    out.value[layer] = kind === 'clamp' ? alpha! : 0;
  }
  return out;
}

/** The interventions of a call: the steering shorthand (when given) and the list. */
export function callInterventions(opts: { steer?: Steering; interventions?: readonly Intervention[] }): Intervention[] {
  return [...(opts.steer ? [steeringIntervention(opts.steer)] : []), ...(opts.interventions ?? [])];
}

/** Steering matrix [L+1, d]: row `layer` = -alpha · v/|v| (zeros when no steering). */
export function steeringMatrix(numLayers: number, dModel: number, steer?: Steering): Float32Array {
  return interventionInputs(numLayers, dModel, steer ? [steeringIntervention(steer)] : []).steer;
}

/**
 * Group sequence indices (sorted by length, so similar lengths share a batch) into chunks that keep
 * B·T ≤ maxTokens and the attention scores B·heads·T² ≤ maxScores, and, when given, `fits(B, T)` (a memory budget,
 * memory.ts). A sequence that alone breaks a cap still gets its own chunk (the engine prefills it in pieces).
 */
export function planChunks(lengths: readonly number[], heads: number, maxTokens = 4096, maxScores = 1 << 27,
  fits?: (batch: number, width: number) => boolean): number[][] {
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[a]! - lengths[b]! || a - b);
  const chunks: number[][] = [];
  let cur: number[] = [];
  for (const i of order) {
    const w = lengths[i]!; // ascending order: the widest so far
    const n = cur.length + 1;
    if (cur.length && (n * w > maxTokens || n * heads * w * w > maxScores || (fits && !fits(n, w)))) {
      chunks.push(cur);
      cur = [];
    }
    cur.push(i);
  }
  if (cur.length) chunks.push(cur);
  return chunks;
}

/** Padded tokens B·T summed over chunks, and the real tokens: padding waste = padded / real − 1. */
export function paddingWaste(lengths: readonly number[], chunks: readonly (readonly number[])[]): { padded: number; real: number; waste: number } {
  let padded = 0;
  let real = 0;
  for (const c of chunks) {
    const w = Math.max(0, ...c.map((i) => lengths[i]!));
    padded += c.length * w;
    real += c.reduce((s, i) => s + lengths[i]!, 0);
  }
  return { padded, real, waste: real ? padded / real - 1 : 0 };
}
