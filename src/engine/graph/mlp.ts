/** The SwiGLU MLP: down(silu(gate(h)) ⊙ up(h)) (+ addend in the down projection's bias). */
import type { LayerWeights } from '../../checkpoint/tensors.ts';
import type { GraphBuilder } from './onnx/builder.ts';
import type { WeightSource } from './weights.ts';

/** h [BT, d] → [BT, d]; `addend` [d] rides in the down projection (the steering row: free when zero) */
export function swigluMlp(g: GraphBuilder, w: WeightSource, lw: LayerWeights, h: string, intermediate: number, fusedGateUp: string, addend?: string): string {
  const [gate, up] = w.linears(h, [lw.gate, lw.up], undefined, [intermediate, intermediate], fusedGateUp);
  const act = g.op('Mul', [g.op('Mul', [gate!, g.op('Sigmoid', [gate!])], {}, { name: 'silu' }), up!]);
  return addend === undefined ? w.linear(act, lw.down) : w.linear(act, lw.down, addend, 'down_proj_steered');
}
