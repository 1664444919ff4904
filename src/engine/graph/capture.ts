/** Capturing the residual stream: hidden[l] at the requested flat rows, stacked into the `hidden` output. */
import type { GraphBuilder } from './onnx/builder.ts';

interface Capture {
  /** record x [BT, d] at the rows `hidden_index` selects, as the next hidden[l] */
  add(x: string): void;
  /** [L+1, N, d] */
  stacked(): string;
}

export function hiddenCapture(g: GraphBuilder, hiddenIndex: string): Capture {
  const rows: string[] = [];
  // the index as [1, N]: Gather then yields [1, N, d] directly, one node per layer instead of Gather + Unsqueeze
  const index = g.op('Unsqueeze', [hiddenIndex, g.i64([0])], {}, { name: 'hidden_index_row' });
  return {
    add: (x) => { rows.push(g.op('Gather', [x, index], { axis: 0 }, { name: 'capture' })); },
    stacked: () => g.op('Concat', rows, { axis: 0 }, { name: 'hidden_all' }),
  };
}
