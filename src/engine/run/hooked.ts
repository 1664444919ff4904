/**
 * `runWithCache`: one forward of one sequence on the graph with the hook points it needs (graph/hooks.ts), returning
 * the captured activations as an ActivationCache; and the edits at hook points (`HookIntervention`) turned into that
 * graph's inputs (graph/hook-edit.ts: x' = project(x ⊙ keep + set)).
 *
 * Edits at one hook point apply in this order: patches, head ablations, adds, then at most one ablate/clamp — the
 * same "adds first, then one projection" rule as the residual-stream interventions (types.ts `Intervention`).
 */
import { SafekeepError } from '../../util/errors.ts';
import { EDITABLE_POINTS, HOOK_IO, hasHooks, hookWidth, parseHookName, resolveHookNames, type HookPoint, type HookShape } from '../graph/hooks.ts';
import type { HookIntervention, Intervention, PositionSelector, Steering } from './types.ts';
import { ActivationCache, type Activation } from './activation-cache.ts';
import { callInterventions, interventionInputs, rowNorm, selectPositions } from './batch.ts';
import { ALPHA_RULE, MAX_ALPHA } from './intervention-json.ts';
import { checkIds } from './forward.ts';
import type { StepHooks, Stepper } from './step.ts';
import { saeHookInputs, type SaeAttachment } from './sae-hooks.ts';
import { SAE_IO } from '../graph/sae-splice.ts';

export type { ActivationSource, HookIntervention } from './types.ts';

export const HOOK_INTERVENTION_KINDS = ['add', 'ablate', 'clamp', 'patch', 'ablate_heads'] as const;

export interface RunWithCacheOptions {
  /** hook names or globs to cache (default none) */
  names?: readonly string[];
  /** edits at hook points */
  hooks?: readonly HookIntervention[];
  /** residual-stream steering / interventions (types.ts), applied as in forward() */
  steer?: Steering;
  interventions?: Intervention[];
  /** positions whose logits are returned (default 'all') */
  logitsAt?: PositionSelector;
  /**
   * sparse autoencoders at hook points (run/sae-hooks.ts): their activations cached as `<point>.sae_acts` [T, d_sae],
   * the reconstruction spliced in, feature edits
   */
  saes?: readonly SaeAttachment[];
}

export interface RunWithCacheResult {
  /** [logitPositions.length, vocab] */
  logits: Float32Array;
  logitPositions: number[];
  cache: ActivationCache;
}

const shapeOf = (s: Stepper): HookShape => ({ numLayers: s.numLayers, hiddenSize: s.dModel, numHeads: s.config.numHeads, headDim: s.config.headDim });

export async function runWithCache(s: Stepper, ids: number[], opts: RunWithCacheOptions = {}): Promise<RunWithCacheResult> {
  checkIds([ids], s.vocabSize);
  const shape = shapeOf(s);
  const T = ids.length;
  const capture = resolveHookNames(opts.names ?? [], shape);
  const edits = hookEditInputs(opts.hooks ?? [], shape, T);
  const iv = interventionInputs(s.numLayers, s.dModel, callInterventions(opts));
  const logitPos = selectPositions(opts.logitsAt, T, 'logitsAt');
  const sae = opts.saes?.length ? saeHookInputs(opts.saes, s.numLayers, s.dModel) : null;
  const selection = { capture, edit: edits.names, ...(sae ? { sae: sae.specs } : {}) };
  if (sae) Object.assign(edits.feeds, sae.feeds);
  // one step on the whole sequence (no chunking: a pattern needs every key of the step); no hook point: the plain graph
  const out = await s.step({
    ids: BigInt64Array.from(ids, BigInt), batch: 1, width: T, starts: [0], past: null, steer: iv.steer, project: iv,
    hiddenIndex: [], logitsIndex: logitPos, wantPresent: false,
    ...(hasHooks(selection) ? { hooks: { selection, feeds: edits.feeds } } : {}),
  });
  const { numHeads: H, headDim: hd } = s.config;
  const cache = new ActivationCache(capture.map((name): [string, Activation] => {
    const o = out.hooks?.[HOOK_IO.output(name)];
    if (!o) throw new Error(`runWithCache: the step returned no ${name}`);
    const { point } = parseHookName(name, shape);
    const dims = point === 'pattern' ? [H, T, o.dims[3]!] : point === 'z' ? [T, H, hd] : [T, s.dModel];
    return [name, { data: o.data, shape: dims }];
  }).concat((sae?.acts ?? []).map((name): [string, Activation] => {
    const o = out.hooks?.[SAE_IO.acts(name.slice(0, -'.sae_acts'.length))];
    if (!o) throw new Error(`runWithCache: the step returned no ${name}`);
    return [name, { data: o.data, shape: [T, o.dims[1]!] }];
  })));
  return { logits: out.logits, logitPositions: logitPos, cache };
}

