/**
 * Sparse autoencoders during generation, per row: a generation request (`GenerateOptions.saes`) splices its SAEs
 * (run/sae-hooks.ts, graph/sae-splice.ts) at every prompt position and every generated token, with its own feature
 * edits — the same convention as steering. The SAE specs join the row's hook selection, so the row runs the graph of
 * that selection (prefilled as its own step, decoded with the rows of the same selection and dictionaries); within a
 * decode batch each row's edits are its own rows of the edit inputs keep / set / add ([B, ·], or [1, ·] when every
 * row agrees), so rows with different edits, or an unedited SAE (keep 1, set 0, add 0: the identity under the 'error'
 * splice), decode in one step. A row without SAEs runs the graph it always ran.
 *
 * Keys: an SAE's weight inputs are the same arrays for every row of a dictionary (sae-hooks.ts `f32Weights`), so a row
 * names them by identity (never hashing megabytes per request); its edit inputs by their values.
 */
import { SafekeepError } from '../../util/errors.ts';
import { HOOK_IO } from '../graph/hooks.ts';
import { SAE_IO } from '../graph/sae-splice.ts';
import { rowNorm } from './batch.ts';
import { ALPHA_RULE, MAX_ALPHA } from './intervention-json.ts';
import { saeHookInputs, type SaeAttachment } from './sae-hooks.ts';
import type { StepHooks } from './step.ts';

/** the inputs of an SAE at point p that carry a row's edits (one row each in a decode step whose rows differ) */
export const saeEditFeeds = (p: string): string[] => [SAE_IO.keep(p), SAE_IO.set(p), SAE_IO.add(p)];

const EDIT_PREFIXES = [HOOK_IO.keep(''), HOOK_IO.set(''), HOOK_IO.dir(''), HOOK_IO.value(''), SAE_IO.keep(''), SAE_IO.set(''), SAE_IO.add('')];

/** whether a hook feed carries edit values (hook edits, SAE edits) rather than an SAE's weights */
export const isEditFeed = (name: string): boolean => EDIT_PREFIXES.some((p) => name.startsWith(p));

const ids = new WeakMap<object, number>();
let nextId = 0;

/** a process-unique id of an object (an SAE's weight arrays: one per dictionary, see the module comment; an SAE) */
export function identityKey(a: object): string {
  let id = ids.get(a);
  if (id === undefined) { id = ++nextId; ids.set(a, id); }
  return `#${id}`;
}

/**
 * A generation's SAEs as hook-step inputs: their specs (splice 'error' unless asked; no activations captured) and
 * feeds, with the edits bounded as steering is (|α|, |value| ≤ MAX_ALPHA, the adds at one SAE of norm ≤ MAX_ALPHA).
 * undefined without SAEs.
 */
export function saeGenerationHooks(list: readonly SaeAttachment[] | undefined, numLayers: number, dModel: number): StepHooks | undefined {
  if (!list || list.length === 0) return undefined;
  if (!Array.isArray(list)) throw new SafekeepError('saes must be a list of SAE attachments');
  const attached = list.map((a, i) => {
    const what = `SAE ${i}`;
    if (a?.captureActs) throw new SafekeepError(`${what}: generation returns no SAE activations (runWithCache or sae encode capture them)`);
    if (a?.splice === 'capture') throw new SafekeepError(`${what}: splice 'capture' changes nothing in a generation; use 'error' (the default) or 'reconstruction'`);
    for (const e of a?.edits ?? []) {
      const v = e?.kind === 'clamp' ? e.value : e?.kind === 'add' ? e.alpha : 0;
      if (typeof v !== 'number' || !Number.isFinite(v) || Math.abs(v) > MAX_ALPHA) throw new SafekeepError(`${what}: feature edit (${String(e?.kind)} ${String(e?.feature)}): ${e?.kind === 'clamp' ? 'value' : 'alpha'} ${ALPHA_RULE}, got ${String(v)}`);
    }
    return { ...a, splice: a?.splice ?? 'error', captureActs: false };
  });
  const { specs, feeds } = saeHookInputs(attached, numLayers, dModel);
  for (const s of specs) {
    const add = feeds[SAE_IO.add(s.hook)];
    if (add && rowNorm(add.data, 0, add.data.length) > MAX_ALPHA) {
      throw new SafekeepError(`SAE at ${s.hook}: its decoder-row adds together have norm above ${MAX_ALPHA.toExponential()}, which overflows float32 in the model's norms; use smaller alphas`);
    }
  }
  return { selection: { capture: [], edit: [], sae: specs }, feeds };
}

/** Two hook-step inputs of one generation as one (hook edits and SAEs; either may be absent). */
export function mergeHooks(a: StepHooks | undefined, b: StepHooks | undefined): StepHooks | undefined {
  if (!a || !b) return a ?? b;
  const sae = [...(a.selection.sae ?? []), ...(b.selection.sae ?? [])];
  return {
    selection: { capture: [...a.selection.capture, ...b.selection.capture], edit: [...a.selection.edit, ...b.selection.edit], ...(sae.length ? { sae } : {}) },
    feeds: { ...a.feeds, ...b.feeds },
  };
}

/** the identity of a row's SAE weights (part of its decode group's key: rows of one group share the weight inputs) */
export function saeWeightsKey(h: StepHooks): string {
  if (!h.selection.sae?.length) return '';
  const names = Object.keys(h.feeds).filter((n) => n.startsWith('sae_') && !isEditFeed(n)).sort();
  return ` sae-weights=${names.map((n) => `${n}${identityKey(h.feeds[n]!.data)}`).join(',')}`;
}
