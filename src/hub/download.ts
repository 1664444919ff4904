/**
 * Downloading files of a hub repo: resume from `<file>.part` with an HTTP Range request, retries on dropped
 * connections, redirects followed (the token is not sent to another origin), size + sha256 (LFS) or git blob sha1
 * verification, atomic finalisation (rename). A marker `.safekeep-hub.json` in the folder records what was fetched
 * (repo, revision, commit, per-file size and hash), so a second run reuses verified files without downloading.
 *
 * Bounded: a file is never written past the size the listing declares (a longer or endless body is cut and refused,
 * and a file the listing gives no size for is not fetched), every wait for the server is bounded by
 * `timeouts.downloadMs`, and a file that cannot be completed leaves no `.part` behind unless the connection merely
 * dropped (then the `.part` is kept to resume from). Repo paths are checked before any is written (no `..`, no
 * absolute or control-character names, never our own marker or lock).
 */
import { createHash } from 'node:crypto';
import { closeSync, createReadStream, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { checkRepoPath, DEFAULT_HUB_TIMEOUT_MS, formatSeconds, httpError, hubFetch, HubTimeout, hubToken, listHubFiles, resolveUrl, type HubFile, type HubListing, type HubTarget } from './api.ts';
import { ByteProgress } from './progress.ts';
import { writeJsonAtomic } from '../util/atomic.ts';
import { pidAlive } from '../util/lock.ts';

const MARKER = '.safekeep-hub.json';
const LOCK = '.safekeep-hub.lock';

interface HubMarker {
  repo_id: string;
  repo_type: string;
  revision: string;
  commit: string;
  /** set by `pull` once every file a checkpoint needs is in place */
  complete: boolean;
  files: Record<string, { size: number; oid: string | null }>;
}

interface DownloadHubFilesOptions extends HubTarget {
  destDir: string;
  /** which repo paths to fetch (default: all) */
  include?: (path: string) => boolean;
  /** reuse a listing already fetched (same target) */
  listing?: HubListing;
  /** progress bars on stderr (default true) */
  progress?: boolean;
  /** attempts per file when the connection drops (default 5) */
  maxAttempts?: number;
  /** where the marker lives (default `<destDir>/.safekeep-hub.json`; the hub cache keeps it outside the snapshot) */
  markerPath?: string;
}

interface DownloadHubFilesResult {
  destDir: string;
  commit: string;
  /** repo paths now present and verified */
  files: string[];
  /** of those, how many were downloaded now (rest reused) */
  downloaded: number;
}

/** The marker of a download folder: `<dir>/.safekeep-hub.json` unless the caller keeps it elsewhere (`markerPath`). */
export function readMarker(dir: string, markerPath = join(dir, MARKER)): HubMarker | null {
  const p = markerPath;
  if (!existsSync(p)) return null;
  try {
    const m = JSON.parse(readFileSync(p, 'utf8')) as HubMarker;
    return typeof m === 'object' && m && typeof m.files === 'object' ? m : null;
  } catch {
    return null;
  }
}

export function writeMarker(dir: string, m: HubMarker, markerPath = join(dir, MARKER)): void {
  writeJsonAtomic(markerPath, m);
}

/**
 * sha256 (LFS) or git blob sha1 ("blob <size>\0" + bytes) of a file, streamed: these verify downloads of many
 * gigabytes against the hub's ids, so they do not go through util/hash.ts's in-memory sha256Hex.
 */
async function fileHash(path: string, kind: 'sha256' | 'gitsha1', size: number): Promise<string> {
  const h = createHash(kind === 'sha256' ? 'sha256' : 'sha1');
  if (kind === 'gitsha1') h.update(`blob ${size}\0`);
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}

function expectedOid(f: HubFile): string | null {
  return f.lfsSha256 ?? f.blobId;
}

/** Verifies size and hash of `path` against the listing; returns a problem or null. */
async function verify(path: string, f: HubFile): Promise<string | null> {
  const size = statSync(path).size;
  if (f.size >= 0 && size !== f.size) return `size mismatch (expected ${f.size} bytes, got ${size})`;
  if (f.lfsSha256) {
    const got = await fileHash(path, 'sha256', size);
    if (got !== f.lfsSha256) return `sha256 mismatch (expected ${f.lfsSha256}, got ${got})`;
  } else if (f.blobId) {
    const got = await fileHash(path, 'gitsha1', size);
    if (got !== f.blobId) return `git blob sha1 mismatch (expected ${f.blobId}, got ${got})`;
  }
  return null;
}

class Retryable extends Error {
  /** the server stalled (as opposed to a dropped connection): nothing it sent is kept */
  constructor(message: string, readonly stalled = false) { super(message); }
}

/** One attempt: continue `part` from its current length, never past `f.size`. */
async function fetchIntoPart(url0: string, part: string, f: HubFile, t: HubTarget, token: string | undefined, showProgress: boolean): Promise<void> {
  let have = existsSync(part) ? statSync(part).size : 0;
  if (have > f.size) { rmSync(part, { force: true }); have = 0; }
  if (have === f.size) return;
  const timeoutMs = t.timeouts?.downloadMs ?? DEFAULT_HUB_TIMEOUT_MS;
  const origin = new URL(url0).origin;
  const ac = new AbortController();
  let url = url0;
  let res: Response | null = null;
  try {
    for (let hop = 0; hop < 10; hop++) {
      const headers: Record<string, string> = {};
      if (token && new URL(url).origin === origin) headers.authorization = `Bearer ${token}`;
      if (have > 0) headers.range = `bytes=${have}-`;
      res = await hubFetch(url, { headers, redirect: 'manual', signal: ac.signal, timeoutMs, timeoutName: 'HF_HUB_DOWNLOAD_TIMEOUT' });
      const loc = res.headers.get('location');
      if (res.status >= 300 && res.status < 400 && loc) {
        await res.body?.cancel();
        url = new URL(loc, url).toString();
        continue;
      }
      break;
    }
  } catch (e) {
    if (e instanceof HubTimeout) throw new Retryable(e.message, true);
    throw e;
  }
  if (!res || (res.status >= 300 && res.status < 400)) throw new SafekeepError(`${f.path}: too many redirects from ${url0}`);
  if (res.status === 416) {
    await res.body?.cancel();
    rmSync(part, { force: true });
    throw new Retryable('server refused the resume range; starting over');
  }
  if (!res.ok) {
    await res.body?.cancel();
    if (res.status >= 500) throw new Retryable(`HTTP ${res.status}`);
    throw httpError(t, res.status, `downloading ${f.path}`, Boolean(token));
  }
  if (res.status === 206) {
    const m = /^bytes (\d+)-/.exec(res.headers.get('content-range') ?? '');
    if (!m || Number(m[1]) !== have) {
      await res.body?.cancel();
      rmSync(part, { force: true });
      throw new Retryable('server resumed at the wrong offset; starting over');
    }
  } else if (have > 0) {
    have = 0; // server ignored Range: full content follows
  }
  if (!res.body) throw new Retryable('empty response body');
  const declared = res.headers.get('content-length');
  if (declared !== null && have + Number(declared) > f.size) {
    await res.body.cancel();
    rmSync(part, { force: true });
    throw new SafekeepError(`${f.path}: the server announces ${have + Number(declared)} bytes but the listing declares ${f.size}; refused`);
  }
  const progress = showProgress ? new ByteProgress(f.path, f.size, have) : null;
  const fh = await open(part, have > 0 ? 'a' : 'w');
  const reader = res.body.getReader();
  let written = have;
  let oversize = false;
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const stall = new Promise<'stall'>((r) => { timer = setTimeout(() => r('stall'), timeoutMs); });
      const step = await Promise.race([reader.read(), stall]).finally(() => clearTimeout(timer));
      if (step === 'stall') {
        await reader.cancel().catch(() => {});
        throw new Retryable(`no data for ${formatSeconds(timeoutMs)} (HF_HUB_DOWNLOAD_TIMEOUT, or --timeout)`, true);
      }
      if (step.done) break;
      const chunk = step.value;
      if (written + chunk.length > f.size) {
        oversize = true;
        await reader.cancel().catch(() => {});
        break;
      }
      await fh.write(chunk);
      written += chunk.length;
      progress?.add(chunk.length);
    }
  } catch (e) {
    if (e instanceof Retryable) throw e;
    throw new Retryable(`connection lost (${(e as Error).message})`);
  } finally {
    await fh.close();
    ac.abort();
  }
  if (oversize) {
    rmSync(part, { force: true });
    throw new SafekeepError(`${f.path}: the server sent more than the ${f.size} bytes the listing declares; cut and refused`);
  }
  progress?.finish();
}

