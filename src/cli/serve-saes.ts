/**
 * `serve --model --allow-interventions --sae NAME=DIR[,NAME=DIR]`: the sparse autoencoders a research request may
 * splice in by name (src/serve/research-sae.ts). The operator names the folders here, at start; a request names only
 * a NAME, never a path (a server is a security boundary). Each is loaded and checked against the model before the
 * server listens: a bad name, a missing folder, an SAE at a point the model lacks, another width or an input
 * normalization the engine's graph does not build is one line and exit 2.
 */
import { SafekeepError } from '../util/errors.ts';
import { resolveSae } from '../hub/pull-sae.ts';
import { f32Weights } from '../engine/run/sae-hooks.ts';
import { engineHookPoint } from '../sae/hook.ts';
import { loadSae } from '../sae/load.ts';
import type { Sae } from '../sae/types.ts';
import { hubEnv } from './env.ts';

/** at most this many SAEs a server holds (each is resident memory) */
export const MAX_SERVER_SAES = 16;

/** `NAME=DIR,NAME=DIR` → [name, folder] pairs (names [A-Za-z0-9._-], 1..64 characters, each once) */
export function parseSaeList(v: string): [string, string][] {
  const parts = v.split(',').map((x) => x.trim());
  if (parts.length > MAX_SERVER_SAES) throw new SafekeepError(`--sae: at most ${MAX_SERVER_SAES} SAEs, got ${parts.length}`);
  const seen = new Set<string>();
  return parts.map((p) => {
    const m = /^([A-Za-z0-9._-]{1,64})=(.+)$/.exec(p);
    if (!m) throw new SafekeepError(`--sae: '${p.slice(0, 100)}' is not NAME=DIR (a name of letters, digits, . _ -, then the SAE's folder)`);
    if (seen.has(m[1]!)) throw new SafekeepError(`--sae: the name '${m[1]}' is given twice`);
    seen.add(m[1]!);
    return [m[1]!, m[2]!];
  });
}

/**
 * The SAEs of `--sae`, loaded (their f32 weights made, so a --max-memory plan opened after counts them) — call it
 * before the engine opens; `checkServerSaes` then checks them against the model.
 */
export async function openServerSaes(v: string): Promise<Map<string, Sae>> {
  const out = new Map<string, Sae>();
  for (const [name, dir] of parseSaeList(v)) {
    const sae = loadSae(await resolveSae(dir, hubEnv()));
    if (sae.config.normalizeActivations !== 'none') throw new SafekeepError(`--sae ${name}: normalize_activations ${sae.config.normalizeActivations} is not built into the engine's graph; generation cannot splice this SAE`);
    f32Weights(sae);
    out.set(name, sae);
  }
  return out;
}

/** every SAE at a hook point of this model, of its width */
export function checkServerSaes(saes: ReadonlyMap<string, Sae>, numLayers: number, dModel: number): void {
  for (const [name, sae] of saes) {
    const { name: point } = engineHookPoint(sae.config.hookName, numLayers, `--sae ${name}`);
    if (sae.config.dIn !== dModel) throw new SafekeepError(`--sae ${name}: d_in ${sae.config.dIn} is not the model's width ${dModel} at ${point}`);
  }
}
