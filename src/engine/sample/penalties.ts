/**
 * The processors that read the row's history, in the order they apply (process.ts): OpenAI's logit_bias, OpenAI's
 * frequency / presence penalties as vLLM computes them (over the generated tokens only), then HF's repetition penalty
 * (over every id of the prompt and the generated tokens). They apply to greedy rows too: HF and vLLM both take the
 * argmax of the penalised logits. Each edits `z` ([vocab] logits, Float64) in place; ids outside the vocabulary are
 * skipped (HF drops them the same way: such a token cannot be generated).
 */

/** What the penalties read of a row: the ids it has seen and how often it generated each. */
export interface TokenHistory {
  /** every distinct id of the prompt and the generated tokens (the repetition penalty's set) */
  seen: ReadonlySet<number>;
  /** generated id → times generated (the frequency / presence penalties' counts) */
  generatedCounts: ReadonlyMap<number, number>;
}

export function tokenHistory(promptIds: readonly number[], generatedIds: readonly number[]): TokenHistory {
  const seen = new Set(promptIds);
  const generatedCounts = new Map<number, number>();
  for (const t of generatedIds) {
    seen.add(t);
    generatedCounts.set(t, (generatedCounts.get(t) ?? 0) + 1);
  }
  return { seen, generatedCounts };
}

/** OpenAI's logit_bias: z[id] += bias[id] */
export function applyLogitBias(z: Float64Array, bias: Readonly<Record<number, number>>): void {
  for (const [id, b] of Object.entries(bias)) {
    const t = Number(id);
    if (t < z.length) z[t]! += b;
  }
}

/**
 * OpenAI's penalties as vLLM applies them: z[t] −= frequency · count(t) + presence · [count(t) > 0], over the tokens
 * generated so far (the prompt does not count).
 */
export function applyOpenAiPenalties(z: Float64Array, counts: ReadonlyMap<number, number>, frequency: number, presence: number): void {
  for (const [t, c] of counts) if (t < z.length) z[t]! -= frequency * c + presence;
}

/**
 * HF's RepetitionPenaltyLogitsProcessor: for every distinct id seen (prompt and generated), a negative logit is
 * multiplied by `penalty`, any other divided by it — so a penalty above 1 makes the token less likely either way.
 */
export function applyRepetitionPenalty(z: Float64Array, seen: Iterable<number>, penalty: number): void {
  for (const t of seen) {
    if (t < 0 || t >= z.length) continue;
    const v = z[t]!;
    z[t] = v < 0 ? v * penalty : v / penalty;
  }
}
