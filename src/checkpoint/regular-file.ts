/**
 * Opening checkpoint files from outside: only regular files, and never a blocking open. A weight "file" that is a
 * folder (EISDIR on read), a FIFO (an ordinary open waits forever for a writer), a socket or a device is refused with
 * one line. The open is non-blocking and the check is on the opened descriptor, so a file swapped after a stat
 * cannot slip through.
 */
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { SafekeepError } from '../util/errors.ts';

function kindOf(st: import('node:fs').Stats): string {
  if (st.isDirectory()) return 'a folder';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/** A read-only descriptor of `path`, which must be a regular file (symlinks followed); the caller closes it. */
export function openRegularFile(path: string): number {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new SafekeepError(`${path}: cannot open (${code === 'EISDIR' ? 'a folder, not a file' : code ?? String(e)})`);
  }
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    throw new SafekeepError(`${path}: ${kindOf(st)}, not a regular file; refusing to read it`);
  }
  return fd;
}

/** The whole of a regular file of at most `maxBytes` bytes, as UTF-8 text. */
export function readRegularText(path: string, maxBytes: number): string {
  const fd = openRegularFile(path);
  try {
    const size = fstatSync(fd).size;
    if (size > maxBytes) throw new SafekeepError(`${path}: ${size} bytes, more than the ${maxBytes} such a file can sensibly be; refusing`);
    const buf = Buffer.alloc(size);
    let done = 0;
    while (done < size) {
      const n = readSync(fd, buf, done, size - done, done);
      if (n === 0) break;
      done += n;
    }
    return buf.subarray(0, done).toString('utf8');
  } finally {
    closeSync(fd);
  }
}
