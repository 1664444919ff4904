/**
 * A checkpoint's weight files as the runtime sees them: real paths (symlinks followed: onnxruntime refuses external
 * data outside the folder it is told about), the one folder holding them, and a stamp of their identity for cache
 * keys.
 */
import { realpathSync, statSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { Checkpoint } from '../../checkpoint/types.ts';
import { SafekeepError } from '../../util/errors.ts';

/** Real path of every weight file; they must share one folder (true for plain folders and the HF hub cache). */
export function resolveWeightFiles(ckpt: Checkpoint): { realFiles: Map<string, string>; weightsDir: string } {
  const realFiles = new Map<string, string>();
  for (const e of ckpt.tensors.values()) {
    if (realFiles.has(e.file)) continue;
    const real = realpathSync(e.file);
    // onnxruntime opens these itself: a file replaced by a folder or FIFO since loading must not reach it
    if (!statSync(real).isFile()) throw new SafekeepError(`${e.file}: not a regular file (any more); refusing it as weights`);
    realFiles.set(e.file, real);
  }
  const dirs = new Set([...realFiles.values()].map((f) => dirname(f)));
  if (dirs.size !== 1) {
    throw new SafekeepError(`${ckpt.dir}: the weight files resolve to different folders (${[...dirs].join(', ')}); put them in one folder`);
  }
  const names = [...realFiles.values()].map((f) => basename(f));
  if (new Set(names).size !== names.length) throw new SafekeepError(`${ckpt.dir}: two weight files resolve to the same file`);
  return { realFiles, weightsDir: [...dirs][0]! };
}

/** Each real weight file's path, size and mtime, one line each in path order: changes when any file is replaced. */
export function weightFilesStamp(realFiles: ReadonlyMap<string, string>): string {
  return [...realFiles.values()].sort().map((real) => {
    const st = statSync(real);
    return `${real}\t${st.size}\t${st.mtimeMs}\n`;
  }).join('');
}
