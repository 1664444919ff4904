/** The one sha256 of safekeep: cache keys, manifests, split assignment, fingerprints. */
import { createHash } from 'node:crypto';

/**
 * sha256 of `data` (a string as UTF-8), lowercase hex. A list is hashed as its parts concatenated, without joining
 * them into one buffer first.
 */
export function sha256Hex(data: string | Uint8Array | ReadonlyArray<string | Uint8Array>): string {
  const h = createHash('sha256');
  for (const part of typeof data === 'string' || data instanceof Uint8Array ? [data] : data) h.update(part);
  return h.digest('hex');
}
