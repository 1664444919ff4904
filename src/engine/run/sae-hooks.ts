/**
 * Sparse autoencoders attached to a run (`runWithCache(ids, { saes: [...] })`): each SAE at its hook point
 * (src/sae/hook.ts maps SAELens's names) as the graph's spliced SAE (graph/sae-splice.ts) and that graph's inputs —
 * the weights as f32 (a bf16 / f16 dictionary is widened once per SAE and kept beside it), the feature edits as
 * keep / set rows, the decoder-row adds summed into one row.
 *
 * Edits: `ablate` a feature (its activation 0), `clamp` it to a value, `add` α·W_dec[j] to the stream. Every token
 * of the call gets the same edits. The splice (`splice`): 'capture' reads the activations and leaves the stream
 * alone; 'error' (the default when there are edits) puts back decode(edited) + (x − decode(acts)), so an unedited
 * SAE leaves the model's output exact (SAELens `use_error_term`); 'reconstruction' puts back decode(edited) alone.
 */
import { SafekeepError } from '../../util/errors.ts';
import { checkEdit, decoderNorms, type FeatureEdit } from '../../sae/math.ts';
import { f32Matrices, rowInto } from '../../sae/matrix.ts';
import { engineHookPoint } from '../../sae/hook.ts';
import type { Sae } from '../../sae/types.ts';
import { SAE_IO, saeActsName, type SaeGraphSpec } from '../graph/sae-splice.ts';
import type { StepHooks } from './step.ts';

export type SaeSplice = SaeGraphSpec['splice'];

export interface SaeAttachment {
  sae: Sae;
  /** the hook point, when the SAE's files name none or another (SAELens or engine spelling) */
  hook?: string;
  /** default: 'error' with edits, else 'capture' */
  splice?: SaeSplice;
  edits?: readonly FeatureEdit[];
  /** cache the activations as `<point>.sae_acts` [T, d_sae] (default true) */
  captureActs?: boolean;
}

/**
 * The f32 weights the graph is fed (src/sae/matrix.ts `f32Matrices`: a widened copy for bf16 / f16, made once) and
 * |W_dec_j| for rescaled topk. Call it before creating an engine with a --max-memory budget so the plan, which counts
 * the process's resident bytes, counts the copy too.
 */
export function f32Weights(sae: Sae): { W_enc: Float32Array; W_dec: Float32Array; decNorm: Float32Array | null } {
  const rescale = sae.config.architecture === 'topk' && sae.config.rescaleActsByDecoderNorm;
  let decNorm = rescale ? norms.get(sae) ?? null : null;
  if (rescale && !decNorm) { decNorm = decoderNorms(sae); norms.set(sae, decNorm); }
  return { ...f32Matrices(sae), decNorm };
}

/** |W_dec_j| per rescaled-topk SAE, computed once */
const norms = new WeakMap<Sae, Float32Array>();

/** The attachments as graph specs and feeds; `acts`: the cache name of each captured point's activations. */
export function saeHookInputs(list: readonly SaeAttachment[], numLayers: number, dModel: number): { specs: SaeGraphSpec[]; feeds: StepHooks['feeds']; acts: string[] } {
  const specs: SaeGraphSpec[] = [];
  const feeds: StepHooks['feeds'] = {};
  const acts: string[] = [];
  list.forEach((a, i) => {
    const what = `SAE ${i}`;
    if (!a?.sae?.config) throw new SafekeepError(`${what}: not an SAE (load one with loadSae)`);
    const { config: c } = a.sae;
    const { name } = engineHookPoint(a.hook ?? c.hookName, numLayers, what);
    if (specs.some((s) => s.hook === name)) throw new SafekeepError(`${what}: a second SAE at ${name}; one per hook point`);
    if (c.dIn !== dModel) throw new SafekeepError(`${what}: d_in ${c.dIn} is not the model's width ${dModel} at ${name}`);
    if (c.normalizeActivations !== 'none') throw new SafekeepError(`${what}: normalize_activations ${c.normalizeActivations} is not built into the engine's graph (sae encode / features / eval read it)`);
    const edits = a.edits ?? [];
    edits.forEach((e) => checkEdit(a.sae, e));
    const splice = a.splice ?? (edits.length ? 'error' : 'capture');
    if (!['capture', 'error', 'reconstruction'].includes(splice)) throw new SafekeepError(`${what}: splice must be capture, error or reconstruction`);
    if (splice === 'capture' && edits.length) throw new SafekeepError(`${what}: feature edits need a splice ('error' keeps the rest of the stream exact)`);
    const captureActs = a.captureActs ?? true;
    specs.push({
      hook: name, architecture: c.architecture, dIn: c.dIn, dSae: c.dSae, k: c.k, applyBDecToInput: c.applyBDecToInput,
      rescaleActsByDecoderNorm: c.rescaleActsByDecoderNorm, splice, captureActs,
    });
    if (captureActs) acts.push(saeActsName(name));
    const w = f32Weights(a.sae);
    feeds[SAE_IO.W_enc(name)] = { data: w.W_enc, dims: [c.dIn, c.dSae] };
    feeds[SAE_IO.b_enc(name)] = { data: a.sae.b_enc, dims: [c.dSae] };
    feeds[SAE_IO.b_dec(name)] = { data: a.sae.b_dec, dims: [c.dIn] };
    if (c.architecture === 'jumprelu') feeds[SAE_IO.threshold(name)] = { data: a.sae.threshold!, dims: [c.dSae] };
    if (w.decNorm) feeds[SAE_IO.decNorm(name)] = { data: w.decNorm, dims: [c.dSae] };
    if (splice === 'capture') return;
    const keep = new Float32Array(c.dSae).fill(1);
    const set = new Float32Array(c.dSae);
    const add = new Float32Array(c.dIn);
    const row = new Float32Array(c.dIn);
    for (const e of edits) {
      if (e.kind === 'add') {
        rowInto(a.sae.W_dec, e.feature, row);
        for (let k = 0; k < c.dIn; k++) add[k] = add[k]! + e.alpha * row[k]!;
      } else {
        keep[e.feature] = 0;
        set[e.feature] = e.kind === 'clamp' ? e.value : 0;
      }
    }
    feeds[SAE_IO.W_dec(name)] = { data: w.W_dec, dims: [c.dSae, c.dIn] };
    feeds[SAE_IO.keep(name)] = { data: keep, dims: [1, c.dSae] };
    feeds[SAE_IO.set(name)] = { data: set, dims: [1, c.dSae] };
    feeds[SAE_IO.add(name)] = { data: add, dims: [1, c.dIn] };
  });
  return { specs, feeds, acts };
}
