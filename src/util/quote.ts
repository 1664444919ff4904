/**
 * A value from outside quoted for an error line, cut to a bounded length: a 10 MB shape or a file name of control
 * characters must not become a 10 MB, multi-line error.
 */

/** JSON text of `v` (strings quoted and escaped, so NUL and newlines stay visible), at most `max` characters. */
export function quoteClipped(v: unknown, max = 80): string {
  let text: string;
  try {
    text = JSON.stringify(v) ?? String(v);
  } catch {
    text = String(v);
  }
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} characters)`;
}
