/**
 * Named hook points: the activations inside each decoder block a caller may read (capture) or edit, and the one
 * name grammar for them, `blocks.<layer>.<point>` (layer 0..L−1), with `*` globs.
 *
 * | name                 | shape per sequence | what (x = the residual stream entering block l)            | TransformerLens          |
 * | -------------------- | ------------------ | ---------------------------------------------------------- | ------------------------ |
 * | blocks.l.resid_pre   | [T, d]             | x = hidden[l]                                             | blocks.l.hook_resid_pre  |
 * | blocks.l.z           | [T, H, hd]         | per-head attention output softmax(qkᵀ/√hd + mask)·v         | blocks.l.attn.hook_z     |
 * | blocks.l.pattern     | [H, T, S]          | attention probabilities (S = keys: cached + these T tokens)  | blocks.l.attn.hook_pattern |
 * | blocks.l.attn_out    | [T, d]             | o_proj(z)                                                  | blocks.l.hook_attn_out   |
 * | blocks.l.resid_mid   | [T, d]             | x + attn_out                                               | blocks.l.hook_resid_mid  |
 * | blocks.l.mlp_out     | [T, d]             | down(silu(gate(h)) ⊙ up(h)), h = norm(resid_mid)            | blocks.l.hook_mlp_out    |
 * | blocks.l.resid_post  | [T, d]             | resid_mid + mlp_out (+ the steering / hidden[l+1] edits)   | blocks.l.hook_resid_post |
 *
 * hidden[l+1] (the engine's residual-stream convention) IS blocks.l.resid_post, and blocks.l.resid_pre is hidden[l]
 * (so blocks.(l+1).resid_pre equals blocks.l.resid_post unless an edit sits between them). An edit at a hook point
 * changes everything downstream of it. `pattern` is read-only (a layer whose pattern is read runs the standard
 * attention ops, which form the probabilities, instead of a fused kernel).
 *
 * In the graph, a captured point is one extra output `hook.<name>` [BT, width] ([B, H, T, S] for pattern); an edited
 * point reads four extra inputs and becomes x' = project(x ⊙ keep + set) (graph/hook-edit.ts). Neither exists
 * unless asked for: the selection is part of the graph and of its cache key, so a call without hooks runs the very
 * graph it ran before.
 */
import { SafekeepError } from '../../util/errors.ts';
import type { SaeGraphSpec } from './sae-splice.ts';

export const HOOK_POINTS = ['resid_pre', 'z', 'pattern', 'attn_out', 'resid_mid', 'mlp_out', 'resid_post'] as const;
export type HookPoint = (typeof HOOK_POINTS)[number];

/** The points an edit may target (pattern is read-only). */
export const EDITABLE_POINTS: readonly HookPoint[] = HOOK_POINTS.filter((p) => p !== 'pattern');

/** The model shape the hook names and widths depend on. */
export interface HookShape {
  numLayers: number;
  hiddenSize: number;
  numHeads: number;
  headDim: number;
}

export const hookName = (layer: number, point: HookPoint): string => `blocks.${layer}.${point}`;

/** The TransformerLens name (`model.hook_dict` key) of a point, as in the table above. */
export const transformerLensName = (layer: number, point: HookPoint): string =>
  point === 'z' || point === 'pattern' ? `blocks.${layer}.attn.hook_${point}` : `blocks.${layer}.hook_${point}`;

/** A concrete name split into its parts, or a SafekeepError naming the grammar. */
export function parseHookName(name: string, shape: Pick<HookShape, 'numLayers'>): { layer: number; point: HookPoint } {
  const m = /^blocks\.(\d+)\.([a-z_]+)$/.exec(name);
  const point = m?.[2] as HookPoint | undefined;
  if (!m || !point || !HOOK_POINTS.includes(point)) {
    throw new SafekeepError(`hook point '${name}': names are blocks.<layer>.<point>, point one of ${HOOK_POINTS.join(', ')}`);
  }
  const layer = Number(m[1]);
  if (layer >= shape.numLayers) throw new SafekeepError(`hook point '${name}': layer ${layer} is not in 0..${shape.numLayers - 1}`);
  return { layer, point };
}

