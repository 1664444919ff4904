/**
 * A trained refusal probe on disk: `<name>.safetensors` holds the weight vector `w` float32 [d_model]; `<name>.json`
 * holds everything else — kind, layer, bias, threshold with its target and training rates, and provenance (model
 * config hash and weights fingerprint, chat-template hash, data set hash, split seed and sizes, engine version).
 * score(h) = w·hidden[layer] + bias at the last prompt position; flag = score > threshold.
 * Both files are written atomically (JSON last); reading validates every field and names the file on error.
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import type { Checkpoint } from '../checkpoint/types.ts';
import { readSafetensorsHeader, writeSafetensors } from '../checkpoint/safetensors.ts';
import { writeJsonAtomic } from '../util/atomic.ts';
import { SafekeepError } from '../util/errors.ts';
import { sha256Hex } from '../util/hash.ts';
import { ALPHA_RULE, MAX_ALPHA } from '../engine/run/intervention-json.ts';

export type ProbeKind = 'mean-diff' | 'logistic';
export const PROBE_KINDS: readonly ProbeKind[] = ['mean-diff', 'logistic'];

interface ProbeThreshold {
  value: number;
  /** stated target: share of benign extraction rows flagged */
  target: number;
  /** achieved on the extraction split */
  benignFlagged: number;
  harmfulFlagged: number;
  nBenign: number;
  nHarmful: number;
}

interface ProbeProvenance {
  model: { dir: string; family: string; configHash: string; weightsFingerprint: string; numLayers: number; dModel: number };
  templateHash: string;
  /** e.g. agent.schema */
  condition: string;
  dataset: { name: string; hash: string };
  split: { seed: number; used: 'extraction'; extractionPairs: number; evaluationPairs: number; extractionIdsHash: string };
  engine: string;
  cache: string;
  created: string;
}

/** Which held-out requests calibrated the cascade band or the steering strength (pairs of the extraction split the probe was not fit on). */
interface CalibrationSplit {
  /** pairs held out of the fit for calibration */
  pairs: number;
  /** their share of the extraction pairs, and the seed that drew them */
  share: number;
  seed: number;
  /** sha256 over the sorted calibration pair ids */
  idsHash: string;
}

/**
 * The probe→judge cascade's band on the probe score: score > high → refused by the probe; score < low → runs without
 * the judge; otherwise the judge decides. `high` lets at most `maxBenignFlag` of the benign calibration requests be
 * refused by the probe, `low` lets at most `maxHarmfulPass` of the harmful ones run unjudged.
 */
export interface ProbeCascade {
  low: number;
  high: number;
  maxBenignFlag: number;
  maxHarmfulPass: number;
  /** achieved on the calibration split */
  benignFlagged: number;
  harmfulPassed: number;
  /** share of calibration requests inside the band (each would cost one judge call) */
  band: number;
  nBenign: number;
  nHarmful: number;
  calibration: CalibrationSplit;
}

/**
 * probe-steer's strength: +alpha·r̂ added to hidden[layer], r̂ the unit harmful-minus-benign mean difference at that
 * layer on the fit rows (the refusal direction; the weights file's tensor `steer`, for a mean-diff probe = w); alpha = the smallest value of the search that made
 * `refused` of the `flagged` harmful calibration requests refuse (the whole share when reachable).
 */
export interface ProbeSteer {
  alpha: number;
  layer: number;
  /** which requests alpha was searched on: the harmful calibration requests the probe flags, or all harmful ones when it flags none */
  targets: 'flagged' | 'harmful';
  /** how many (those the steering must turn into refusals) */
  flagged: number;
  /** of them, refusing under alpha */
  refused: number;
  /** how alpha was searched (grid, bisection tolerance, generation budget, refusal classifier) */
  search: string;
  calibration: CalibrationSplit;
}

interface ProbeMeta {
  format: 'safekeep-probe';
  version: 1;
  kind: ProbeKind;
  /** hidden index ℓ (0 = embeddings, l = output of block l-1) */
  layer: number;
  dModel: number;
  bias: number;
  threshold: ProbeThreshold;
  /** how the layer was chosen */
  layerChoice: { method: string; cvAuroc?: (number | null)[] };
  /** logistic only: λ = 1/C on standardised features, Newton iterations, convergence */
  fit?: { l2: number; iterations: number; converged: boolean };
  provenance: ProbeProvenance;
  /** `probe train --calibrate`: the probe→judge cascade's band */
  cascade?: ProbeCascade;
  /** `probe train --calibrate`: probe-steer's steering strength */
  steer?: ProbeSteer;
  /** weights file, relative to the JSON */
  weights: string;
}