/**
 * Edits for generation (every prompt position and generated token): as graph inputs broadcast over the tokens, so
 * the same feeds serve the prefill, its chunks and every decode step. undefined without edits.
 */
export function generationHooks(s: Stepper, list: readonly HookIntervention[] | undefined): StepHooks | undefined {
  if (!list || list.length === 0) return undefined;
  list.forEach((iv, i) => {
    if (iv?.kind === 'patch' || (iv && 'positions' in iv && iv.positions !== undefined)) {
      throw new SafekeepError(`hook intervention ${i} (${iv.kind} at ${iv.hook}): generation edits every position; patch and positions are for runWithCache`);
    }
  });
  const edits = hookEditInputs(list, shapeOf(s), 1);
  return { selection: { capture: [], edit: edits.names }, feeds: edits.feeds };
}

/** The edits of a call as the hooked graph's inputs: the edited names and keep/set/dir/value per name. */
export function hookEditInputs(list: readonly HookIntervention[], shape: HookShape, T: number): { names: string[]; feeds: StepHooks['feeds'] } {
  const byName = new Map<string, { point: HookPoint; items: { iv: HookIntervention; what: string }[] }>();
  list.forEach((iv, i) => {
    const what = `hook intervention ${i} (${String(iv?.kind)} at ${String(iv?.hook)})`;
    if (!iv || !(HOOK_INTERVENTION_KINDS as readonly string[]).includes(iv.kind)) throw new SafekeepError(`${what}: kind must be one of ${HOOK_INTERVENTION_KINDS.join(', ')}`);
    for (const name of resolveHookNames([iv.hook], shape)) {
      const { point } = parseHookName(name, shape);
      if (!EDITABLE_POINTS.includes(point)) throw new SafekeepError(`${what}: ${name} is read-only (edit z or the residual-stream points)`);
      if (iv.kind === 'ablate_heads' && point !== 'z') throw new SafekeepError(`${what}: ablate_heads edits z points, not ${name}`);
      const e = byName.get(name) ?? { point, items: [] };
      e.items.push({ iv, what });
      byName.set(name, e);
    }
  });
  const feeds: StepHooks['feeds'] = {};
  const rank = { patch: 0, ablate_heads: 1, add: 2, ablate: 3, clamp: 3 } as const;
  for (const [name, { point, items }] of byName) {
    const w = hookWidth(point, shape);
    const positional = items.some(({ iv }) => iv.kind === 'patch' || ('positions' in iv && iv.positions !== undefined));
    const rows = positional ? T : 1;
    const keep = new Float32Array(rows * w).fill(1);
    const set = new Float32Array(rows * w);
    const dir = new Float32Array(w);
    const value = new Float32Array(1);
    let projected = false;
    const rowsOf = (what: string, positions: number[] | undefined) => rows === 1 ? [0] : selectPositions(positions ?? 'all', T, `${what}: positions`);
    for (const { iv, what } of [...items].sort((a, b) => rank[a.iv.kind] - rank[b.iv.kind])) {
      if (iv.kind === 'patch') {
        if (!iv.from || typeof iv.from.get !== 'function') throw new SafekeepError(`${what}: 'from' must be an ActivationCache`);
        const src = iv.from.get(name);
        if (src.data.length % w !== 0 || src.shape.length < 1) throw new SafekeepError(`${what}: the source's ${name} has shape [${src.shape}], not [T, …] of width ${w}`);
        const srcT = src.data.length / w;
        for (const p of rowsOf(what, iv.positions)) {
          if (p >= srcT) throw new SafekeepError(`${what}: position ${p} is outside the source's ${srcT} tokens`);
          keep.fill(0, p * w, (p + 1) * w);
          set.set(src.data.subarray(p * w, (p + 1) * w), p * w);
        }
      } else if (iv.kind === 'ablate_heads') {
        const { numHeads: H, headDim: hd } = shape;
        if (!Array.isArray(iv.heads) || iv.heads.length === 0) throw new SafekeepError(`${what}: heads must be a non-empty list of head indices`);
        for (const h of iv.heads) {
          if (!Number.isInteger(h) || h < 0 || h >= H) throw new SafekeepError(`${what}: head ${h} is not in 0..${H - 1}`);
          for (const p of rowsOf(what, iv.positions)) { keep.fill(0, p * w + h * hd, p * w + (h + 1) * hd); set.fill(0, p * w + h * hd, p * w + (h + 1) * hd); }
        }
      } else {
        const u = unitVector(iv.vector, w, what);
        if (iv.kind !== 'ablate' && (!Number.isFinite(iv.alpha) || Math.abs(iv.alpha) > MAX_ALPHA)) throw new SafekeepError(`${what}: alpha ${ALPHA_RULE}, got ${iv.alpha}`);
        if (iv.kind === 'add') {
          for (const p of rowsOf(what, iv.positions)) {
            for (let i = 0; i < w; i++) set[p * w + i] = set[p * w + i]! + iv.alpha * u[i]!;
            // the adds at one point together (MAX_ALPHA says why)
            if (rowNorm(set, p * w, w) > MAX_ALPHA) throw new SafekeepError(`${what}: the adds at ${name} together have norm above ${MAX_ALPHA.toExponential()}, which overflows float32 in the model's norms; use smaller alphas`);
          }
        } else {
          if (projected) throw new SafekeepError(`${what}: a second ablate/clamp at ${name}; one per hook point (combine the directions first)`);
          if ('positions' in iv && iv.positions !== undefined) throw new SafekeepError(`${what}: ablate and clamp apply at every position`);
          projected = true;
          dir.set(u);
          value[0] = iv.kind === 'clamp' ? iv.alpha : 0;
        }
      }
    }
    feeds[HOOK_IO.keep(name)] = { data: keep, dims: [rows, w] };
    feeds[HOOK_IO.set(name)] = { data: set, dims: [rows, w] };
    feeds[HOOK_IO.dir(name)] = { data: dir, dims: [1, w] };
    feeds[HOOK_IO.value(name)] = { data: value, dims: [1, 1] };
  }
  return { names: [...byName.keys()], feeds };
}

/** vector/|vector| as f32 [w], or a SafekeepError (wrong width, non-finite, zero) */
function unitVector(v: ArrayLike<number>, w: number, what: string): Float32Array {
  if (!v || v.length !== w) throw new SafekeepError(`${what}: vector has ${v?.length} values, the hook point's width is ${w}`);
  let n = 0;
  for (let i = 0; i < w; i++) {
    const x = Number(v[i]);
    if (!Number.isFinite(x)) throw new SafekeepError(`${what}: vector value ${i} is not a finite number`);
    n += x * x;
  }
  if (n === 0) throw new SafekeepError(`${what}: vector is all zeros`);
  n = Math.sqrt(n);
  return Float32Array.from({ length: w }, (_, i) => Number(v[i]) / n);
}
