/** The one sha256 of safekeep: cache keys, manifests, split assignment. */
import { createHash } from 'node:crypto';

/** sha256 of `data` (a string as UTF-8), lowercase hex. */
export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}