export interface Probe extends ProbeMeta {
  /** [dModel] */
  w: Float32Array;
  /** [dModel] probe-steer's direction r̂ (present with `steer`) */
  steerVector?: Float32Array;
  /** the JSON's path */
  path: string;
}

/** score = w·hidden[layer] + bias, from all-layer hidden states [L+1, d] (row-major). */
export function probeScore(p: Pick<Probe, 'w' | 'bias' | 'layer' | 'dModel'>, hidden: ArrayLike<number>): number {
  const off = p.layer * p.dModel;
  if (hidden.length < off + p.dModel) throw new SafekeepError(`probe at layer ${p.layer}: hidden states have ${hidden.length / p.dModel} layers`);
  let s = p.bias;
  for (let j = 0; j < p.dModel; j++) s += p.w[j]! * hidden[off + j]!;
  return s;
}

/**
 * A cheap fingerprint of the weights: sha256 over every tensor's name, dtype, shape and 64 bytes at its start, middle
 * and end. It tells checkpoints apart without reading gigabytes; it is not a full content hash.
 */
export function weightsFingerprint(ckpt: Checkpoint): string {
  const parts: Array<string | Uint8Array> = [];
  const fds = new Map<string, number>();
  try {
    for (const t of [...ckpt.tensors.values()].sort((a, b) => (a.name < b.name ? -1 : 1))) {
      parts.push(`${t.name}\t${t.dtype}\t${t.shape.join('x')}\n`);
      let fd = fds.get(t.file);
      if (fd === undefined) { fd = openSync(t.file, 'r'); fds.set(t.file, fd); }
      const n = Math.min(64, t.byteLength);
      for (const at of [0, Math.floor((t.byteLength - n) / 2), t.byteLength - n]) {
        const buf = Buffer.alloc(n);
        readSync(fd, buf, 0, n, t.offset + at);
        parts.push(buf);
      }
    }
  } finally {
    for (const fd of fds.values()) closeSync(fd);
  }
  return sha256Hex(parts);
}

/** Writes `<base>.safetensors` then `<base>.json`; returns the JSON path. `steerVector`: probe-steer's r̂ (with `meta.steer`). */
export function writeProbe(base: string, meta: Omit<ProbeMeta, 'weights' | 'format' | 'version'>, w: Float32Array, steerVector?: Float32Array): string {
  if (w.length !== meta.dModel) throw new SafekeepError(`probe weights: ${w.length} values for d_model ${meta.dModel}`);
  if ((meta.steer === undefined) !== (steerVector === undefined)) throw new SafekeepError('probe file: a steering strength needs its direction and the other way round');
  if (steerVector && steerVector.length !== meta.dModel) throw new SafekeepError(`probe steering direction: ${steerVector.length} values for d_model ${meta.dModel}`);
  const weights = `${basename(base)}.safetensors`;
  mkdirSync(dirname(base), { recursive: true });
  writeSafetensors(join(dirname(base), weights), {
    w: { dtype: 'F32', shape: [w.length], data: w },
    ...(steerVector ? { steer: { dtype: 'F32' as const, shape: [steerVector.length], data: steerVector } } : {}),
  }, { format: 'safekeep-probe' });
  const full: ProbeMeta = { format: 'safekeep-probe', version: 1, ...meta, weights };
  writeJsonAtomic(`${base}.json`, full);
  return `${base}.json`;
}

const isNum = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x);

