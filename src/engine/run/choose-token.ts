/**
 * A row's next-token choice: greedy (argmax, as every row chose before sampling existed) or a draw from its processed
 * distribution (sample/process.ts, sample/token.ts) with the uniforms philox(seed, step, k) (sample/philox.ts), step =
 * the tokens this row chose before. It reads nothing but the row's own logits, settings, seed and history (its prompt and its own
 * choices, which it records), so it is the same alone or in any batch. Log probabilities stay those of the raw logits
 * (what OpenAI and vLLM report), at whichever token was chosen.
 */
import { SafekeepError } from '../../util/errors.ts';
import { uniformAt } from '../sample/philox.ts';
import { penalisedLogits, sampleScratch, type SampleScratch } from '../sample/process.ts';
import { sampleToken } from '../sample/token.ts';
import { hasPenalties, isGreedy, type SamplingSettings } from '../sample/settings.ts';
import { argmax } from './argmax.ts';

export class TokenChooser {
  private readonly seen: Set<number>;
  private readonly counts = new Map<number, number>();
  /** tokens chosen so far (= the next draw's step) */
  private step = 0;
  private readonly settings: SamplingSettings;
  private readonly greedy: boolean;
  /** [vocab] buffers reused every step (allocated at the first) */
  private scratch: SampleScratch | undefined;

  /**
   * `settings.seed` must be set when the row samples (the caller draws and reports one when the user gave none);
   * `generated`: tokens the row already has (a row resumed after them: its next draw is step generated.length)
   */
  constructor(settings: SamplingSettings, promptIds: readonly number[], generated: readonly number[] = []) {
    this.settings = settings;
    this.greedy = isGreedy(settings);
    if (!this.greedy && settings.seed === undefined) throw new SafekeepError('a sampling row needs a seed (drawSeed() when none was given)');
    this.seen = new Set(promptIds);
    for (const t of generated) this.record(t);
  }

  private record(tok: number): void {
    this.step++;
    this.seen.add(tok);
    this.counts.set(tok, (this.counts.get(tok) ?? 0) + 1);
  }

  /** the row's next token from `row` ([vocab] logits of its last position); recorded as the row's own history */
  next(row: Float32Array): number {
    const s = this.settings, h = { seen: this.seen, generatedCounts: this.counts };
    if (this.scratch?.z.length !== row.length) this.scratch = sampleScratch(row.length);
    const z = penalisedLogits(row, s, h, this.scratch);
    const step = this.step;
    const tok = this.greedy ? argmax(z) : sampleToken(z, { temperature: s.temperature!, topK: s.topK, topP: s.topP, minP: s.minP }, (k) => uniformAt(s.seed!, step, k), { scratch: this.scratch });
    this.record(tok);
    return tok;
  }
}

/**
 * The choice function of a row with these settings, or undefined for the plain greedy argmax (no settings, or
 * greedy without penalties): the default path stays the one it always was.
 */
export function tokenChooser(settings: SamplingSettings | undefined, promptIds: readonly number[]): ((row: Float32Array) => number) | undefined {
  if (isGreedy(settings) && !hasPenalties(settings)) return undefined;
  const c = new TokenChooser(settings!, promptIds);
  return (row) => c.next(row);
}
