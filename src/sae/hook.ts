/**
 * SAE hook names (TransformerLens's, as SAELens writes them in cfg.json) → the engine's hook points and hidden-state
 * rows: blocks.l.hook_resid_post → blocks.l.resid_post = hidden[l+1]; blocks.l.hook_resid_pre → blocks.l.resid_pre =
 * hidden[l]; hook_resid_mid, hook_attn_out, hook_mlp_out → their points (no hidden row). hook_z (attn.hook_z, per
 * head) and hook_embed are refused by name. The engine's own names are accepted as they are.
 */
import { SafekeepError } from '../util/errors.ts';

const POINTS: Record<string, string> = {
  hook_resid_pre: 'resid_pre', hook_resid_post: 'resid_post', hook_resid_mid: 'resid_mid', hook_attn_out: 'attn_out', hook_mlp_out: 'mlp_out',
  resid_pre: 'resid_pre', resid_post: 'resid_post', resid_mid: 'resid_mid', attn_out: 'attn_out', mlp_out: 'mlp_out',
};

/** The engine hook point of an SAE hook name (`blocks.12.hook_resid_post` → `blocks.12.resid_post`). */
export function engineHookPoint(hookName: string | null, numLayers: number, what = 'SAE'): { name: string; layer: number; point: string } {
  if (!hookName) throw new SafekeepError(`${what}: its files name no hook point; give one (--hook blocks.<l>.hook_resid_post)`);
  const m = /^blocks\.(\d+)\.(?:attn\.)?([a-z_]+)$/.exec(hookName);
  const point = m ? POINTS[m[2]!] : undefined;
  if (!m || !point) throw new SafekeepError(`${what}: hook '${hookName}' is not read (blocks.<l>.hook_resid_pre|hook_resid_mid|hook_attn_out|hook_mlp_out|hook_resid_post; hook_z needs per-head reshaping, not implemented)`);
  const layer = Number(m[1]);
  if (layer >= numLayers) throw new SafekeepError(`${what}: hook '${hookName}' names layer ${layer}; the model has blocks 0..${numLayers - 1}`);
  return { name: `blocks.${layer}.${point}`, layer, point };
}

/** hidden[] row of a residual-stream hook (resid_post l → l + 1, resid_pre l → l), null for the other points. */
export function hiddenRowOf(hookName: string | null, numLayers: number, what = 'SAE'): number | null {
  const { layer, point } = engineHookPoint(hookName, numLayers, what);
  return point === 'resid_post' ? layer + 1 : point === 'resid_pre' ? layer : null;
}
