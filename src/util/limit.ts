/** A counting semaphore: at most `n` tasks run at once, the rest wait in FIFO order. */
export class Limiter {
  private active = 0;
  private readonly waiting: (() => void)[] = [];
  constructor(readonly n: number) {
    if (!(n >= 1)) throw new Error(`concurrency must be ≥ 1, got ${n}`);
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active >= this.n) await new Promise<void>((r) => this.waiting.push(r));
    this.active++;
    try {
      return await task();
    } finally {
      this.active--;
      this.waiting.shift()?.();
    }
  }
}

/**
 * Exponential backoff with full jitter: uniform in [0, min(cap, base·2^attempt)]; `Retry-After` wins if given. The
 * jitter defaults to Math.random, not the seeded generator, on purpose: clients retrying at once must spread out,
 * which identical seeds would undo (and it changes only timing, never a result); tests pass their own `rand`.
 */
export function backoffMs(attempt: number, baseMs: number, capMs: number, retryAfterS?: number, rand: () => number = Math.random): number {
  if (retryAfterS !== undefined && Number.isFinite(retryAfterS) && retryAfterS >= 0) return Math.min(capMs, retryAfterS * 1000);
  return rand() * Math.min(capMs, baseMs * 2 ** attempt);
}
