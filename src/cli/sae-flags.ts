/**
 * What the `sae` commands share: `--sae` (a folder or file in one of loadSae's layouts, or owner/name/sub/folder on
 * the hub) and `--hook`; and one SAE run over a sequence — the stream at the SAE's hook point, the activations, the
 * reconstruction, and optionally the logits with the reconstruction spliced in. In the engine's graph when the SAE
 * needs no input normalization (graph/sae-splice.ts); otherwise the stream is captured, the SAE computed by
 * src/sae/math.ts and the reconstruction patched back in by a second forward (the same result).
 */
import type { OnnxEngine } from '../engine/engine.ts';
import { ActivationCache } from '../engine/run/activation-cache.ts';
import { resolveSae } from '../hub/pull-sae.ts';
import { f32Weights } from '../engine/run/sae-hooks.ts';
import { engineHookPoint } from '../sae/hook.ts';
import { loadSae } from '../sae/load.ts';
import { decode, encode, type FeatureEdit } from '../sae/math.ts';
import { SafekeepError } from '../util/errors.ts';
import type { Sae } from '../sae/types.ts';
import type { FlagDef, ParsedArgs } from './args.ts';
import { requireValue } from './args.ts';
import { hubEnv } from './env.ts';

export const SAE_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'sae', value: 'SAE', help: 'SAE folder (SAELens cfg.json + sae_weights.safetensors, Gemma Scope params.npz / params.safetensors, Llama Scope hyperparams.json) or owner/name/sub/folder on the hub' },
  { name: 'hook', value: 'blocks.L.hook_resid_post', help: "the SAE's hook point when its files name none (or to override them)" },
];

/**
 * The SAE of `--sae` / `--hook`, with the f32 weights the engine's graph is fed already made: commands open it before
 * the engine, whose --max-memory plan counts the process's resident bytes — so the dictionary (as stored) and its
 * f32 copy (16-bit dictionaries only) are counted.
 */
export async function openSae(args: ParsedArgs): Promise<Sae> {
  const path = await resolveSae(requireValue(args, 'sae'), hubEnv());
  const hook = args.values.get('hook');
  const sae = loadSae(path, hook ? { hookName: hook } : {});
  if (sae.config.normalizeActivations === 'none') f32Weights(sae);
  return sae;
}

export interface SaeRun {
  /** [T, d_in] the stream at the hook point */
  x: Float32Array;
  /** [T, d_sae] */
  acts: Float32Array;
  /** [T, d_in] */
  recon: Float32Array;
  /** [T, vocab] logits with the reconstruction spliced in (when asked), else the clean logits at the asked positions */
  logits: Float32Array;
  /** clean logits [T, vocab], when `spliced` was asked */
  cleanLogits?: Float32Array;
}

/** One sequence through the model with the SAE at its hook point. `spliced`: also the logits with the reconstruction in place of the stream. */
export async function runSae(engine: OnnxEngine, sae: Sae, ids: number[], opts: { spliced: boolean }): Promise<SaeRun> {
  const point = engineHookPoint(sae.config.hookName, engine.numLayers).name;
  const T = ids.length;
  const inGraph = sae.config.normalizeActivations === 'none';
  const logitsAt = opts.spliced ? 'all' : 'last';
  const clean = await engine.runWithCache(ids, { names: [point], logitsAt, ...(inGraph ? { saes: [{ sae, hook: point }] } : {}) });
  const x = clean.cache.get(point).data;
  const enc = inGraph ? { acts: clean.cache.get(`${point}.sae_acts`).data, norm: null } : encode(sae, x, T);
  const recon = decode(sae, enc.acts, T, enc.norm);
  if (!opts.spliced) return { x, acts: enc.acts, recon, logits: clean.logits };
  const spliced = inGraph
    ? await engine.runWithCache(ids, { logitsAt, saes: [{ sae, hook: point, splice: 'reconstruction', captureActs: false }] })
    : await engine.runWithCache(ids, { logitsAt, hooks: [{ hook: point, kind: 'patch', from: new ActivationCache([[point, { data: recon, shape: [T, sae.config.dIn] }]]) }] });
  return { x, acts: enc.acts, recon, logits: spliced.logits, cleanLogits: clean.logits };
}

/** `--edit ablate:J,clamp:J=V,add:J=A` → feature edits (checked against the SAE later). */
export function parseFeatureEdits(spec: string): FeatureEdit[] {
  if (spec.length > 10_000) throw new SafekeepError('--edit: too long');
  return spec.split(',').map((part) => {
    const m = /^(ablate|clamp|add):(\d+)(?:=(.+))?$/.exec(part.trim());
    if (!m) throw new SafekeepError(`--edit: '${part}' is not ablate:FEATURE, clamp:FEATURE=VALUE or add:FEATURE=ALPHA`);
    const feature = Number(m[2]);
    const value = m[3] === undefined ? NaN : Number(m[3]);
    if (m[1] === 'ablate') {
      if (m[3] !== undefined) throw new SafekeepError(`--edit: '${part}': ablate takes no value`);
      return { kind: 'ablate' as const, feature };
    }
    if (!Number.isFinite(value)) throw new SafekeepError(`--edit: '${part}': ${m[1]} needs a finite number after '='`);
    return m[1] === 'clamp' ? { kind: 'clamp' as const, feature, value } : { kind: 'add' as const, feature, alpha: value };
  });
}
