/**
 * A local stand-in for the Hugging Face hub on 127.0.0.1 (random ports), for testing `pull` without network.
 * Serves `GET /api/{models|datasets}/{id}/revision/{rev}?blobs=true` and `GET [/datasets]/{id}/resolve/{rev}/{path}`
 * like the hub (LFS files listed with sha256/size; LFS downloads 302-redirect to a second "CDN" server on another
 * port = another origin), with HTTP Range support, and injectable faults: a connection dropped mid-file (once), a
 * wrong advertised sha256, gated repos (401 without token, 403 with a wrong one), a listing or file that stalls
 * (headers or some bytes sent, then nothing), a body longer than the listing declares (or endless), and listings
 * naming files the test chooses (reserved or malformed names). Every request is logged.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface MockRepo {
  id: string;
  type?: 'model' | 'dataset';
  files: Record<string, Buffer>;
  /** accepted bearer token; absent = public */
  token?: string;
  /** revision name → commit sha (default: main → a hash of the content) */
  revisions?: Record<string, string>;
}

export interface LoggedRequest {
  server: 'hub' | 'cdn';
  path: string;
  range: string | null;
  authorization: string | null;
  status: number;
  /** body bytes sent */
  bytes: number;
}

export interface MockHub {
  endpoint: string;
  cdnOrigin: string;
  requests: LoggedRequest[];
  /** repo path → drop the connection after this many body bytes (once, then cleared) */
  dropOnce: Map<string, number>;
  /** repo paths whose listing advertises a wrong sha256 */
  wrongSha: Set<string>;
  /** whether LFS downloads redirect to the CDN (default true) */
  redirectLfs: boolean;
  /** repo path → send this many body bytes, then nothing (the connection stays open until close) */
  stall: Map<string, number>;
  /** the listing of every repo stalls after its headers */
  stallListing: boolean;
  /** repo path → bytes sent beyond the real content ('endless': until the client goes away), no content-length */
  oversize: Map<string, number | 'endless'>;
  /** repo path → the content-length announced (the real content is sent) */
  announce: Map<string, number>;
  close(): Promise<void>;
}

export function isLfsPath(path: string): boolean {
  return path.endsWith('.safetensors') || path.endsWith('.model') || path.endsWith('.parquet');
}

function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

function gitBlobSha1(b: Buffer): string {
  return createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex');
}

function listen(server: Server): Promise<number> {
  return new Promise((res) => server.listen(0, '127.0.0.1', () => res((server.address() as AddressInfo).port)));
}

