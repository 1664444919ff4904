/**
 * One intervention's JSON fields, read the same way wherever a user writes them: `--intervene FILE.json` (forward,
 * generate, steer) and the server's `safekeep.interventions` / `safekeep.steer`. Each reader checks one field and
 * calls `fail` with a message that names it (`at`); the caller decides what a failure is (a CLI error, exit 2; a
 * JSON 400). A field nobody reads is refused by name rather than ignored: a misspelt `"postions"` would otherwise
 * steer every position. The engine checks again what needs the model (width, layer range, overflow: MAX_ALPHA).
 */
import { INTERVENTION_KINDS, STEER_POSITIONS, type InterventionKind, type SteerPositions } from './types.ts';

/** the largest finite float32: the graph computes in float32, so a value beyond it is ±Inf and then NaN */
export const F32_MAX = 3.4028234663852886e38;

/**
 * The largest |α| of an add or a clamp, and the largest norm of all adds at one point together. α·v̂ (v̂ = v/‖v‖) is
 * finite in float32 for any |α| ≤ 3.4e38, but the steered hidden state is not then safe: every family's norm squares
 * and sums the residual stream (RMSNorm: mean(x²); LayerNorm: mean((x − μ)²)), and a state of norm ≥ 1.8e19
 * overflows that sum to Inf, then NaN in every later position — a 200 with garbage. With |α| ≤ 1e12, even the most
 * interventions a request may carry (64), each read through one linear layer of spectral norm up to 1e4 (hook points
 * before a projection: z), add at most 6.4e17 to the norm of what a norm then reads; its square, 4e35, stays a
 * thousand times below the float32 maximum, with room for the model's own activations (≤ 1e17). Real steering
 * strengths are of the order of the residual norm (1 to 1e5), far below it.
 */
export const MAX_ALPHA = 1e12;

/** raises the caller's error (never returns) */
export type Fail = (message: string) => never;

export const isF32 = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && Math.abs(v) <= F32_MAX;

export const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** a value as a message shows it: JSON cut at 40 characters; a non-finite number as itself (JSON would say null) */
export const shown = (v: unknown): string =>
  typeof v === 'number' && !Number.isFinite(v) ? String(v) : JSON.stringify(v)?.slice(0, 40) ?? String(v);

/** every field of `o` is one of `known` */
export function knownFields(o: Record<string, unknown>, known: readonly string[], at: string, fail: Fail): void {
  for (const k of Object.keys(o)) if (!known.includes(k)) fail(`${at}.${k}: unknown field (known: ${known.join(', ')})`);
}

export function kindField(v: unknown, at: string, fail: Fail): InterventionKind {
  if (!INTERVENTION_KINDS.includes(v as InterventionKind)) fail(`${at} must be one of ${INTERVENTION_KINDS.join(', ')}, got ${shown(v)}`);
  return v as InterventionKind;
}

/** a finite number, |α| ≤ MAX_ALPHA (a larger one overflows float32 in the model's norms) */
export function alphaValue(v: unknown, at: string, fail: Fail): number {
  if (!isF32(v) || Math.abs(v) > MAX_ALPHA) fail(`${at} ${ALPHA_RULE}, got ${shown(v)}`);
  return v as number;
}

/** what alphaValue requires, in words */
export const ALPHA_RULE = `must be a finite number with |alpha| ≤ ${MAX_ALPHA.toExponential()} (a larger steering overflows float32 in the model's norms)`;

/** add and clamp need an alpha; an ablation has none (one given would be silently unused) */
export function alphaField(kind: InterventionKind, v: unknown, at: string, fail: Fail): number | undefined {
  if (kind === 'ablate') {
    if (v !== undefined) fail(`${at}: an ablation has no alpha`);
    return undefined;
  }
  return alphaValue(v, at, fail);
}

/** absent = the engine's default (every position) */
export function positionsField(v: unknown, at: string, fail: Fail): SteerPositions | undefined {
  if (v === undefined) return undefined;
  if (!STEER_POSITIONS.includes(v as SteerPositions)) fail(`${at} must be one of ${STEER_POSITIONS.join(', ')}, got ${shown(v)}`);
  return v as SteerPositions;
}

/** an integer layer; with `numLayers`, within 0..L (hidden[0] = embeddings, hidden[L] = the last block's output) */
export function layerField(v: unknown, at: string, fail: Fail, numLayers?: number): number {
  const ok = Number.isInteger(v) && (numLayers === undefined || ((v as number) >= 0 && (v as number) <= numLayers));
  if (!ok) {
    fail(numLayers === undefined ? `${at} must be an integer, got ${shown(v)}`
      : `${at} must be an integer 0..${numLayers} (hidden[0] = embeddings, hidden[${numLayers}] = the last block's output), got ${shown(v)}`);
  }
  return v as number;
}
