/**
 * The hook points of a selection (hooks.ts) in the graph. At an edited point x [BT, w] becomes
 *   x' = project(x ⊙ keep + set),  project(y) = y + (value − y·r̂) r̂   (a zero r̂ leaves y as it is)
 * with keep/set [BT, w] or [1, w] (broadcast over the tokens) and r̂ [S, w], value [S, 1], S = 1 (one projection for
 * every token) or BT (one per token row: a decode batch whose sequences edit differently; the [S, S] identity keeps
 * each token's own dot product, as graph/intervene.ts does for the residual stream): one form for every edit —
 * an add (keep 1, set α·r̂), a patch (keep 0 / set = the other run's values at the patched rows), a head ablation
 * (keep 0 on the head's columns of z), a directional ablation or clamp (r̂, value 0 or α). A captured point is
 * the graph output hook.<name>, the value after its edit (what flows downstream).
 */
import type { GraphBuilder } from './onnx/builder.ts';
import { DataType } from './onnx/proto.ts';
import { HOOK_IO, hookName, hookWidth, type HookPoint, type HookSelection, type HookShape } from './hooks.ts';
import { saeSplice } from './sae-splice.ts';

export interface HookPoints {
  /** whether point p of layer l is captured or edited (the decoder then keeps that value separate) */
  touches(layer: number, point: HookPoint): boolean;
  /** x [BT, w] at point p of layer l → x after its edit (x itself when the point is not edited), captured if asked */
  at(layer: number, point: HookPoint, x: string): string;
  /** whether the attention pattern of layer l is captured */
  wantsPattern(layer: number): boolean;
  /** probabilities [B, H, T, S] of layer l as the output hook.blocks.l.pattern */
  pattern(layer: number, probs: string): void;
}

export function hookPoints(g: GraphBuilder, sel: HookSelection, shape: HookShape): HookPoints {
  const capture = new Set(sel.capture);
  const edit = new Set(sel.edit);
  const sae = new Map((sel.sae ?? []).map((s) => [s.hook, s]));
  const F = DataType.FLOAT;
  return {
    touches: (l, p) => capture.has(hookName(l, p)) || edit.has(hookName(l, p)) || sae.has(hookName(l, p)),
    at(l, p, x) {
      const name = hookName(l, p);
      let y = x;
      if (edit.has(name)) {
        const w = hookWidth(p, shape);
        const keep = g.input(HOOK_IO.keep(name), F, ['hook_rows', w]);
        const set = g.input(HOOK_IO.set(name), F, ['hook_rows', w]);
        const dir = g.input(HOOK_IO.dir(name), F, ['hook_sets', w]);
        const value = g.input(HOOK_IO.value(name), F, ['hook_sets', 1]);
        const kept = g.op('Add', [g.op('Mul', [x, keep]), set], {}, { name: `edit_${p}` });
        const s = g.op('Shape', [value], { start: 0, end: 1 }); // [S]
        const own = g.op('EyeLike', [g.op('Expand', [g.f32([0], [1, 1]), g.op('Concat', [s, s], { axis: 0 })])], {}, { name: `edit_${p}_own` });
        const all = g.op('Gemm', [kept, dir, value], { transB: 1, alpha: { float: -1 } }, { name: `edit_${p}_to_value` }); // [BT, S]
        const delta = g.op('Mul', [all, own], {}, { name: `edit_${p}_to_value_own` });
        y = g.op('Gemm', [delta, dir, kept], {}, { name: `edit_${p}_projected` });
      }
      const spec = sae.get(name);
      if (spec) y = g.scope(`sae_${p}`, () => saeSplice(g, spec, y));
      if (capture.has(name)) g.output(HOOK_IO.output(name), y, F, ['bt', hookWidth(p, shape)]);
      return y;
    },
    wantsPattern: (l) => capture.has(hookName(l, 'pattern')),
    pattern(l, probs) {
      g.output(HOOK_IO.output(hookName(l, 'pattern')), probs, F, ['batch', shape.numHeads, 'seq', 'total']);
    },
  };
}
