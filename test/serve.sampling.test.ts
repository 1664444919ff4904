/**
 * The local server samples (serve/sampling-fields.ts, the engine's per-row sampling): `temperature` + `seed`
 * replay an answer; different seeds at temperature 2 differ; `n` choices are the answers of seeds seed, seed + 1, …
 * (each as the same request with that seed alone, with its own logprobs, whose tokens are the sampled ones); a
 * request without a seed gets one drawn and reported (header and body), which replays it; a filter without a
 * temperature and an unknown sampling field are 400s naming them.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { createLocalServer } from '../src/serve/local.ts';
import { SMALL_GQA, tempCache } from './helpers/engine.ts';
import { charTokenizer } from './helpers/char-tokenizer.ts';

let tmp = '';
let cache: ReturnType<typeof tempCache>;
let engine: OnnxEngine;
let server: Server;
let url = '';
const V = SMALL_GQA[0]!.opts.vocabSize!;
const tokenizer = charTokenizer(V);

before(async () => {
  cache = tempCache();
  tmp = mkdtempSync(join(tmpdir(), 'safekeep-serve-sampling-'));
  await writeRandomCheckpoint(join(tmp, 'm'), 'llama', { seed: 7, ...SMALL_GQA[0]!.opts });
  engine = await createEngine(join(tmp, 'm'), { cacheDir: cache.dir, threads: 1 });
  (engine as { eosIds: number[] }).eosIds = [];
  // the reply cache on: a sampled reply is cached by its seed, never across seeds
  const lb = new LocalBackend(engine, tokenizer, {});
  server = createLocalServer({ backend: lb, method: 'base', modelName: 'tiny', defaultMaxTokens: 12, maxQueue: 16, vocabSize: V, log: () => {} });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
after(async () => {
  server?.closeAllConnections();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  await engine?.dispose();
  cache?.cleanup();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

interface Completion {
  choices: { index: number; message: { content: string }; logprobs?: { content: { token: string; logprob: number; top_logprobs: { token: string; logprob: number }[] }[] } }[];
  usage: { completion_tokens: number };
  safekeep?: { seed: number };
  error?: { message: string };
}

const post = async (extra: Record<string, unknown>): Promise<{ status: number; seed: string | null; body: Completion }> => {
  const r = await fetch(`${url}/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'tell me a story' }], max_tokens: 12, ...extra }),
  });
  return { status: r.status, seed: r.headers.get('x-safekeep-seed'), body: (await r.json()) as Completion };
};
const text = (c: Completion, i = 0) => c.choices[i]!.message.content;

test('temperature + seed replays an answer; other seeds at temperature 2 give other answers; greedy is unchanged', async () => {
  const greedy = await post({});
  assert.equal(greedy.seed, null);
  assert.equal(greedy.body.safekeep, undefined);
  assert.equal(text((await post({ temperature: 0 })).body), text(greedy.body));
  const a = await post({ temperature: 2, seed: 11 });
  assert.equal(a.status, 200);
  assert.equal(a.seed, '11');
  assert.equal(a.body.safekeep?.seed, 11);
  assert.equal(text((await post({ temperature: 2, seed: 11 })).body), text(a.body));
  const others = await Promise.all([12, 13, 14].map((seed) => post({ temperature: 2, seed })));
  assert.equal(new Set([a, ...others].map((r) => text(r.body))).size, 4);
});

test('n choices: seeds seed + i, each the answer of that seed alone, each with the logprobs of its own sampled tokens', async () => {
  const n = await post({ temperature: 1.5, seed: 20, n: 3, logprobs: true, top_logprobs: 2 });
  assert.equal(n.status, 200, JSON.stringify(n.body.error));
  assert.deepEqual(n.body.choices.map((c) => c.index), [0, 1, 2]);
  const alone = await Promise.all([20, 21, 22].map((seed) => post({ temperature: 1.5, seed })));
  assert.deepEqual(n.body.choices.map((c) => c.message.content), alone.map((r) => text(r.body)));
  assert.equal(n.body.usage.completion_tokens, 36);
  for (const c of n.body.choices) {
    const lp = c.logprobs!.content;
    assert.equal(lp.length, 12);
    assert.equal(lp.map((x) => x.token).join(''), c.message.content, 'the logprobs are of the sampled tokens');
  }
  // at temperature 1.5 some sampled token is not the most likely one (its logprob below the top's)
  assert.ok(n.body.choices.some((c) => c.logprobs!.content.some((x) => x.top_logprobs[0]!.logprob > x.logprob)));
});

test('no seed: one is drawn, reported, and replays the answer', async () => {
  const a = await post({ temperature: 1 });
  assert.equal(a.status, 200);
  const seed = Number(a.seed);
  assert.ok(Number.isSafeInteger(seed) && a.body.safekeep?.seed === seed);
  assert.equal(text((await post({ temperature: 1, seed })).body), text(a.body));
});

test('a filter or n without a temperature, a bad range and an unknown sampling field are 400s naming them', async () => {
  for (const [extra, re] of [
    [{ top_p: 0.9 }, /^"top_p" needs "temperature"/], [{ n: 2 }, /^"n" needs "temperature"/], [{ temperature: 1, top_k: 2.5 }, /^"top_k" must be an integer/],
    [{ logit_bias: { [V]: 5 } }, /^"logit_bias" must be keyed by token ids below the vocabulary size/], [{ temperature: 1, typical_p: 0.9 }, /typical_p/],
    [{ temperature: 1, n: 2, stream: true }, /^"n": this server streams one choice/],
  ] as const) {
    const r = await post(extra);
    assert.equal(r.status, 400, JSON.stringify(extra));
    assert.match(r.body.error!.message, re);
  }
});