export async function startMockHub(repos: MockRepo[]): Promise<MockHub> {
  const requests: LoggedRequest[] = [];
  const dropOnce = new Map<string, number>();
  const wrongSha = new Set<string>();
  const bySha = new Map<string, { path: string; data: Buffer }>();
  const commits = new Map<MockRepo, Record<string, string>>();
  for (const r of repos) {
    const h = createHash('sha1');
    for (const [p, b] of Object.entries(r.files).sort()) { h.update(p); h.update(b); }
    commits.set(r, r.revisions ?? { main: h.digest('hex') });
    for (const [p, b] of Object.entries(r.files)) if (isLfsPath(p)) bySha.set(sha256(b), { path: p, data: b });
  }
  const hub: MockHub = {
    endpoint: '',
    cdnOrigin: '',
    requests,
    dropOnce,
    wrongSha,
    redirectLfs: true,
    stall: new Map(),
    stallListing: false,
    oversize: new Map(),
    announce: new Map(),
    close: async () => {},
  };

  /** Sends `data` honouring Range, maybe dropping the connection. */
  function sendBytes(req: IncomingMessage, res: ServerResponse, path: string, data: Buffer, log: LoggedRequest): void {
    const over = hub.oversize.get(path);
    if (over !== undefined) {
      log.status = 200;
      res.writeHead(200, { 'accept-ranges': 'none' });
      res.write(data);
      log.bytes = data.length;
      if (over === 'endless') {
        const chunk = Buffer.alloc(64 * 1024, 1);
        const pump = (): void => {
          while (!res.destroyed && log.bytes < 1 << 30) {
            log.bytes += chunk.length;
            if (!res.write(chunk)) { res.once('drain', pump); return; }
          }
        };
        res.on('close', () => {});
        pump();
      } else {
        res.end(Buffer.alloc(over, 1));
        log.bytes += over;
      }
      return;
    }
    const announced = hub.announce.get(path);
    if (announced !== undefined) {
      log.status = 200;
      res.writeHead(200, { 'content-length': announced });
      res.end(data);
      log.bytes = data.length;
      return;
    }
    const stallAt = hub.stall.get(path);
    if (stallAt !== undefined) {
      log.status = 200;
      res.writeHead(200, { 'content-length': data.length });
      res.write(data.subarray(0, stallAt));
      log.bytes = stallAt;
      return; // nothing more until the client gives up
    }
    const range = req.headers.range;
    let start = 0;
    if (range) {
      const m = /^bytes=(\d+)-$/.exec(range);
      if (!m || Number(m[1]) >= data.length) {
        log.status = 416;
        res.writeHead(416, { 'content-range': `bytes */${data.length}` }).end();
        return;
      }
      start = Number(m[1]);
      log.status = 206;
      res.writeHead(206, { 'content-length': data.length - start, 'content-range': `bytes ${start}-${data.length - 1}/${data.length}`, 'accept-ranges': 'bytes' });
    } else {
      log.status = 200;
      res.writeHead(200, { 'content-length': data.length, 'accept-ranges': 'bytes' });
    }
    const body = data.subarray(start);
    const drop = dropOnce.get(path);
    if (drop !== undefined && drop - start > 0 && drop - start < body.length) {
      dropOnce.delete(path);
      const part = body.subarray(0, drop - start);
      log.bytes = part.length;
      res.write(part, () => setTimeout(() => res.socket?.destroy(), 20));
      return;
    }
    log.bytes = body.length;
    res.end(body);
  }

  const hubServer = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const log: LoggedRequest = { server: 'hub', path: url.pathname + url.search, range: req.headers.range ?? null, authorization: req.headers.authorization ?? null, status: 0, bytes: 0 };
    requests.push(log);
    const fail = (status: number, msg: string): void => { log.status = status; res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ error: msg })); };
    const auth = (r: MockRepo): boolean => {
      if (!r.token) return true;
      const a = req.headers.authorization;
      if (!a) { fail(401, 'Access to this repo is restricted. You must be authenticated.'); return false; }
      if (a !== `Bearer ${r.token}`) { fail(403, 'Access to this repo is restricted and you are not in the authorized list.'); return false; }
      return true;
    };
    const segs = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    // listing
    if (segs[0] === 'api' && (segs[1] === 'models' || segs[1] === 'datasets') && segs[4] === 'revision') {
      const type = segs[1] === 'models' ? 'model' : 'dataset';
      const repo = repos.find((r) => r.id === `${segs[2]}/${segs[3]}` && (r.type ?? 'model') === type);
      if (!repo) return fail(404, 'Repository not found');
      if (!auth(repo)) return;
      const revs = commits.get(repo)!;
      const rev = segs.slice(5).join('/');
      const sha = revs[rev] ?? (Object.values(revs).includes(rev) ? rev : undefined);
      if (!sha) return fail(404, 'Revision not found');
      const siblings = Object.entries(repo.files).sort().map(([p, b]) => {
        const s: Record<string, unknown> = { rfilename: p, size: b.length, blobId: gitBlobSha1(b) };
        if (isLfsPath(p)) {
          s.blobId = createHash('sha1').update(p).digest('hex'); // pointer file's blob, not the content's
          s.lfs = { sha256: wrongSha.has(p) ? sha256(Buffer.from('not this')) : sha256(b), size: b.length, pointerSize: 134 };
        }
        return s;
      });
      log.status = 200;
      if (hub.stallListing) { res.writeHead(200, { 'content-type': 'application/json' }); res.write('{"id":'); return; }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: repo.id, sha, siblings }));
      return;
    }
    // resolve
    const ds = segs[0] === 'datasets';
    const s = ds ? segs.slice(1) : segs;
    if (s[2] === 'resolve') {
      const repo = repos.find((r) => r.id === `${s[0]}/${s[1]}` && (r.type ?? 'model') === (ds ? 'dataset' : 'model'));
      if (!repo) return fail(404, 'Repository not found');
      if (!auth(repo)) return;
      const revs = commits.get(repo)!;
      if (!(s[3]! in revs) && !Object.values(revs).includes(s[3]!)) return fail(404, 'Revision not found');
      const path = s.slice(4).join('/');
      const data = repo.files[path];
      if (!data) return fail(404, 'Entry not found');
      if (isLfsPath(path) && hub.redirectLfs) {
        log.status = 302;
        res.writeHead(302, { location: `${hub.cdnOrigin}/cdn/${sha256(data)}?X-Amz-Signature=abc` }).end();
        return;
      }
      return sendBytes(req, res, path, data, log);
    }
    fail(404, 'not found');
  });

  const cdnServer = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const log: LoggedRequest = { server: 'cdn', path: url.pathname + url.search, range: req.headers.range ?? null, authorization: req.headers.authorization ?? null, status: 0, bytes: 0 };
    requests.push(log);
    const m = /^\/cdn\/([0-9a-f]{64})$/.exec(url.pathname);
    const f = m ? bySha.get(m[1]!) : undefined;
    if (!f) { log.status = 404; res.writeHead(404).end(); return; }
    sendBytes(req, res, f.path, f.data, log);
  });

  const hubPort = await listen(hubServer);
  const cdnPort = await listen(cdnServer);
  hub.endpoint = `http://127.0.0.1:${hubPort}`;
  hub.cdnOrigin = `http://127.0.0.1:${cdnPort}`;
  hub.close = async () => {
    hubServer.closeAllConnections();
    cdnServer.closeAllConnections();
    await Promise.all([new Promise((r) => hubServer.close(r)), new Promise((r) => cdnServer.close(r))]);
  };
  return hub;
}
