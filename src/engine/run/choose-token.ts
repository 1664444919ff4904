/**
 * A row's next-token choice: greedy (argmax, as every row chose before sampling existed) or a draw from its processed
 * logits (sample/process.ts) with the uniform philox(seed, step) (sample/philox.ts), step = tokens generated so far.
 * The choice reads nothing but the row's own logits, settings, seed and history, so it is the same alone or in any
 * batch. Logprobs stay those of the raw logits (what OpenAI and vLLM report), at whichever token was chosen.
 */
import { SafekeepError } from '../../util/errors.ts';
import { drawIndex } from '../sample/draw.ts';
import type { TokenHistory } from '../sample/penalties.ts';
import { uniformAt } from '../sample/philox.ts';
import { penalise, processLogits } from '../sample/process.ts';
import { hasPenalties, isGreedy, type SamplingSettings } from '../sample/settings.ts';
import { argmax } from './argmax.ts';

export class TokenChooser {
  private readonly seen: Set<number>;
  private readonly counts = new Map<number, number>();
  /** generated ids already folded into `seen` / `counts` */
  private absorbed = 0;
  private readonly plain: boolean;
  private readonly greedy: boolean;

  /** `settings.seed` must be set when the row samples (the caller draws and reports one when the user gave none) */
  constructor(readonly settings: SamplingSettings | undefined, promptIds: readonly number[]) {
    this.greedy = isGreedy(settings);
    this.plain = this.greedy && !hasPenalties(settings);
    if (!this.greedy && settings!.seed === undefined) throw new SafekeepError('a sampling row needs a seed (drawSeed() when none was given)');
    this.seen = this.plain ? new Set() : new Set(promptIds);
  }

  /** the token after `generatedIds`, from `row` ([vocab] logits of the last position) */
  choose(row: Float32Array, generatedIds: readonly number[]): number {
    if (this.plain) return argmax(row);
    for (; this.absorbed < generatedIds.length; this.absorbed++) {
      const t = generatedIds[this.absorbed]!;
      this.seen.add(t);
      this.counts.set(t, (this.counts.get(t) ?? 0) + 1);
    }
    const h: TokenHistory = { seen: this.seen, generatedCounts: this.counts };
    const s = this.settings!;
    if (this.greedy) {
      const z = Float64Array.from(row);
      penalise(z, s, h);
      return argmax(z);
    }
    return drawIndex(processLogits(row, s, h), uniformAt(s.seed!, generatedIds.length));
  }
}
