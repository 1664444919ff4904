/**
 * The Hugging Face hub HTTP API, the two calls we need:
 *   GET {endpoint}/api/{models|datasets}/{id}/revision/{rev}?blobs=true   → commit sha + files with size, git blob id
 *                                                                            and LFS sha256/size
 *   GET {endpoint}/[datasets/]{id}/resolve/{rev}/{path}                    → the file (redirects to a CDN for LFS)
 * `endpoint` overrides https://huggingface.co and `token` is sent as a bearer token; the CLI fills both from HF_ENDPOINT
 * and HF_TOKEN (cli/env.ts), so nothing here reads the environment.
 *
 * Every request is bounded in time, as huggingface_hub bounds its own: `timeouts.metadataMs` (HF_HUB_ETAG_TIMEOUT,
 * default 10 s) for a listing to arrive whole, `timeouts.downloadMs` (HF_HUB_DOWNLOAD_TIMEOUT, default 10 s) for a
 * file's response headers and then for each next chunk of its body, so a hub or CDN that stops answering is an error
 * after seconds, never a hang. Listings are bounded in size and depth; file names in them are checked
 * (`checkRepoPath`) before anything is written under them.
 */
import { SafekeepError } from '../util/errors.ts';
import { parseJsonBounded } from '../util/json-bounded.ts';
import { quoteClipped } from '../util/quote.ts';

type RepoType = 'model' | 'dataset';

export interface HubTarget {
  repoId: string;
  repoType: RepoType;
  /** branch, tag or commit (default 'main') */
  revision?: string;
  /** bearer token (the CLI passes $HF_TOKEN); none = anonymous */
  token?: string;
  /** default https://huggingface.co (the CLI passes $HF_ENDPOINT) */
  endpoint?: string;
  /** request time limits (the CLI passes --timeout, HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT) */
  timeouts?: HubTimeouts;
}

export interface HubTimeouts {
  /** a listing must arrive whole within this (default 10 000 ms, huggingface_hub's HF_HUB_ETAG_TIMEOUT) */
  metadataMs?: number;
  /** a file's headers, and each next body chunk, must arrive within this (default 10 000 ms, HF_HUB_DOWNLOAD_TIMEOUT) */
  downloadMs?: number;
}

export const DEFAULT_HUB_TIMEOUT_MS = 10_000;

/** A listing larger than this is not a repo listing (the biggest real ones are a few MB). */
const MAX_LISTING_BYTES = 64 * 1024 * 1024;
/** Files in one listing (real repos: a few thousand at most). */
const MAX_LISTING_FILES = 200_000;

export interface HubFile {
  path: string;
  size: number;
  /** git blob sha1 (the hub's `blobId`) */
  blobId: string | null;
  /** LFS files: sha256 of the content */
  lfsSha256: string | null;
}

export interface HubListing {
  repoId: string;
  repoType: RepoType;
  revision: string;
  /** commit the revision resolved to */
  commit: string;
  files: HubFile[];
}

export const REPO_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*\/[A-Za-z0-9_.-]+$/;

function hubEndpoint(endpoint?: string): string {
  return (endpoint || 'https://huggingface.co').replace(/\/+$/, '');
}

/** an empty token is no token */
export function hubToken(token?: string): string | undefined {
  return token || undefined;
}

function repoLabel(t: HubTarget): string {
  return `${t.repoType === 'dataset' ? 'dataset ' : ''}${t.repoId}`;
}

export function checkRepoId(repoId: string): void {
  if (!REPO_ID.test(repoId) || repoId.includes('..')) {
    throw new SafekeepError(`'${repoId}' is not a Hugging Face repo id (expected owner/name)`);
  }
}

/** Names safekeep itself keeps in a download folder: a repo file of that name would overwrite its bookkeeping. */
const RESERVED_NAMES = ['.safekeep-hub.json', '.safekeep-hub.lock'];

/**
 * A repo file path that is safe to write under a download folder: relative, '/'-separated, no empty, '.' or '..'
 * segment, no NUL or other control character, no backslash, not one of our own marker/lock names, not a `.part`
 * (the partial-download name of another file) nor one of our atomic-write temp names. Returns the problem or null.
 */
export function repoPathProblem(path: string): string | null {
  if (path.length === 0) return 'empty name';
  if (path.length > 1024) return 'name longer than 1024 characters';
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(path)) return 'control character (NUL, newline...) in the name';
  if (path.includes('\\')) return 'backslash in the name';
  if (path.startsWith('/')) return 'absolute path';
  const segs = path.split('/');
  if (segs.some((x) => x === '')) return path.endsWith('/') ? 'trailing separator (a folder, not a file)' : 'empty path segment';
  if (segs.some((x) => x === '.' || x === '..')) return "'.' or '..' segment";
  const base = segs[segs.length - 1]!;
  if (RESERVED_NAMES.includes(base)) return "the name of safekeep's own download marker or lock";
  if (base.endsWith('.part') || /^\..*\.tmp$/.test(base)) return "the name of safekeep's partial-download or temp files";
  return null;
}

