/**
 * Streaming a local generation: the part of its text so far that no later token can take back.
 *
 * The reply's final text is the decode of every generated id, cut before the first stop string, with end-of-turn
 * tokens removed (`stripEndTokens`). While tokens still arrive, three things at the end of the text may change:
 * a partial character (a byte-level token cut a UTF-8 sequence: decoded as U+FFFD until the rest arrives), the start
 * of a stop string (its last characters are still to come, and then none of it is shown), and the start of an end
 * token written as text. `settledText` holds those back, so every settled text is a prefix of the final one and a
 * server can send the difference between two calls as a chunk.
 */
import { END_TOKENS, stripEndTokens } from '../outcome/parse-calls.ts';

/** the longest k < |s| such that the text's last k characters are the first k of some s in `pieces` */
function pendingLength(text: string, pieces: readonly string[]): number {
  let most = 0;
  for (const s of pieces) {
    for (let k = Math.min(s.length - 1, text.length); k > most; k--) {
      if (text.endsWith(s.slice(0, k))) { most = k; break; }
    }
  }
  return most;
}

/**
 * @param text  the decode of the ids generated so far (special tokens as text)
 * @param stops the call's stop strings
 * @returns settled: what the reply's text will start with whatever comes next; stopped: a stop string is complete
 *   (then settled is the final text and generation should end)
 */
/** the text before the first stop string in it (OpenAI's `stop`: the answer does not include it), and whether one was there */
export function cutAtStop(text: string, stops: readonly string[]): { text: string; stopped: boolean } {
  const cut = Math.min(...stops.map((x) => text.indexOf(x)).filter((i) => i >= 0));
  return Number.isFinite(cut) ? { text: text.slice(0, cut), stopped: true } : { text, stopped: false };
}

export function settledText(text: string, stops: readonly string[]): { settled: string; stopped: boolean } {
  const c = cutAtStop(text, stops);
  if (c.stopped) return { settled: stripEndTokens(c.text), stopped: true };
  let t = text;
  while (t.endsWith('\uFFFD')) t = t.slice(0, -1);
  t = t.slice(0, t.length - pendingLength(t, [...stops, ...END_TOKENS]));
  return { settled: stripEndTokens(t), stopped: false };
}
