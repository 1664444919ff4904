/**
 * On-disk response cache keyed by request hash: sha256 of the canonical JSON of {url, body} (object keys sorted),
 * one file per entry `<dir>/<hash[0..2]>/<hash>.json`, written atomically. Re-runs of an evaluation cost nothing.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from '../files.ts';

/** JSON with object keys sorted recursively (arrays keep their order). */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o).filter((k) => o[k] !== undefined).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

export function requestHash(url: string, body: unknown): string {
  return createHash('sha256').update(canonicalJson({ url, body })).digest('hex');
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
