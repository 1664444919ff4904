/**
 * Degenerate text: what heavily steered models produce (empty output, a short unit looping, word salad).
 * Pure heuristics with fixed thresholds, pinned by the labelled outputs in test/fixtures/outputs.
 */

/** Minimum consecutive repeats of a unit for a loop. */
const MIN_REPEATS = 4;
/** A loop must cover at least this share of the (trimmed) text. */
const MIN_LOOP_SHARE = 0.5;
/** Longest repeating unit looked for, in characters. */
const MAX_UNIT = 64;

/**
 * The longest run (in characters) made of one unit of length 1..MAX_UNIT repeated ≥ MIN_REPEATS times
 * consecutively, with the unit; null when none. O(n · MAX_UNIT).
 */
export function longestLoop(text: string): { unit: string; repeats: number; chars: number } | null {
  let best: { unit: string; repeats: number; chars: number } | null = null;
  const n = text.length;
  for (let p = 1; p <= Math.min(MAX_UNIT, Math.floor(n / MIN_REPEATS)); p++) {
    // run[i] = number of consecutive positions j ≤ i with text[j] === text[j - p]
    let run = 0;
    for (let i = p; i < n; i++) {
      if (text[i] === text[i - p]) run++;
      else run = 0;
      const chars = run + p; // the span [i - run - p + 1, i] is periodic with period p
      const repeats = Math.floor(chars / p);
      if (repeats >= MIN_REPEATS && (!best || chars > best.chars)) {
        const start = i - chars + 1;
        best = { unit: text.slice(start, start + p), repeats, chars };
      }
    }
  }
  // a unit that itself consists only of whitespace is not a loop of content
  if (best && best.unit.trim() === '') return null;
  return best;
}

/** Why `text` is degenerate, or null. */
export function degenerateReason(text: string): string | null {
  const t = text.trim();
  if (t.length === 0) return 'empty output';
  if (!/[\p{L}\p{N}]/u.test(t)) return 'no letters or digits';
  const loop = longestLoop(t);
  if (loop && loop.chars / t.length >= MIN_LOOP_SHARE) {
    return `repetition: ${JSON.stringify(loop.unit)} ×${loop.repeats} covers ${Math.round((100 * loop.chars) / t.length)} % of the text`;
  }
  const words = t.toLowerCase().match(/[\p{L}\p{N}']+/gu) ?? [];
  if (words.length >= 20) {
    const distinct = new Set(words).size;
    if (distinct / words.length < 0.2) return `low diversity: ${distinct} distinct of ${words.length} words`;
  }
  return null;
}
