/**
 * Packed prefill: the last prompt chunks of several sequences computed as the rows of one step. A lone prefill of a
 * short prompt is a GEMM of few rows that still reads every weight (SmolLM2 shape, f32, 2 threads: 351 tok/s at 16
 * tokens against ~1,000 at 128 and more, engine README), so the prompts of requests that arrive together (concurrent
 * clients, a burst of submits, the judge calls of an evaluation) are read in one step of B rows instead of B steps.
 *
 * Layout of a pack of width W (the longest chunk) on a past of P slots. Row b's chunk is prompt tokens
 * [filled_b, end_b); its row computes the last w_b = min(W, end_b) tokens before end_b, so a chunk shorter than W
 * recomputes the cached tokens before it (their keys and values are the row's own up to float rounding, and only the
 * chunk's own new slots are kept), and a prompt shorter than W is left-padded. The w_b tokens' past is the row's
 * first end_b − w_b slots, right-aligned in the packed past: every row's real slots end at P, as in any batched step
 * (kv.ts), and no pad ever sits between a row's past and its new tokens.
 */

/** a sequence's chunk to pack: its prompt tokens [filled, end) with `filled` slots of KV already computed */
export interface PackChunk {
  filled: number;
  end: number;
}

/** Where each row's tokens and past go in the packed step. */
export interface PackLayout {
  /** W: tokens per row */
  width: number;
  /** P: past slots per row (the longest row's) */
  past: number;
  rows: {
    /** first prompt position the row computes (end − w) */
    from: number;
    /** slots of its own KV fed as past: 0..pastLen−1, at packed columns P − pastLen .. P − 1 */
    pastLen: number;
    /** first real slot (kv.ts `starts`): P − pastLen, or P + pads when the prompt is shorter than W */
    start: number;
    /** tokens of the chunk itself (kept), the last ones of the row */
    kept: number;
  }[];
  /** slots computed that are not kept: pads plus recomputed cached tokens */
  waste: number;
}

export function packLayout(chunks: readonly PackChunk[]): PackLayout {
  const width = Math.max(...chunks.map((c) => c.end - c.filled));
  const pastLens = chunks.map((c) => c.end - Math.min(width, c.end));
  const past = Math.max(0, ...pastLens);
  const rows = chunks.map((c, b) => {
    const w = Math.min(width, c.end);
    return { from: c.end - w, pastLen: pastLens[b]!, start: past - pastLens[b]! + (width - w), kept: c.end - c.filled };
  });
  return { width, past, rows, waste: rows.reduce((a, r) => a + width - r.kept, 0) };
}

/** Limits of a pack: beyond them one step per sequence is as fast (or the pack wastes more than it saves). */
export interface PackLimits {
  /** most tokens per row: longer chunks already run near the prefill's full rate alone */
  maxWidth: number;
  /** most tokens in the step (rows × width): the iteration's budget left */
  budget: number;
  /** most slots computed and not kept, as a share of rows × width */
  maxWaste: number;
  /** most past slots masked (rows shorter than the longest past), as a share of the slots attended */
  maxMaskedPast: number;
}

/**
 * Which candidates join a pack with the first (indices into `chunks`, the first always in): in order, each one that
 * keeps the pack within the limits. A pack of one means: run the first alone.
 */
export function choosePack(chunks: readonly PackChunk[], limits: PackLimits, fits: (layout: PackLayout) => boolean = () => true): number[] {
  const chosen = [0];
  const first = chunks[0]!;
  if (first.end - first.filled > limits.maxWidth) return chosen;
  for (let i = 1; i < chunks.length; i++) {
    const c = chunks[i]!;
    if (c.end - c.filled > limits.maxWidth) continue;
    const next = [...chosen, i];
    const lay = packLayout(next.map((k) => chunks[k]!));
    const B = next.length;
    if (B * lay.width > limits.budget || lay.waste > limits.maxWaste * B * lay.width) continue;
    const attended = lay.rows.reduce((a, r) => a + r.pastLen + lay.width, 0);
    const masked = lay.rows.reduce((a, r) => a + lay.past - r.pastLen, 0);
    if (masked > limits.maxMaskedPast * attended || !fits(lay)) continue;
    chosen.push(i);
  }
  return chosen;
}
