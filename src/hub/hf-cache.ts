/**
 * The Hugging Face hub cache, shared with Python (huggingface_hub, transformers) so one download serves both:
 *
 *   <cache>/models--<org>--<name>/
 *     refs/<revision>                 the commit a branch or tag pointed to when last fetched (one line)
 *     snapshots/<commit>/<path>       the repo's files at that commit, symlinks into blobs/
 *     blobs/<oid>                     file contents named by their hub id (sha256 for LFS files, git blob sha1 otherwise)
 *
 * `<cache>` is HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub (the CLI works it out, cli/env.ts).
 * Reading: a snapshot counts only when it holds a whole checkpoint (config.json and every weight file), so a
 * half-finished Python download is never used. Writing (`pull --hf-cache`): files are downloaded into the snapshot
 * folder with the usual verification, then moved into blobs/ and replaced by relative symlinks, and refs/<revision>
 * written last, which is what huggingface_hub reads.
 */
import { existsSync, lstatSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { writeFileAtomic } from '../util/atomic.ts';
import { parseJsonBounded } from '../util/json-bounded.ts';
import { SafekeepError } from '../util/errors.ts';
import { quoteClipped } from '../util/quote.ts';
import { checkRepoId, COMMIT_SHA, repoPathProblem, revisionProblem } from './api.ts';

/** `models--org--name` under the cache. */
export function hfCacheRepoDir(cache: string, repoId: string): string {
  checkRepoId(repoId);
  return join(cache, `models--${repoId.split('/').join('--')}`);
}

const COMMIT = COMMIT_SHA;

/**
 * The commit and revision become folder and file names in the cache (snapshots/<commit>, refs/<revision>), and both
 * come from outside (the hub's listing, --revision): a commit is 40 hex digits, a revision a relative name with no
 * '..' segment, so neither can point outside the repo's own folder or at another model's.
 */
function checkCommit(repoId: string, commit: string): void {
  if (!COMMIT.test(commit)) throw new SafekeepError(`${repoId}: commit ${quoteClipped(commit)} is not a 40-hex-digit sha; refusing it as a hub-cache folder name`);
}

export function checkHfCacheRevision(repoId: string, revision: string): void {
  const problem = revisionProblem(revision);
  if (problem) throw new SafekeepError(`${repoId}: revision ${quoteClipped(revision)} cannot name a file under refs/ (${problem})`);
}

/** The commit a revision names in the cache (refs/<revision>, or the revision itself when it is a cached commit). */
function cachedCommit(repoDir: string, revision: string): string | null {
  if (COMMIT.test(revision) && existsSync(join(repoDir, 'snapshots', revision))) return revision;
  if (revisionProblem(revision)) return null;
  const ref = join(repoDir, 'refs', revision);
  try {
    const sha = readFileSync(ref, 'utf8').trim();
    return COMMIT.test(sha) ? sha : null;
  } catch {
    return null;
  }
}

function isFile(p: string): boolean {
  try {
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

/** Whether a folder holds a whole checkpoint: config.json and the weights (every shard the index names). */
export function holdsCheckpoint(dir: string): boolean {
  if (!isFile(join(dir, 'config.json'))) return false;
  if (isFile(join(dir, 'model.safetensors'))) return true;
  const index = join(dir, 'model.safetensors.index.json');
  if (!isFile(index)) return false;
  try {
    const wm = (parseJsonBounded(readFileSync(index, 'utf8'), index) as { weight_map?: Record<string, unknown> } | null)?.weight_map;
    if (!wm || typeof wm !== 'object') return false;
    const shards = [...new Set(Object.values(wm))];
    return shards.length > 0 && shards.every((s) => typeof s === 'string' && !s.includes('/') && !s.includes('..') && isFile(join(dir, s)));
  } catch {
    return false;
  }
}

/** The snapshot folder of `repoId@revision` in the cache when it holds a whole checkpoint, else null. */
export function findCachedSnapshot(cache: string, repoId: string, revision = 'main'): string | null {
  const repoDir = hfCacheRepoDir(cache, repoId);
  const commit = cachedCommit(repoDir, revision);
  if (!commit) return null;
  const snap = join(repoDir, 'snapshots', commit);
  return holdsCheckpoint(snap) ? snap : null;
}

/**
 * Where `pull --hf-cache` keeps its download record of a snapshot: beside, not inside, `snapshots/` (Python lists
 * every file of a snapshot folder as part of the revision).
 */
export function hfMarkerPath(cache: string, repoId: string, commit: string): string {
  checkCommit(repoId, commit);
  return join(hfCacheRepoDir(cache, repoId), '.safekeep', `${commit}.json`);
}

/** Where `pull --hf-cache` downloads `repoId` at `commit`. */
export function hfSnapshotDir(cache: string, repoId: string, commit: string): string {
  checkCommit(repoId, commit);
  return join(hfCacheRepoDir(cache, repoId), 'snapshots', commit);
}

/**
 * Turns the downloaded files of a snapshot folder into the cache layout: each regular file moves to blobs/<oid>
 * (or is dropped when that blob is already there) and becomes a relative symlink; then refs/<revision> = commit.
 * `files` maps repo path → oid (sha256 or git blob sha1, as the listing gave it).
 */
export function linkSnapshotIntoCache(cache: string, repoId: string, revision: string, commit: string, files: Record<string, string | null>): void {
  const repoDir = hfCacheRepoDir(cache, repoId);
  const snap = hfSnapshotDir(cache, repoId, commit);
  if (revision !== commit) checkHfCacheRevision(repoId, revision);
  for (const path of Object.keys(files)) {
    const problem = repoPathProblem(path);
    if (problem) throw new SafekeepError(`${repoId}: refusing repo file ${quoteClipped(path)} in the hub cache (${problem})`);
  }
  const blobs = join(repoDir, 'blobs');
  mkdirSync(blobs, { recursive: true });
  for (const [path, oid] of Object.entries(files)) {
    const p = join(snap, path);
    if (!oid || !/^[0-9a-f]{40,64}$/.test(oid) || lstatSync(p).isSymbolicLink()) continue;
    const blob = join(blobs, oid);
    if (existsSync(blob)) rmSync(p);
    else renameSync(p, blob);
    symlinkSync(relative(dirname(p), blob), p);
  }
  if (revision !== commit) writeFileAtomic(join(repoDir, 'refs', revision), commit);
}
