/**
 * What bench:generate's children measure inside one engine: every `step` timed (width 1 on a past cache = decode,
 * else prefill) and, for decode steps, the attention slots the graph computes. The graph attends over the whole
 * KV buffer, capacity C plus the new slot (engine.ts `step`: unused capacity masked), so of a decode step's
 * B·(C + 1) slots row b's real ones are P − starts[b] + 1; the masked rest is left of the row's start (another
 * row is longer: what a paged layout with per-row lengths, e.g. GroupQueryAttention's seqlens_k, would not
 * compute) or right of P (room reserved for later steps). Works on the base code's engine too (same `step` input).
 */
export interface StepTimes {
  prefillS: number;
  prefillTokens: number;
  decodeS: number;
  decodeSteps: { batch: number; s: number }[];
  /** decode steps: slots computed, masked left of a row's start, masked right of the filled length, rows */
  slots: { computed: number; leftMasked: number; rightUnused: number; rows: number };
}

interface StepLike {
  width: number;
  batch: number;
  starts: number[];
  past: { length: number; keys: { dims: readonly number[] }[] } | null;
}

/** rows the timed decode steps produced (one token each) */
export const decodeRows = (t: StepTimes): number => t.decodeSteps.reduce((a, x) => a + x.batch, 0);

export const emptyTimes = (): StepTimes => ({ prefillS: 0, prefillTokens: 0, decodeS: 0, decodeSteps: [], slots: { computed: 0, leftMasked: 0, rightUnused: 0, rows: 0 } });

/** Wrap `engine.step` so every call adds to the returned `times` (reset with `Object.assign(times, emptyTimes())`). */
export function timeSteps<I extends StepLike, O>(engine: { step(inp: I): Promise<O> }): StepTimes {
  const times = emptyTimes();
  const step = engine.step.bind(engine);
  engine.step = async (inp: I) => {
    const t = performance.now();
    const out = await step(inp);
    const s = (performance.now() - t) / 1000;
    const past = inp.past;
    if (inp.width === 1 && past && past.length > 0) {
      times.decodeS += s;
      times.decodeSteps.push({ batch: inp.batch, s });
      const C = Number(past.keys[0]!.dims[2]);
      const P = past.length;
      times.slots.computed += inp.batch * (C + 1);
      times.slots.rightUnused += inp.batch * (C - P);
      times.slots.leftMasked += inp.starts.reduce((a, x) => a + x, 0);
      times.slots.rows += inp.batch;
    } else {
      times.prefillS += s;
      times.prefillTokens += inp.batch * inp.width;
    }
    return out;
  };
  return times;
}

interface Shape { numLayers: number; hiddenSize: number; numHeads: number; numKvHeads: number; headDim: number; intermediateSize: number; vocabSize: number }

/**
 * The masked slots as a share of a decode step's multiply-adds: attention costs 4·H·hd per slot and layer (Q·K and
 * P·V), the linear layers 2·params per token (lm_head included), so this is what masked attention costs of the
 * whole decode compute.
 */
export function maskedFlopShare(c: Shape, slots: StepTimes['slots']): { left: number; all: number } {
  const perLayer = c.hiddenSize * (c.numHeads + 2 * c.numKvHeads) * c.headDim + c.numHeads * c.headDim * c.hiddenSize + 3 * c.hiddenSize * c.intermediateSize;
  const linear = slots.rows * 2 * (c.numLayers * perLayer + c.vocabSize * c.hiddenSize);
  const perSlot = 4 * c.numHeads * c.headDim * c.numLayers;
  const total = linear + slots.computed * perSlot;
  return { left: (slots.leftMasked * perSlot) / total, all: ((slots.leftMasked + slots.rightUnused) * perSlot) / total };
}
