/**
 * On-disk response cache keyed by request hash: sha256 of the canonical JSON of {url, body} (object keys sorted),
 * one file per entry `<dir>/<hash[0..2]>/<hash>.json`, written atomically. Re-runs of an evaluation cost nothing.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { canonicalJson } from '../data/jsonfile.ts';
import { writeFileAtomic } from '../util/atomic.ts';
import { sha256Hex } from '../util/hash.ts';

export function requestHash(url: string, body: unknown): string {
  return sha256Hex(canonicalJson({ url, body }));
}

export class ResponseCache {
  constructor(readonly dir: string) {}

  private path(hash: string): string {
    return join(this.dir, hash.slice(0, 2), `${hash}.json`);
  }

  get(hash: string): unknown | undefined {
    const p = this.path(hash);
    if (!existsSync(p)) return undefined;
    try {
      return JSON.parse(readFileSync(p, 'utf8')) as unknown;
    } catch {
      return undefined; // a corrupt entry is a miss (and gets overwritten)
    }
  }

  set(hash: string, value: unknown): void {
    writeFileAtomic(this.path(hash), JSON.stringify(value));
  }
}