/** Reads and validates a probe (the JSON path, or the base path without extension). */
export function readProbe(path: string): Probe {
  const json = resolve(path.endsWith('.json') ? path : `${path}.json`);
  if (!existsSync(json)) throw new SafekeepError(`${json}: no such probe file (train one with safekeep probe train)`);
  let m: ProbeMeta;
  try {
    m = JSON.parse(readFileSync(json, 'utf8')) as ProbeMeta;
  } catch (e) {
    throw new SafekeepError(`${json}: not valid JSON (${(e as Error).message})`);
  }
  const bad = (what: string): never => { throw new SafekeepError(`${json}: ${what}`); };
  if (!m || m.format !== 'safekeep-probe') bad('not a safekeep probe (format must be "safekeep-probe")');
  if (m.version !== 1) bad(`unsupported version ${String(m.version)} (expected 1)`);
  if (!PROBE_KINDS.includes(m.kind)) bad(`kind must be one of ${PROBE_KINDS.join(', ')}, got ${JSON.stringify(m.kind)}`);
  if (!Number.isInteger(m.layer) || m.layer < 0) bad(`layer must be a non-negative integer, got ${JSON.stringify(m.layer)}`);
  if (!Number.isInteger(m.dModel) || m.dModel < 1) bad(`dModel must be a positive integer, got ${JSON.stringify(m.dModel)}`);
  if (!isNum(m.bias)) bad('bias must be a finite number');
  if (!m.threshold || !isNum(m.threshold.value) || !isNum(m.threshold.target)) bad('threshold must have finite "value" and "target"');
  if (!m.provenance?.model || typeof m.provenance.model.configHash !== 'string') bad('provenance.model.configHash is missing');
  if (m.cascade !== undefined) {
    const c = m.cascade;
    if (!c || !isNum(c.low) || !isNum(c.high) || !isNum(c.maxBenignFlag) || !isNum(c.maxHarmfulPass) || !c.calibration) bad('cascade must have finite "low", "high", "maxBenignFlag", "maxHarmfulPass" and a "calibration"');
    if (c.low > c.high) bad(`cascade: low ${c.low} is above high ${c.high}`);
  }
  if (m.steer !== undefined) {
    const st = m.steer;
    if (!st || !isNum(st.alpha) || st.alpha < 0 || !Number.isInteger(st.layer) || st.layer < 0 || !st.calibration) bad('steer must have a finite "alpha" ≥ 0, an integer "layer" ≥ 0 and a "calibration"');
    // the bound every steering strength has (engine/run/intervention-json.ts MAX_ALPHA: beyond it the steered
    // hidden state overflows float32), checked when the file is read rather than on the first flagged request
    if (st.alpha > MAX_ALPHA) bad(`steer.alpha ${ALPHA_RULE.replace('|alpha|', 'alpha')}, got ${st.alpha}`);
  }
  if (typeof m.weights !== 'string' || m.weights.includes('/') || m.weights.includes('\\')) bad('weights must be a file name beside the JSON');
  const wPath = join(dirname(json), m.weights);
  if (!existsSync(wPath)) bad(`weights file ${m.weights} is missing`);
  const header = readSafetensorsHeader(wPath);
  const e = header.entries.find((x) => x.name === 'w');
  if (!e || e.dtype !== 'F32' || e.shape.length !== 1 || e.shape[0] !== m.dModel) bad(`${m.weights} must hold 'w' float32 [${m.dModel}]`);
  const buf = readFileSync(wPath);
  const w = new Float32Array(buf.buffer.slice(buf.byteOffset + e!.offset, buf.byteOffset + e!.offset + e!.byteLength));
  if (!w.every(Number.isFinite)) bad(`${m.weights}: weights are not all finite`);
  if (m.steer === undefined) return { ...m, w, path: json };
  const se = header.entries.find((x) => x.name === 'steer');
  if (!se || se.dtype !== 'F32' || se.shape.length !== 1 || se.shape[0] !== m.dModel) bad(`${m.weights} must hold probe-steer's direction 'steer' float32 [${m.dModel}]`);
  const steerVector = new Float32Array(buf.buffer.slice(buf.byteOffset + se!.offset, buf.byteOffset + se!.offset + se!.byteLength));
  if (!steerVector.every(Number.isFinite) || !steerVector.some((x) => x !== 0)) bad(`${m.weights}: the steering direction is not finite and non-zero`);
  return { ...m, w, steerVector, path: json };
}

/** Refuses a probe trained on another model (config hash, shape) — a probe's numbers mean nothing elsewhere. */
export function checkProbeFits(p: Probe, model: { configHash: string; numLayers: number; dModel: number }): void {
  const pm = p.provenance.model;
  if (p.dModel !== model.dModel || p.layer > model.numLayers) {
    throw new SafekeepError(`${p.path}: probe is for d_model ${p.dModel}, layer ${p.layer}; this model has d_model ${model.dModel} and ${model.numLayers} layers`);
  }
  if (pm.configHash !== model.configHash) {
    throw new SafekeepError(`${p.path}: probe was trained on another model (config hash ${pm.configHash.slice(0, 12)}…, this model ${model.configHash.slice(0, 12)}…)`);
  }
}