/** Fetches into `<dest>.part` until complete, retrying (and resuming) when the connection drops. */
async function fetchWithRetries(url: string, part: string, f: HubFile, t: HubTarget, token: string | undefined, progress: boolean, attempts: number): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await fetchIntoPart(url, part, f, t, token, progress);
      return;
    } catch (e) {
      if (!(e instanceof Retryable)) throw e;
      const have = existsSync(part) ? statSync(part).size : 0;
      if (attempt >= attempts && e.stalled) {
        rmSync(part, { force: true });
        throw new SafekeepError(`${f.path}: download failed after ${attempts} attempts (${e.message}); nothing kept`);
      }
      if (attempt >= attempts) throw new SafekeepError(`${f.path}: download failed after ${attempts} attempts (${e.message}); ${have} bytes kept in ${part}, run again to resume`);
      process.stderr.write(`${f.path}: ${e.message}; retrying from byte ${have} (attempt ${attempt + 1}/${attempts})\n`);
      await new Promise((r) => setTimeout(r, 200 * attempt));
    }
  }
}

/**
 * Downloads one repo file to `dest` (resume, retries, verification, atomic rename). A `.part` left by an earlier
 * run is resumed; if the result does not verify (the part came from another version of the file), the file is
 * fetched once more from the start before giving up.
 */
