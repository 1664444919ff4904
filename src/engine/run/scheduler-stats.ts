/** What the scheduler counts and times (`Scheduler.stats`), shared by its planner, KV manager and step runner. */

export interface SchedulerStats {
  /** sequences completed */
  sequences: number;
  /** decode steps run and the rows they computed */
  decodeSteps: number;
  decodeRows: number;
  /** prefill chunks run and the prompt tokens they computed */
  prefillChunks: number;
  prefillTokens: number;
  /** prompt tokens of admitted sequences (computed + served by the prefix cache) */
  promptTokens: number;
  /** most sequences decoding in one step */
  peakBatch: number;
  /** packed prefill steps, the sequences they prefilled, and their slots computed but not kept (pads, recomputed) */
  packedSteps: number;
  packedRows: number;
  packWaste: number;
  /**
   * wall seconds: `loop` while the scheduler had work (the rest of a caller's time it was idle, waiting for
   * submits); of it, awaiting model steps (`steps`), the prefix cache's lookups and block copies (`prefixCache`),
   * KV copied between caches (`rowKv`: the decode buffer's row joins, re-layouts and removals, a packed prefill's
   * past and its rows' new slots), and choosing tokens from logits (`choose`);
   * loop − the four = the rest of the scheduler's JS (admission, feeds, intervention sets)
   */
  seconds: { loop: number; steps: number; prefixCache: number; rowKv: number; choose: number };
}

export type TimedKey = Exclude<keyof SchedulerStats['seconds'], 'loop'>;

export function emptyStats(): SchedulerStats {
  return {
    sequences: 0, decodeSteps: 0, decodeRows: 0, prefillChunks: 0, prefillTokens: 0, promptTokens: 0, peakBatch: 0, packedSteps: 0, packedRows: 0, packWaste: 0,
    seconds: { loop: 0, steps: 0, prefixCache: 0, rowKv: 0, choose: 0 },
  };
}

/** f() with its wall time added to stats.seconds[key] */
export function timed<R>(stats: SchedulerStats, key: TimedKey, f: () => R): R {
  const t = performance.now();
  try {
    return f();
  } finally {
    stats.seconds[key] += (performance.now() - t) / 1000;
  }
}

/** an async f() with its wall time added to stats.seconds[key] */
export async function timedAsync<R>(stats: SchedulerStats, key: TimedKey, f: () => Promise<R>): Promise<R> {
  const t = performance.now();
  try {
    return await f();
  } finally {
    stats.seconds[key] += (performance.now() - t) / 1000;
  }
}
