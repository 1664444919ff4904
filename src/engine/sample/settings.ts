/**
 * How one row chooses its tokens: the sampling settings researchers pass to HF `generate`, vLLM and the OpenAI API,
 * with their meanings (src/engine/sample/README.md has the table and the order they apply in). Absent = off: a row
 * without settings, or with temperature 0 or none, decodes greedily as every row did before sampling existed —
 * OpenAI's default temperature is 1, ours is greedy, so a request that wants samples says so.
 */
import { randomInt } from 'node:crypto';
import { SafekeepError } from '../../util/errors.ts';

export interface SamplingSettings {
  /** > 0: sample from softmax(logits / temperature); 0 or absent: greedy (argmax of the penalised logits) */
  temperature?: number;
  /** keep the k largest logits (ties with the k-th kept: HF's TopKLogitsWarper); 0 or absent = off */
  topK?: number;
  /** keep the smallest most likely set whose probability reaches top_p (HF's TopPLogitsWarper); 1 or absent = off */
  topP?: number;
  /** drop tokens less likely than min_p × the most likely one's probability (HF's MinPLogitsWarper); 0/absent = off */
  minP?: number;
  /**
   * HF's RepetitionPenaltyLogitsProcessor over every token id in the prompt and the tokens generated so far: a positive
   * logit divided by it, a negative one multiplied; 1 or absent = off
   */
  repetitionPenalty?: number;
  /** OpenAI/vLLM: logit −= frequency_penalty × (times the token was generated so far); 0 or absent = off */
  frequencyPenalty?: number;
  /** OpenAI/vLLM: logit −= presence_penalty once the token has been generated; 0 or absent = off */
  presencePenalty?: number;
  /** OpenAI's logit_bias: token id → added to its logit before everything else */
  logitBias?: Readonly<Record<number, number>>;
  /**
   * the row's generator key (any safe integer): draw t of the row is philox(seed, t) (philox.ts), so the same seed
   * gives the same tokens alone or in any batch; absent = one is drawn (drawSeed) and reported
   */
  seed?: number;
}

/** The settings' names as a user spells them (flags, body fields): what an error message calls each one. */
export type SamplingNames = Readonly<Record<keyof SamplingSettings, string>>;

/** the library's own names (the option keys) */
export const OPTION_NAMES: SamplingNames = {
  temperature: 'temperature', topK: 'topK', topP: 'topP', minP: 'minP', repetitionPenalty: 'repetitionPenalty',
  frequencyPenalty: 'frequencyPenalty', presencePenalty: 'presencePenalty', logitBias: 'logitBias', seed: 'seed',
};

/** Whether the row decodes greedily (no temperature, or 0): the warpers (top-k/p, min-p) then change nothing. */
export function isGreedy(s: SamplingSettings | undefined): boolean {
  return !s || !(s.temperature! > 0);
}

/** Whether any processor before the warpers changes the logits (bias, penalties): greedy rows apply these too. */
export function hasPenalties(s: SamplingSettings | undefined): boolean {
  if (!s) return false;
  return (s.repetitionPenalty !== undefined && s.repetitionPenalty !== 1) || !!s.frequencyPenalty || !!s.presencePenalty
    || (s.logitBias !== undefined && Object.keys(s.logitBias).length > 0);
}

/**
 * The settings checked as the engine reads them; one SafekeepError naming the first bad one in `names`' spelling.
 * `vocabSize`, when known, bounds the logit_bias ids. Ranges are the widest with a meaning (HF's and vLLM's own
 * checks); a server narrows them to OpenAI's (temperature ≤ 2, penalties in [−2, 2], biases in [−100, 100]).
 */
export function checkSampling(s: SamplingSettings, names: SamplingNames = OPTION_NAMES, vocabSize?: number): void {
  const bad = (k: keyof SamplingSettings, what: string, v: unknown): never => {
    throw new SafekeepError(`${names[k]} must be ${what}, got ${JSON.stringify(v)?.slice(0, 40) ?? String(v)}`);
  };
  const num = (k: keyof SamplingSettings, ok: (x: number) => boolean, what: string) => {
    const v = s[k];
    if (v !== undefined && (typeof v !== 'number' || !Number.isFinite(v) || !ok(v))) bad(k, what, v);
  };
  num('temperature', (x) => x >= 0, 'a number ≥ 0 (0 = greedy)');
  num('topK', (x) => Number.isInteger(x) && x >= 0, 'an integer ≥ 0 (0 = off)');
  num('topP', (x) => x >= 0 && x <= 1, 'a number from 0 to 1 (1 = off)');
  num('minP', (x) => x >= 0 && x <= 1, 'a number from 0 to 1 (0 = off)');
  num('repetitionPenalty', (x) => x > 0, 'a number > 0 (1 = off)');
  num('frequencyPenalty', () => true, 'a finite number (0 = off)');
  num('presencePenalty', () => true, 'a finite number (0 = off)');
  num('seed', (x) => Number.isSafeInteger(x), 'an integer of at most 53 bits');
  if (s.logitBias !== undefined) {
    if (s.logitBias === null || typeof s.logitBias !== 'object' || Array.isArray(s.logitBias)) bad('logitBias', 'an object of token ids to numbers', s.logitBias);
    for (const [id, b] of Object.entries(s.logitBias)) {
      const t = Number(id);
      if (!/^\d+$/.test(id) || !Number.isSafeInteger(t) || (vocabSize !== undefined && t >= vocabSize)) {
        bad('logitBias', vocabSize === undefined ? 'keyed by token ids' : `keyed by token ids below the vocabulary size ${vocabSize}`, id);
      }
      if (typeof b !== 'number' || !Number.isFinite(b)) bad('logitBias', 'an object of token ids to finite numbers', b);
    }
  }
}

/**
 * drawn seeds are below this: 2^48 − 1 (the most node's randomInt spans), so they survive JSON readers that hold
 * numbers as doubles, leave room for seed + i, and print short
 */
export const DRAWN_SEED_LIMIT = 2 ** 48 - 1;

/** A fresh seed for a sampled run that named none (reported with its results, so the run can be replayed). */
export function drawSeed(): number {
  return randomInt(0, DRAWN_SEED_LIMIT);
}

/**
 * The settings of choice i of a request for n choices: seeds seed, seed + 1, …, so each choice is replayable alone
 * with its own seed (n = 1 with seed + i gives choice i's tokens).
 */
export function choiceSettings(s: SamplingSettings & { seed: number }, n: number): SamplingSettings[] {
  if (!Number.isSafeInteger(s.seed + (n - 1))) throw new SafekeepError(`seed ${s.seed} + ${n - 1} choices leaves the 53-bit integers`);
  return Array.from({ length: n }, (_, i) => ({ ...s, seed: s.seed + i }));
}
