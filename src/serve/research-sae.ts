/**
 * The research field's `saes` (docs/serve-research.md): sparse autoencoders the SERVER loaded at start (`serve --sae
 * NAME=DIR`), spliced into this request's generation by name with feature edits. A client names a dictionary, never a
 * path: a server with no `--sae` refuses the field, an unknown name is a 400 listing the loaded ones. Bounds, each a
 * 400 naming its field before any generation: at most one entry per loaded SAE (each name once), at most
 * MAX_SAE_EDITS edits an SAE, a feature an integer in 0..d_sae−1, a clamp's value and an add's α finite with
 * |x| ≤ MAX_ALPHA (the steering bound), the adds at one SAE together of norm ≤ MAX_ALPHA, one SAE a hook point;
 * unknown keys refused by name.
 */
import { SafekeepError } from '../util/errors.ts';
import { badRequest } from '../http/errors.ts';
import type { FeatureEdit } from '../sae/math.ts';
import type { Sae } from '../sae/types.ts';
import { alphaValue, isObject, knownFields, shown, type Fail } from '../engine/run/intervention-json.ts';
import { saeGenerationHooks } from '../engine/run/sae-rows.ts';
import type { SaeAttachment } from '../engine/run/sae-hooks.ts';

/** feature edits per SAE in one request */
export const MAX_SAE_EDITS = 64;

const SPLICES = ['error', 'reconstruction'] as const;
const fail: Fail = (message) => { throw badRequest(message); };

function parseEdit(v: unknown, dSae: number, at: string): FeatureEdit {
  if (!isObject(v)) throw badRequest(`${at} must be {"kind": "ablate" | "clamp" | "add", "feature", "value" (clamp) | "alpha" (add)}`);
  const kind = v.kind;
  if (kind !== 'ablate' && kind !== 'clamp' && kind !== 'add') throw badRequest(`${at}.kind must be one of ablate, clamp, add, got ${shown(kind)}`);
  knownFields(v, kind === 'ablate' ? ['kind', 'feature'] : kind === 'clamp' ? ['kind', 'feature', 'value'] : ['kind', 'feature', 'alpha'], at, fail);
  const feature = v.feature;
  if (!Number.isInteger(feature) || (feature as number) < 0 || (feature as number) >= dSae) throw badRequest(`${at}.feature must be an integer in 0..${dSae - 1} (this SAE's features), got ${shown(feature)}`);
  const j = feature as number;
  if (kind === 'ablate') return { kind, feature: j };
  if (kind === 'clamp') return { kind, feature: j, value: alphaValue(v.value, `${at}.value`, fail) };
  return { kind, feature: j, alpha: alphaValue(v.alpha, `${at}.alpha`, fail) };
}

/**
 * `safekeep.saes` → the generation's SAE attachments, checked as the engine checks them (the client's 400, not a 500
 * mid-batch). `loaded`: the server's dictionaries by name; `numLayers`, `dModel`: the model's.
 */
export function parseSaesField(v: unknown, loaded: ReadonlyMap<string, Sae> | undefined, numLayers: number, dModel: number): SaeAttachment[] {
  const at = 'safekeep.saes';
  if (!loaded || loaded.size === 0) throw badRequest(`${at}: this server has no SAEs (start it with --sae NAME=DIR)`);
  if (!Array.isArray(v) || v.length === 0) throw badRequest(`${at} must be a non-empty array of {"name", "edits", "splice"}`);
  if (v.length > loaded.size) throw badRequest(`${at}: ${v.length} entries; this server has ${loaded.size} SAEs, each named at most once`);
  const seen = new Set<string>();
  const list = v.map((x, i): SaeAttachment => {
    const here = `${at}[${i}]`;
    if (!isObject(x)) throw badRequest(`${here} must be {"name", "edits", "splice"}`);
    knownFields(x, ['name', 'edits', 'splice'], here, fail);
    if (typeof x.name !== 'string') throw badRequest(`${here}.name must be the name of one of this server's SAEs`);
    const sae = loaded.get(x.name);
    if (!sae) throw badRequest(`${here}.name: no SAE ${shown(x.name)} (this server has ${[...loaded.keys()].join(', ')})`);
    if (seen.has(x.name)) throw badRequest(`${here}.name: ${shown(x.name)} named twice`);
    seen.add(x.name);
    if (x.splice !== undefined && !SPLICES.includes(x.splice as never)) throw badRequest(`${here}.splice must be "error" (the default: only the edits change the stream) or "reconstruction", got ${shown(x.splice)}`);
    if (x.edits !== undefined && !Array.isArray(x.edits)) throw badRequest(`${here}.edits must be an array`);
    const raw = (x.edits ?? []) as unknown[];
    if (raw.length > MAX_SAE_EDITS) throw badRequest(`${here}.edits: at most ${MAX_SAE_EDITS}, got ${raw.length}`);
    const edits = raw.map((e, k) => parseEdit(e, sae.config.dSae, `${here}.edits[${k}]`));
    return { sae, edits, splice: (x.splice as SaeAttachment['splice']) ?? 'error' };
  });
  try {
    saeGenerationHooks(list, numLayers, dModel);
  } catch (e) {
    if (e instanceof SafekeepError) throw badRequest(`${at}: ${e.message}`);
    throw e;
  }
  return list;
}