async function downloadHubFile(t: HubTarget, f: HubFile, revision: string, dest: string, opts: { progress?: boolean; maxAttempts?: number } = {}): Promise<void> {
  const token = hubToken(t.token);
  const url = resolveUrl(t, f.path, revision);
  const part = `${dest}.part`;
  const attempts = opts.maxAttempts ?? 5;
  const progress = opts.progress ?? true;
  if (f.size < 0) throw new SafekeepError(`${f.path}: the hub's listing gives no size for it; refusing an unbounded download`);
  mkdirSync(dirname(dest), { recursive: true });
  const resumedOld = existsSync(part) && statSync(part).size > 0;
  await fetchWithRetries(url, part, f, t, token, progress, attempts);
  let problem = await verify(part, f);
  if (problem && resumedOld) {
    process.stderr.write(`${f.path}: the resumed earlier download does not verify (${problem}); downloading it again from the start\n`);
    rmSync(part, { force: true });
    await fetchWithRetries(url, part, f, t, token, progress, attempts);
    problem = await verify(part, f);
  }
  if (problem) {
    rmSync(part, { force: true });
    throw new SafekeepError(`${f.path}: ${problem} against the hub's metadata; the download was deleted, run again`);
  }
  renameSync(part, dest);
}

/**
 * One downloader per folder at a time (`.safekeep-hub.lock` holds the pid). A second process (or call) waits;
 * a lock whose process is gone is taken over.
 */
async function withDownloadLock<T>(dir: string, fn: () => Promise<T>): Promise<T> {
  mkdirSync(dir, { recursive: true });
  const lock = join(dir, LOCK);
  let announced = false;
  for (;;) {
    try {
      const fd = openSync(lock, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      let text = '';
      let age = 0;
      try {
        text = readFileSync(lock, 'utf8').trim();
        age = Date.now() - statSync(lock).mtimeMs;
      } catch { continue; /* released meanwhile */ }
      const pid = Number(text);
      // an empty lock is a writer between create and write, unless it is old (crashed)
      if ((text === '' && age > 5000) || (text !== '' && !pidAlive(pid))) { rmSync(lock, { force: true }); continue; }
      if (!announced) {
        process.stderr.write(`waiting for another safekeep download (pid ${text || '?'}) into ${dir}\n`);
        announced = true;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(lock, { force: true });
  }
}

/** Repo path → file under destDir, refusing names that are malformed, reserved or would leave it. */
function destFor(t: HubTarget, destDir: string, path: string): string {
  checkRepoPath(t, path);
  const d = resolve(destDir, path);
  if (!d.startsWith(resolve(destDir) + sep)) throw new SafekeepError(`refusing repo path '${path}' (outside the download folder)`);
  return d;
}

/**
 * Downloads the files of a hub repo (model or dataset) selected by `include` into `destDir`, verifying each.
 * Files already present and verified (per the marker, or by hashing) are reused.
 */
export async function downloadHubFiles(o: DownloadHubFilesOptions): Promise<DownloadHubFilesResult> {
  const listing = o.listing ?? (await listHubFiles(o));
  const selected = listing.files.filter((f) => (o.include ? o.include(f.path) : true));
  if (selected.length === 0) throw new SafekeepError(`${o.repoId}@${listing.revision}: no files to download (none matched)`);
  const destDir = resolve(o.destDir);
  for (const f of selected) destFor(o, destDir, f.path);
  return withDownloadLock(destDir, () => downloadLocked(o, listing, selected, destDir));
}

async function downloadLocked(o: DownloadHubFilesOptions, listing: HubListing, selected: HubFile[], destDir: string): Promise<DownloadHubFilesResult> {
  const prev = readMarker(destDir, o.markerPath);
  const same = prev && prev.repo_id === o.repoId && prev.repo_type === o.repoType;
  const marker: HubMarker = {
    repo_id: o.repoId,
    repo_type: o.repoType,
    revision: listing.revision,
    commit: listing.commit,
    complete: Boolean(same && prev.commit === listing.commit && prev.complete),
    files: same ? { ...prev.files } : {},
  };
  let downloaded = 0;
  for (const f of selected) {
    const dest = destFor(o, destDir, f.path);
    const oid = expectedOid(f);
    const known = marker.files[f.path];
    let ok = false;
    if (existsSync(dest)) {
      const size = statSync(dest).size;
      if (known && known.oid === oid && known.size === size && (f.size < 0 || size === f.size)) ok = true;
      else if (f.size < 0 || size === f.size) ok = (await verify(dest, f)) === null;
    }
    if (!ok) {
      delete marker.files[f.path];
      marker.complete = false;
      writeMarker(destDir, marker, o.markerPath);
      await downloadHubFile(o, f, listing.commit, dest, { progress: o.progress, maxAttempts: o.maxAttempts });
      downloaded++;
    }
    marker.files[f.path] = { size: statSync(dest).size, oid };
    writeMarker(destDir, marker, o.markerPath);
  }
  return { destDir, commit: listing.commit, files: selected.map((f) => f.path), downloaded };
}
