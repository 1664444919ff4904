/**
 * The guard proxy under test: a scripted upstream (guard-mock.ts) and `createGuardProxy` in front of it on
 * 127.0.0.1, both closed when the test ends. Every proxy test sets up the same pair; only the script and the
 * proxy's options differ.
 */
import type { TestContext } from 'node:test';
import type { AddressInfo } from 'node:net';
import { createGuardProxy, type ProxyOptions } from '../../src/serve/proxy.ts';
import { startMockUpstream, type MockUpstream } from './guard-mock.ts';

export interface ProxyUnderTest {
  up: MockUpstream;
  port: number;
  /** http://127.0.0.1:PORT/v1 */
  url: string;
  /** the proxy's log lines as written */
  lines: string[];
  /** the same lines parsed (each is one JSON object) */
  logs: Record<string, unknown>[];
}

/** Defaults: judge model `judge-m`, 10 s upstream timeout, no retries; `options` override them. */
export async function startProxy(t: TestContext, script: Parameters<typeof startMockUpstream>[0], options: Partial<ProxyOptions> = {}): Promise<ProxyUnderTest> {
  const up = await startMockUpstream(script);
  const lines: string[] = [];
  const logs: Record<string, unknown>[] = [];
  const server = createGuardProxy({
    upstream: up.url, judgeModel: 'judge-m', timeoutMs: 10_000, retries: 0,
    log: (l) => { lines.push(l); logs.push(JSON.parse(l) as Record<string, unknown>); },
    ...options,
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
    await up.close();
  });
  const port = (server.address() as AddressInfo).port;
  return { up, port, url: `http://127.0.0.1:${port}/v1`, lines, logs };
}