/** A git commit as the hub names it: 40 lowercase hex digits. */
export const COMMIT_SHA = /^[0-9a-f]{40}$/;

/**
 * A branch or tag name that is safe as a path under a folder (the hub cache's refs/<revision>): the rules of a
 * repo file path (it may hold '/', as `refs/pr/1` does, never an empty, '.' or '..' segment, a backslash, a control
 * character or a leading '/'). Returns the problem or null.
 */
export function revisionProblem(revision: string): string | null {
  if (revision.length === 0) return 'empty name';
  if (revision.length > 255) return 'name longer than 255 characters';
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(revision)) return 'control character (NUL, newline...) in the name';
  if (revision.includes('\\')) return 'backslash in the name';
  if (revision.startsWith('/')) return 'absolute path';
  const segs = revision.split('/');
  if (segs.some((x) => x === '')) return 'empty path segment';
  if (segs.some((x) => x === '.' || x === '..')) return "'.' or '..' segment";
  return null;
}

/** `repoPathProblem` as one clear error. */
export function checkRepoPath(t: { repoId: string; repoType: RepoType }, path: string): void {
  const problem = repoPathProblem(path);
  if (problem) throw new SafekeepError(`${repoLabel(t)}: refusing repo file ${quoteClipped(path)} (${problem})`);
}

export function resolveUrl(t: HubTarget, path: string, revision: string): string {
  const prefix = t.repoType === 'dataset' ? 'datasets/' : '';
  const p = path.split('/').map(encodeURIComponent).join('/');
  return `${hubEndpoint(t.endpoint)}/${prefix}${t.repoId}/resolve/${encodeURIComponent(revision)}/${p}`;
}

/** A clear message for HTTP failures of the hub (gated / private / missing). */
export function httpError(t: HubTarget, status: number, what: string, hadToken: boolean): SafekeepError {
  const ep = hubEndpoint(t.endpoint);
  const repo = repoLabel(t);
  if (status === 401 && !hadToken) {
    return new SafekeepError(`${repo}: ${what} needs authentication (HTTP 401): the repo is gated or private; set HF_TOKEN to a token with access (${ep}/settings/tokens)`);
  }
  if (status === 401) return new SafekeepError(`${repo}: ${what}: HF_TOKEN was rejected (HTTP 401); check the token`);
  if (status === 403) {
    return new SafekeepError(`${repo}: ${what}: access denied (HTTP 403)${hadToken ? '' : '; set HF_TOKEN'}; for a gated model, accept its license at ${ep}/${t.repoType === 'dataset' ? 'datasets/' : ''}${t.repoId} with the token's account`);
  }
  if (status === 404) return new SafekeepError(`${repo}: ${what}: not found (HTTP 404) at ${ep} (check the repo id and --revision ${t.revision ?? 'main'})`);
  return new SafekeepError(`${repo}: ${what}: HTTP ${status} from ${ep}`);
}

/** The request went past its time limit. */
export class HubTimeout extends SafekeepError {}

/**
 * fetch; a failed connection (refused, reset, a reused keep-alive socket closed by the server) is retried
 * `retries` times, then becomes one clear SafekeepError. `timeoutMs` bounds the wait for the response headers
 * (`HubTimeout`); `signal` lets the caller abort the body later.
 */
export async function hubFetch(url: string, init: { headers?: Record<string, string>; redirect?: 'follow' | 'manual' | 'error'; signal?: AbortSignal; timeoutMs?: number; timeoutName?: string } = {}, retries = 2): Promise<Response> {
  const timeoutMs = init.timeoutMs ?? DEFAULT_HUB_TIMEOUT_MS;
  for (let attempt = 0; ; attempt++) {
    const ac = new AbortController();
    const onOuter = (): void => ac.abort();
    init.signal?.addEventListener('abort', onOuter, { once: true });
    const timer = setTimeout(() => ac.abort(), timeoutMs);
    try {
      return await fetch(url, { headers: init.headers, redirect: init.redirect, signal: ac.signal });
    } catch (e) {
      if (ac.signal.aborted && !init.signal?.aborted) {
        throw new HubTimeout(`${new URL(url).origin} did not answer within ${formatSeconds(timeoutMs)} (${init.timeoutName ?? 'HF_HUB_DOWNLOAD_TIMEOUT'}, or --timeout)`);
      }
      if (attempt < retries && !init.signal?.aborted) { await new Promise((r) => setTimeout(r, 250 * (attempt + 1))); continue; }
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      throw new SafekeepError(`cannot reach ${new URL(url).origin} (${cause?.code ?? cause?.message ?? (e as Error).message}); set HF_ENDPOINT for a mirror`);
    } finally {
      clearTimeout(timer);
      init.signal?.removeEventListener('abort', onOuter);
    }
  }
}

