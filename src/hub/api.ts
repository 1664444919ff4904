/**
 * The Hugging Face hub HTTP API, the two calls we need:
 *   GET {endpoint}/api/{models|datasets}/{id}/revision/{rev}?blobs=true   → commit sha + files with size, git blob id
 *                                                                            and LFS sha256/size
 *   GET {endpoint}/[datasets/]{id}/resolve/{rev}/{path}                    → the file (redirects to a CDN for LFS)
 * `endpoint` overrides https://huggingface.co and `token` is sent as a bearer token; the CLI fills both from HF_ENDPOINT
 * and HF_TOKEN (cli/env.ts), so nothing here reads the environment.
 */
import { SafekeepError } from '../util/errors.ts';

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
}

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

/**
 * fetch; a failed connection (refused, reset, a reused keep-alive socket closed by the server) is retried
 * `retries` times, then becomes one clear SafekeepError.
 */
export async function hubFetch(url: string, init: { headers?: Record<string, string>; redirect?: 'follow' | 'manual' | 'error'; signal?: AbortSignal } = {}, retries = 2): Promise<Response> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(url, init);
    } catch (e) {
      if (attempt < retries) { await new Promise((r) => setTimeout(r, 250 * (attempt + 1))); continue; }
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      throw new SafekeepError(`cannot reach ${new URL(url).origin} (${cause?.code ?? cause?.message ?? (e as Error).message}); set HF_ENDPOINT for a mirror`);
    }
  }
}

export async function listHubFiles(t: HubTarget): Promise<HubListing> {
  checkRepoId(t.repoId);
  const revision = t.revision ?? 'main';
  const token = hubToken(t.token);
  const url = `${hubEndpoint(t.endpoint)}/api/${t.repoType}s/${t.repoId}/revision/${encodeURIComponent(revision)}?blobs=true`;
  const res = await hubFetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  if (!res.ok) throw httpError({ ...t, revision }, res.status, 'listing files', Boolean(token));
  let body: unknown;
  try {
    body = await res.json();
  } catch {
    throw new SafekeepError(`${repoLabel(t)}: the hub's file listing is not JSON (${url})`);
  }
  const b = body as { sha?: unknown; siblings?: unknown };
  if (!Array.isArray(b.siblings)) throw new SafekeepError(`${repoLabel(t)}: the hub's file listing has no 'siblings' (${url})`);
  const files: HubFile[] = [];
  for (const s of b.siblings as Record<string, unknown>[]) {
    const path = s?.rfilename;
    if (typeof path !== 'string') continue;
    const lfs = s.lfs as { sha256?: unknown; size?: unknown } | undefined;
    const size = typeof lfs?.size === 'number' ? lfs.size : typeof s.size === 'number' ? s.size : -1;
    files.push({
      path,
      size,
      blobId: typeof s.blobId === 'string' ? s.blobId : null,
      lfsSha256: typeof lfs?.sha256 === 'string' ? lfs.sha256 : null,
    });
  }
  return { repoId: t.repoId, repoType: t.repoType, revision, commit: typeof b.sha === 'string' ? b.sha : revision, files };
}
