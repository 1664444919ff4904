/**
 * Reading a request body with a size limit: a declared `content-length` above the limit is refused before a byte is
 * read; a body that grows past it is refused at that byte. Either way the client gets its 413 and the connection is
 * closed after the answer, once the rest has been read and discarded (never buffered) up to the server's drain bound
 * (`server.ts`), so that a client still sending reads the 413. How long a client may take to send the body is the
 * server's request timeout.
 */
import type { IncomingMessage } from 'node:http';
import { HttpError } from './errors.ts';

const tooLarge = (limit: number) => new HttpError(413, 'invalid_request_error', `request body exceeds ${limit} bytes`, {}, { connection: 'close' });

export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    return Promise.reject(tooLarge(limit));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (c: Buffer) => {
      if (over) return;
      size += c.length;
      if (size > limit) {
        over = true;
        chunks.length = 0;
        reject(tooLarge(limit));
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => { if (!over) resolve(Buffer.concat(chunks)); });
    req.on('error', () => reject(new HttpError(400, 'invalid_request_error', 'the request body was cut off')));
    req.on('close', () => { if (!req.complete && !over) reject(new HttpError(400, 'invalid_request_error', 'the client closed the connection before sending the whole body')); });
  });
}
