/**
 * Atomic file writes: a uniquely named temp file in the same folder (same filesystem), then rename, so no reader
 * ever sees half a file and an interrupted run leaves either the old file or the new one. One place for all of
 * safekeep (caches, manifests, reports, downloads, checkpoints written by us).
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { SafekeepError } from './errors.ts';

/**
 * Temp path next to `path`: `.name.<pid>.<time><random>.tmp`. Math.random, not the seeded generator: the name must
 * differ between writers (two processes, or two writes in one millisecond), which a fixed seed would defeat.
 */
export function tempPathFor(path: string): string {
  return join(dirname(path), `.${basename(path)}.${process.pid}.${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}.tmp`);
}

/** Write `data` to `path` (folders created) or fail with one SafekeepError naming the path; never a half-written file. */
export function writeFileAtomic(path: string, data: string | Uint8Array): void {
  const tmp = tempPathFor(path);
  try {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw new SafekeepError(`${path}: cannot write (${(e as Error).message})`);
  }
}

/** JSON (indented, trailing newline) written atomically. */
export function writeJsonAtomic(path: string, value: unknown, indent = 2): void {
  writeFileAtomic(path, JSON.stringify(value, null, indent) + '\n');
}
