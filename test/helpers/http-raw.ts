/**
 * One HTTP/1.1 request with the path and headers exactly as given (fetch would resolve `.` segments and set Host
 * itself): for the path-canonicalisation and Host tests.
 */
import { request } from 'node:http';

export interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  json(): { error?: { message: string; type: string; code?: number } } & Record<string, unknown>;
}

export function rawRequest(port: number, o: { method?: string; path: string; headers?: Record<string, string>; body?: string }): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const body = o.body ?? '';
    const req = request({
      host: '127.0.0.1', port, method: o.method ?? 'POST', path: o.path,
      headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...o.headers },
      timeout: 10_000,
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, json: () => JSON.parse(text) as ReturnType<RawAnswer['json']> });
      });
    });
    req.on('timeout', () => req.destroy(new Error('raw request timed out')));
    req.on('error', reject);
    req.end(body);
  });
}
