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
import { choiceValue, requireValue } from './args.ts';
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
  /** the clean logits at `logitsAt` */
  logits: Float32Array;
}

/** One sequence through the model with the SAE at its hook point: the stream there, the activations, the reconstruction. */
export async function runSae(engine: OnnxEngine, sae: Sae, ids: number[], logitsAt: 'last' | 'all' = 'last'): Promise<SaeRun> {
  const point = engineHookPoint(sae.config.hookName, engine.numLayers).name;
  const inGraph = sae.config.normalizeActivations === 'none';
  const clean = await engine.runWithCache(ids, { names: [point], logitsAt, ...(inGraph ? { saes: [{ sae, hook: point }] } : {}) });
  const x = clean.cache.get(point).data;
  const enc = inGraph ? { acts: clean.cache.get(`${point}.sae_acts`).data, norm: null } : encode(sae, x, ids.length);
  return { x, acts: enc.acts, recon: decode(sae, enc.acts, ids.length, enc.norm), logits: clean.logits };
}

/**
 * The logits [T, vocab] with the stream at the SAE's hook replaced: by the reconstruction (in the graph, or `recon`
 * patched in when the SAE normalizes its input), or by zeros (SAELens's zero-ablation baseline of the CE loss
 * score). Callers run one kind over all their prompts before the next, so each kind's graph session stays open
 * (an engine keeps two hook-point sessions).
 */
export async function replacedLogits(engine: OnnxEngine, sae: Sae, ids: number[], by: 'reconstruction' | 'zero', recon?: Float32Array): Promise<Float32Array> {
  const point = engineHookPoint(sae.config.hookName, engine.numLayers).name;
  const T = ids.length;
  const patch = (data: Float32Array) => engine.runWithCache(ids, { logitsAt: 'all', hooks: [{ hook: point, kind: 'patch', from: new ActivationCache([[point, { data, shape: [T, sae.config.dIn] }]]) }] });
  if (by === 'zero') return (await patch(new Float32Array(T * sae.config.dIn))).logits;
  if (sae.config.normalizeActivations === 'none') return (await engine.runWithCache(ids, { logitsAt: 'all', saes: [{ sae, hook: point, splice: 'reconstruction', captureActs: false }] })).logits;
  if (!recon) throw new Error('replacedLogits: an SAE with input normalization needs its reconstruction');
  return (await patch(recon)).logits;
}

/**
 * `--edit ablate:J,clamp:J=V,add:J=A` → feature edits (checked against the SAE later); `flag` names the flag in errors
 * (`sae encode --edit`, `generate --sae-edit`: one syntax).
 */
export function parseFeatureEdits(spec: string, flag = 'edit'): FeatureEdit[] {
  if (spec.length > 10_000) throw new SafekeepError(`--${flag}: too long`);
  return spec.split(',').map((part) => {
    const m = /^(ablate|clamp|add):(\d+)(?:=(.+))?$/.exec(part.trim());
    if (!m) throw new SafekeepError(`--${flag}: '${part}' is not ablate:FEATURE, clamp:FEATURE=VALUE or add:FEATURE=ALPHA`);
    const feature = Number(m[2]);
    const value = m[3] === undefined ? NaN : Number(m[3]);
    if (m[1] === 'ablate') {
      if (m[3] !== undefined) throw new SafekeepError(`--${flag}: '${part}': ablate takes no value`);
      return { kind: 'ablate' as const, feature };
    }
    if (!Number.isFinite(value)) throw new SafekeepError(`--${flag}: '${part}': ${m[1]} needs a finite number after '='`);
    return m[1] === 'clamp' ? { kind: 'clamp' as const, feature, value } : { kind: 'add' as const, feature, alpha: value };
  });
}

/**
 * `generate`'s SAE flags checked before anything is loaded: `--sae-edit` (parseFeatureEdits) and `--sae-splice` need
 * `--sae`, and `--hook` too; null without `--sae`.
 */
export function saeGenerationFlags(args: ParsedArgs): { edits: FeatureEdit[]; splice: 'error' | 'reconstruction' } | null {
  if (!args.values.has('sae')) {
    const orphan = ['sae-edit', 'sae-splice', 'hook'].filter((f) => args.values.has(f));
    if (orphan.length) throw new SafekeepError(`${orphan.map((f) => `--${f}`).join(', ')} needs --sae`);
    return null;
  }
  const spec = args.values.get('sae-edit');
  return { edits: spec === undefined ? [] : parseFeatureEdits(spec, 'sae-edit'), splice: choiceValue(args, 'sae-splice', ['error', 'reconstruction'] as const, 'error') };
}