export function formatSeconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`;
}

/**
 * The body of `res` as text, at most `maxBytes`, each chunk due within `timeoutMs` of the one before and the whole
 * within `totalMs`; cut and refused beyond either.
 */
async function readBodyBounded(res: Response, what: string, maxBytes: number, totalMs: number, timeoutName: string, limitMs = totalMs): Promise<string> {
  const declared = Number(res.headers.get('content-length') ?? -1);
  if (declared > maxBytes) { await res.body?.cancel(); throw new SafekeepError(`${what}: ${declared} bytes declared (at most ${maxBytes})`); }
  if (!res.body) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let n = 0;
  const deadline = Date.now() + totalMs;
  for (;;) {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((r) => { timer = setTimeout(() => r('late'), Math.max(0, deadline - Date.now())); });
    const step = await Promise.race([reader.read(), late]).finally(() => clearTimeout(timer));
    if (step === 'late') {
      await reader.cancel().catch(() => {});
      throw new HubTimeout(`${what}: not complete within ${formatSeconds(limitMs)} (${timeoutName}, or --timeout)`);
    }
    if (step.done) break;
    n += step.value.length;
    if (n > maxBytes) { await reader.cancel().catch(() => {}); throw new SafekeepError(`${what}: more than ${maxBytes} bytes; refused`); }
    chunks.push(step.value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export async function listHubFiles(t: HubTarget): Promise<HubListing> {
  checkRepoId(t.repoId);
  const revision = t.revision ?? 'main';
  const token = hubToken(t.token);
  const url = `${hubEndpoint(t.endpoint)}/api/${t.repoType}s/${t.repoId}/revision/${encodeURIComponent(revision)}?blobs=true`;
  const timeoutMs = t.timeouts?.metadataMs ?? DEFAULT_HUB_TIMEOUT_MS;
  const started = Date.now();
  const res = await hubFetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {}, timeoutMs, timeoutName: 'HF_HUB_ETAG_TIMEOUT' });
  if (!res.ok) { await res.body?.cancel(); throw httpError({ ...t, revision }, res.status, 'listing files', Boolean(token)); }
  const what = `${repoLabel(t)}: the hub's file listing`;
  const text = await readBodyBounded(res, what, MAX_LISTING_BYTES, Math.max(0, timeoutMs - (Date.now() - started)), 'HF_HUB_ETAG_TIMEOUT', timeoutMs);
  let body: unknown;
  try {
    body = parseJsonBounded(text, what, 16);
  } catch (e) {
    throw new SafekeepError(`${(e as Error).message} (${url})`);
  }
  const b = (body ?? {}) as { sha?: unknown; siblings?: unknown };
  if (!Array.isArray(b.siblings)) throw new SafekeepError(`${repoLabel(t)}: the hub's file listing has no 'siblings' (${url})`);
  if (b.siblings.length > MAX_LISTING_FILES) throw new SafekeepError(`${repoLabel(t)}: the hub's file listing names ${b.siblings.length} files (at most ${MAX_LISTING_FILES})`);
  const files: HubFile[] = [];
  for (const s of b.siblings as Record<string, unknown>[]) {
    const path = s?.rfilename;
    if (typeof path !== 'string') continue;
    const lfs = s.lfs as { sha256?: unknown; size?: unknown } | undefined;
    const isSize = (x: unknown): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
    const size = isSize(lfs?.size) ? lfs.size : isSize(s.size) ? s.size : -1;
    files.push({
      path,
      size,
      blobId: typeof s.blobId === 'string' ? s.blobId : null,
      lfsSha256: typeof lfs?.sha256 === 'string' ? lfs.sha256 : null,
    });
  }
  // the commit names folders (the hub cache's snapshots/<commit>) and goes into URLs: only a real sha is taken
  if (b.sha !== undefined && (typeof b.sha !== 'string' || !COMMIT_SHA.test(b.sha))) {
    throw new SafekeepError(`${repoLabel(t)}: the hub's file listing gives the commit ${quoteClipped(b.sha)}, not a 40-hex-digit sha; refused`);
  }
  return { repoId: t.repoId, repoType: t.repoType, revision, commit: typeof b.sha === 'string' ? b.sha : revision, files };
}
