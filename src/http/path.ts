/**
 * The path canonicaliser: what a request path means, decided once before routing, so that no spelling of an
 * endpoint (`/v1/chat/%63ompletions`, `/v1/CHAT/completions/.`, `…completions%2F`, `//v1/chat/completions`) can be
 * routed differently from the endpoint itself.
 *
 * Steps: the query is dropped; percent-escapes are decoded (once: an escape that decodes to `%` stays a literal `%`,
 * which no route contains); `\` counts as `/` (some servers treat it so); empty and `.` segments are dropped, `..`
 * removes the segment before it (never above the root); the result is lower-cased. A path with a control character
 * (NUL included) before or after decoding, a malformed escape, or not starting with `/` is refused (null).
 */

/** `/seg/seg` with no trailing separator (`/` for the root), or null when the path is malformed. */
export function canonicalPath(rawUrl: string): string | null {
  const q = rawUrl.search(/[?#]/);
  const raw = q >= 0 ? rawUrl.slice(0, q) : rawUrl;
  if (!raw.startsWith('/')) return null;
  let decoded: string;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    return null;
  }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(decoded)) return null;
  const out: string[] = [];
  for (const seg of decoded.replace(/\\/g, '/').split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') { out.pop(); continue; }
    out.push(seg.toLowerCase());
  }
  return `/${out.join('/')}`;
}

/** The canonical path without the API version prefix: `/v1/chat/completions` and `/chat/completions` → `chat/completions`. */
export function apiPath(canonical: string): string {
  return canonical.replace(/^\/v1(?=\/|$)/, '').replace(/^\//, '');
}
