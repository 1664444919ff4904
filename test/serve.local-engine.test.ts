/**
 * The local server over HTTP on the real engine (a small random checkpoint, a character tokenizer): several clients
 * in one decode batch, each with its own max_tokens, stop strings and streaming, each answered as if alone (same
 * greedy ids); a client that leaves mid-generation has its row dropped at the next step boundary while the others
 * go on unchanged; a step that fails for one sequence is that request's JSON 5xx (no path or engine message in it),
 * the others are answered and the server keeps serving.
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
import type { StepInput } from '../src/engine/run/step.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { createLocalServer } from '../src/serve/local.ts';
import { countTokensUpTo } from '../src/serve/context-length.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { SMALL_GQA, tempCache } from './helpers/engine.ts';
import { charTokenizer } from './helpers/char-tokenizer.ts';

let tmp = '';
let cache: ReturnType<typeof tempCache>;
let engine: OnnxEngine;
let server: Server;
let url = '';
const logs: Record<string, unknown>[] = [];
const V = SMALL_GQA[0]!.opts.vocabSize!;

const tokenizer = charTokenizer(V);

before(async () => {
  cache = tempCache();
  tmp = mkdtempSync(join(tmpdir(), 'safekeep-serve-engine-'));
  await writeRandomCheckpoint(join(tmp, 'm'), 'llama', { seed: 7, ...SMALL_GQA[0]!.opts });
  engine = await createEngine(join(tmp, 'm'), { cacheDir: cache.dir, threads: 1 });
  // random weights: no end token, every answer runs to its max_tokens (or a stop string)
  (engine as { eosIds: number[] }).eosIds = [];
  const lb = new LocalBackend(engine, tokenizer, { responseCache: 0 });
  server = createLocalServer({
    backend: lb, method: 'base', modelName: 'tiny', log: (l) => logs.push(JSON.parse(l) as Record<string, unknown>),
    contextLength: 2048, defaultMaxTokens: 512, maxQueue: 8,
    countPromptTokens: (c, limit) => countTokensUpTo(lb.renderCall(c), (t) => tokenizer.encode(t).length, limit),
  });
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

interface Answer { status: number; content: string; finish: string; completion: number; error?: { message: string; type: string } }

const post = (body: unknown, signal?: AbortSignal) =>
  fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal });

async function answer(r: Response): Promise<Answer> {
  const j = (await r.json()) as { choices?: { message: { content: string }; finish_reason: string }[]; usage?: { completion_tokens: number }; error?: Answer['error'] };
  return { status: r.status, content: j.choices?.[0]?.message.content ?? '', finish: j.choices?.[0]?.finish_reason ?? '', completion: j.usage?.completion_tokens ?? -1, error: j.error };
}

const ask = (user: string, extra: Record<string, unknown> = {}) => ({ messages: [{ role: 'system', content: 'You are an agent.' }, { role: 'user', content: user }], ...extra });
const chat = async (body: unknown) => answer(await post(body));
const settle = () => new Promise((r) => setTimeout(r, 2));
const tokensOf = (content: string): string[] => [...(content.match(/<\d+>/g) ?? [])];

test('clients in one batch: each its own max_tokens, stop strings and stream, each the answer it gets alone', async () => {
  const alone = {
    a: await chat(ask('summarise the reviews', { max_tokens: 7 })),
    b: await chat(ask('send the report to Bob', { max_tokens: 30 })),
    c: await chat(ask('hi', { max_tokens: 12 })),
  };
  assert.deepEqual([alone.a.completion, alone.a.finish, alone.b.completion, alone.c.completion], [7, 'length', 30, 12]);
  // b's stop string: its 10th token, cut where it first appears
  const toks = tokensOf(alone.b.content);
  const stop = toks[9]!;
  const at = toks.indexOf(stop);
  const peak0 = engine.scheduler.stats.peakBatch;
  const [a, b, c] = await Promise.all([
    chat(ask('summarise the reviews', { max_tokens: 7 })),
    chat(ask('send the report to Bob', { max_tokens: 30, stop: ['never appears', stop] })),
    post(ask('hi', { max_tokens: 12, stream: true, stream_options: { include_usage: true } })).then((r) => r.text()),
  ]);
  assert.ok(engine.scheduler.stats.peakBatch >= 2 || peak0 >= 2, 'the requests shared decode steps');
  assert.deepEqual(a, alone.a);
  assert.equal(b.status, 200);
  assert.equal(b.content, toks.slice(0, at).join(''), 'cut before the stop string');
  assert.equal(b.finish, 'stop');
  assert.equal(b.completion, at + 1, 'generation ended at the token that completed the stop string');
  const events = c.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as { choices: { delta: { content?: string }; finish_reason: string | null }[]; usage?: { completion_tokens: number } });
  assert.equal(chunks.map((k) => k.choices[0]?.delta.content ?? '').join(''), alone.c.content);
  assert.ok(chunks.filter((k) => k.choices[0]?.delta.content).length >= 6, 'sent as it was generated, not in one piece');
  assert.equal(chunks.at(-2)!.choices[0]!.finish_reason, 'length');
  assert.equal(chunks.at(-1)!.usage!.completion_tokens, 12);
  assert.equal(engine.scheduler.inFlight, 0);
});

test('a client that leaves mid-generation: its row leaves at the next step, the other client is unaffected', async () => {
  const alone = await chat(ask('short one', { max_tokens: 40 }));
  const ac = new AbortController();
  const st = engine.scheduler.stats;
  const steps0 = st.decodeSteps;
  const leaving = post(ask('write a very long essay', { max_tokens: 400 }), ac.signal).catch(() => null);
  const staying = chat(ask('short one', { max_tokens: 40 }));
  while (st.decodeSteps < steps0 + 5) await settle();
  assert.ok(st.peakBatch >= 2);
  const at = { steps: st.decodeSteps, rows: st.decodeRows };
  ac.abort();
  await leaving;
  const b = await staying;
  assert.deepEqual(b, alone, 'the same greedy answer as alone');
  // after the abort, every decode step but the few before the server saw the socket close computed one row only
  const extraRows = (st.decodeRows - at.rows) - (st.decodeSteps - at.steps);
  assert.ok(extraRows <= 3, `the leaving client's row was computed ${extraRows} more times`);
  while (logs.filter((l) => l.status === 499).length === 0) await settle();
  assert.equal(engine.scheduler.inFlight, 0, 'nothing left in the scheduler');
});

test('a step that fails for one sequence: that request is a JSON 5xx without internals; the others and later ones are served', async () => {
  const alone = await chat(ask('the healthy one', { max_tokens: 20 }));
  const poison = tokenizer.encode('☠')[0]!;
  const e0 = engine as unknown as { prefill: (inp: StepInput) => Promise<unknown>; scheduler: { packTokens: number } };
  const prefill = e0.prefill;
  const pack = e0.scheduler.packTokens;
  // each prompt its own prefill step, so the failure belongs to one sequence
  e0.scheduler.packTokens = 0;
  e0.prefill = async function (this: unknown, inp: StepInput) {
    if (inp.ids.includes(BigInt(poison))) throw new SafekeepError(`${join(tmp, 'm', 'model.safetensors')}: weights could not be read`);
    return prefill.call(this, inp);
  };
  try {
    const [bad, good] = await Promise.all([chat(ask('☠ this one fails', { max_tokens: 20 })), chat(ask('the healthy one', { max_tokens: 20 }))]);
    assert.ok(bad.status >= 500 && bad.status < 600, `status ${bad.status}`);
    assert.equal(bad.content, '', 'no answer');
    assert.ok(bad.error && !bad.error.message.includes(tmp) && !bad.error.message.includes('safetensors'), bad.error?.message);
    assert.deepEqual(good, alone);
  } finally {
    e0.prefill = prefill;
    e0.scheduler.packTokens = pack;
  }
  assert.deepEqual(await chat(ask('the healthy one', { max_tokens: 20 })), alone, 'still serving');
});