/** Every hook name of the model, in graph order (layer by layer, points in computation order). */
export function allHookNames(shape: Pick<HookShape, 'numLayers'>): string[] {
  const order: HookPoint[] = ['resid_pre', 'z', 'pattern', 'attn_out', 'resid_mid', 'mlp_out', 'resid_post'];
  return Array.from({ length: shape.numLayers }, (_, l) => order.map((p) => hookName(l, p))).flat();
}

/** `*` matches any run of characters within one dot-separated part (`blocks.*.attn_out`, `blocks.1*.z`). */
function globRegex(pattern: string): RegExp {
  const body = pattern.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('[^.]*');
  return new RegExp(`^${body}$`);
}

/**
 * The concrete names that the patterns select, in graph order, each once. A pattern that matches nothing is an
 * error (a typo would otherwise silently capture nothing).
 */
export function resolveHookNames(patterns: readonly string[], shape: Pick<HookShape, 'numLayers'>): string[] {
  const all = allHookNames(shape);
  const chosen = new Set<string>();
  for (const p of patterns) {
    if (typeof p !== 'string' || p.length === 0 || p.length > 200) throw new SafekeepError('hook names must be non-empty strings');
    if (!p.includes('*')) { parseHookName(p, shape); chosen.add(p); continue; }
    const re = globRegex(p);
    const hits = all.filter((n) => re.test(n));
    if (hits.length === 0) throw new SafekeepError(`hook pattern '${p}' matches no hook point (names are blocks.<layer>.<point>, point one of ${HOOK_POINTS.join(', ')})`);
    hits.forEach((n) => chosen.add(n));
  }
  return all.filter((n) => chosen.has(n));
}

/** Columns of a point per token ([T, width] rows in the graph): d for the residual-stream points, H·hd for z. */
export function hookWidth(point: HookPoint, shape: HookShape): number {
  if (point === 'pattern') throw new Error('hooks: pattern has no fixed width');
  return point === 'z' ? shape.numHeads * shape.headDim : shape.hiddenSize;
}

/**
 * Which points the graph exposes: captured (an output each) and edited (inputs each). Names are concrete. `sae`:
 * sparse autoencoders spliced at points (graph/sae-splice.ts), after that point's edit and before its capture.
 */
export interface HookSelection {
  capture: readonly string[];
  edit: readonly string[];
  sae?: readonly SaeGraphSpec[];
}

export const NO_HOOKS: HookSelection = { capture: [], edit: [] };

export function hasHooks(sel: HookSelection | undefined): sel is HookSelection {
  return !!sel && (sel.capture.length > 0 || sel.edit.length > 0 || (sel.sae?.length ?? 0) > 0);
}

/** The selection's share of the graph-cache key ('' without hooks: the key stays what it was; without SAEs too). */
export function hookSelectionKey(sel: HookSelection | undefined): string {
  if (!hasHooks(sel)) return '';
  // sae2: the SAE edit inputs take one row per token row (an older cached graph fixed them at one row)
  const sae = sel.sae?.length ? ` sae2=${JSON.stringify([...sel.sae].sort((a, b) => (a.hook < b.hook ? -1 : 1)))}` : '';
  return `hooks capture=${[...sel.capture].sort().join(',')} edit=${[...sel.edit].sort().join(',')}${sae}\n`;
}

/** Graph I/O names of the hook points. */
export const HOOK_IO = {
  /** f32 [BT, width] (pattern: [B, H, T, S]) */
  output: (name: string) => `hook.${name}`,
  /** f32 [BT or 1, width]: x ⊙ keep */
  keep: (name: string) => `hook_keep.${name}`,
  /** f32 [BT or 1, width]: + set */
  set: (name: string) => `hook_set.${name}`,
  /** f32 [S, width], S = 1 or one per token row: unit direction r̂ (zeros = no projection) */
  dir: (name: string) => `hook_dir.${name}`,
  /** f32 [S, 1]: then x·r̂ is set to value */
  value: (name: string) => `hook_value.${name}`,
} as const;
