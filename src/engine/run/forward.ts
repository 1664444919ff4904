/**
 * `forward`: one prefill step per batch from an empty cache, hidden states and logits at the asked positions of
 * each sequence. Batches are grouped by length under the token cap and, with a memory plan, so every step fits.
 */
import { SafekeepError } from '../../util/errors.ts';
import type { ForwardOptions, ForwardResult } from './types.ts';
import { callInterventions, interventionInputs, leftPad, planChunks, selectPositions } from './batch.ts';
import { hiddenRows, type Stepper } from './step.ts';

export async function forward(s: Stepper, inputIds: number[][], opts: ForwardOptions = {}): Promise<ForwardResult[]> {
  checkIds(inputIds, s.vocabSize);
  const iv = interventionInputs(s.numLayers, s.dModel, callInterventions(opts));
  const results: ForwardResult[] = new Array(inputIds.length);
  const L1 = s.numLayers + 1;
  const d = s.dModel;
  const V = s.vocabSize;
  const rows = (sel: ForwardOptions['hiddenAt'], B: number, T: number) =>
    B * (sel === undefined || sel === 'all' ? T : sel === 'last' ? 1 : sel === 'none' ? 0 : Math.min(T, sel.length));
  const fits = s.memoryFits((B, T) => [{ batch: B, width: T, past: 0, hidden: rows(opts.hiddenAt, B, T), logits: rows(opts.logitsAt, B, T) }]);
  for (const chunk of planChunks(inputIds.map((ids) => ids.length), s.config.numHeads, s.maxBatchTokens, undefined, fits)) {
    const pb = leftPad(chunk.map((i) => inputIds[i]!));
    const hiddenPos = chunk.map((i, b) => selectPositions(opts.hiddenAt, pb.lengths[b]!, `sequence ${i} hiddenAt`));
    const logitPos = chunk.map((i, b) => selectPositions(opts.logitsAt, pb.lengths[b]!, `sequence ${i} logitsAt`));
    const flat = (pos: number[][]) => pos.flatMap((ps, b) => ps.map((p) => b * pb.width + pb.pads[b]! + p));
    const out = await s.prefill({
      ids: pb.ids, batch: pb.batch, width: pb.width, starts: pb.pads, past: null, steer: iv.steer, project: iv,
      hiddenIndex: flat(hiddenPos), logitsIndex: flat(logitPos), wantPresent: false,
    });
    const N = hiddenPos.reduce((a, p) => a + p.length, 0);
    let hOff = 0;
    let lOff = 0;
    chunk.forEach((i, b) => {
      const n = hiddenPos[b]!.length;
      const hidden = hiddenRows(out.hidden, L1, N, d, hOff, n);
      const m = logitPos[b]!.length;
      results[i] = {
        length: pb.lengths[b]!,
        hiddenPositions: hiddenPos[b]!,
        hidden,
        logitPositions: logitPos[b]!,
        logits: out.logits.slice(lOff * V, (lOff + m) * V),
      };
      hOff += n;
      lOff += m;
    });
  }
  return results;
}

/** Every sequence a non-empty list of ids in 0..vocabSize-1, or one SafekeepError naming the first that is not. */
export function checkIds(inputIds: number[][], vocabSize: number): void {
  if (!Array.isArray(inputIds)) throw new SafekeepError('input ids must be a list of token-id lists');
  inputIds.forEach((s, i) => {
    if (!Array.isArray(s) || s.length === 0) throw new SafekeepError(`sequence ${i}: needs at least one token id`);
    s.forEach((id, t) => {
      if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
        throw new SafekeepError(`sequence ${i}, position ${t}: token id ${JSON.stringify(id)} is not in 0..${vocabSize - 1}`);
      }
    });
  });
}
