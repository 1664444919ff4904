/**
 * The local server's bounds on the HTTP side, with a scripted backend that behaves like the engine (honours
 * ChatCall.signal at its "steps"): prompt + max_tokens over the context → 400 in vLLM's wording within a second
 * (counted before anything runs), a client that leaves cancels its call and frees the server, a full queue → 429
 * with Retry-After, the per-request deadline → 504, finish_reason 'length', usage in streams when asked, end tokens
 * stripped, bad max_tokens → 400. Also: the engine's generate loop stops at the step boundary once its signal fires.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { createLocalServer, type LocalServerOptions } from '../src/serve/local.ts';
import { countTokensUpTo } from '../src/serve/context-length.ts';
import type { ChatBackend, ChatCall, ChatReply } from '../src/guard/types.ts';
import { messageText } from '../src/guard/judge-context.ts';
import { judgeCall } from '../src/guard/judge.ts';
import { withSafetyPrompt } from '../src/guard/respond.ts';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngineFromCheckpoint } from '../src/engine/engine.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { tempCache } from './helpers/engine.ts';

/** one token per whitespace-separated word of the messages' text */
const words = (s: string) => s.split(/\s+/).filter(Boolean).length;
const promptText = (c: ChatCall) => c.messages.map((m) => messageText(m.content)).join(' ');

interface Fake extends ChatBackend {
  calls: ChatCall[];
  aborted: number[];
  release(): void;
}

/** answers `reply` at once, or (when `hold`) after release() / its signal, like an engine step loop every 10 ms */
function fakeBackend(reply: Partial<ChatReply> = {}, hold = false): Fake {
  const calls: ChatCall[] = [];
  const aborted: number[] = [];
  let released = false;
  return {
    name: 'fake', callFormat: 'llama3', calls, aborted,
    release: () => { released = true; },
    async chat(c: ChatCall): Promise<ChatReply> {
      calls.push(c);
      const t0 = performance.now();
      while (hold && !released && !c.signal?.aborted && performance.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 10));
      if (c.signal?.aborted) aborted.push(performance.now());
      return { content: 'Hello<|eot_id|>', toolCalls: [], promptTokens: words(promptText(c)), completionTokens: 3, latencyMs: 1, cached: false, finish: c.signal?.aborted ? 'cancelled' : 'stop', ...reply };
    },
  };
}

async function serve(t: import('node:test').TestContext, backend: ChatBackend, extra: Partial<LocalServerOptions> = {}): Promise<string> {
  const server: Server = createLocalServer({
    backend, method: 'base', modelName: 'fake', log: () => undefined, contextLength: 100, defaultMaxTokens: 16,
    countPromptTokens: (c, limit) => countTokensUpTo(promptText(c), words, limit), ...extra,
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

const post = (url: string, body: unknown, signal?: AbortSignal) => fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal });
const ask = (n: number) => [{ role: 'user', content: Array.from({ length: n }, (_, i) => `w${i}`).join(' ') }];

test('context length: prompt + max_tokens above it → 400 in the wording clients know, before the model runs', async (t) => {
  const b = fakeBackend();
  const url = await serve(t, b);
  const r = await post(url, { messages: ask(60), max_tokens: 50 });
  assert.equal(r.status, 400);
  assert.equal(((await r.json()) as { error: { message: string } }).error.message,
    "This model's maximum context length is 100 tokens. However, you requested 110 tokens (60 in the messages, 50 in the completion). Please reduce the length of the messages or completion.");
  // a huge prompt (1.5 M words, ~14 MB, under the body limit) is refused after encoding about one chunk of it (the
  // old server encoded and prefilled all of it: minutes); what is left is parsing the body
  let encoded = 0;
  const logs: Record<string, unknown>[] = [];
  const url2 = await serve(t, b, {
    log: (l) => logs.push(JSON.parse(l) as Record<string, unknown>),
    countPromptTokens: (c, limit) => countTokensUpTo(promptText(c), (x) => { encoded += x.length; return words(x); }, limit),
  });
  const body = { messages: ask(1_500_000), max_tokens: 1 };
  const big = await post(url2, body);
  assert.equal(big.status, 400);
  assert.match(((await big.json()) as { error: { message: string } }).error.message, /^This model's maximum context length is 100 tokens\. However, you requested more than \d+ tokens/);
  assert.ok(encoded <= 4096, `encoded ${encoded} of ${JSON.stringify(body).length} characters`);
  assert.ok((logs[0]!.ms as number) < 5000, `answered in ${logs[0]!.ms} ms (on a loaded shared machine; ~0.2 s idle)`);
  assert.equal(b.calls.length, 0, 'nothing was generated');
  // without max_tokens the budget shrinks to what is left; a prompt that fills the context is refused
  const fit = await post(url, { messages: ask(90) });
  assert.equal(fit.status, 200);
  assert.equal(b.calls[0]!.maxTokens, 10);
  assert.equal((await post(url, { messages: ask(100) })).status, 400);
});

test('countTokensUpTo: exact below the chunk size, stops early above the limit, chunked counts add up', () => {
  const text = Array.from({ length: 5000 }, (_, i) => `word${i}`).join(' ');
  let encoded = 0;
  const enc = (s: string) => { encoded += s.length; return words(s); };
  assert.deepEqual(countTokensUpTo(text, enc, 10_000), { tokens: 5000, exact: true });
  assert.deepEqual(countTokensUpTo(text, words, 10_000, 4096), { tokens: 5000, exact: true }, 'chunks cut at spaces add up to the whole');
  encoded = 0;
  const r = countTokensUpTo(text.repeat(100), enc, 100, 4096);
  assert.equal(r.exact, false);
  assert.ok(r.tokens > 100);
  assert.ok(encoded < 10_000, `encoded ${encoded} characters of ${text.length * 100}`);
});

test('a client that leaves cancels its call at the next step and frees the server', async (t) => {
  const b = fakeBackend({}, true);
  const url = await serve(t, b, { maxQueue: 1 });
  const ac = new AbortController();
  const pending = post(url, { messages: ask(3), max_tokens: 50 }, ac.signal).catch(() => null);
  while (b.calls.length === 0) await new Promise((r) => setTimeout(r, 5));
  const t0 = performance.now();
  ac.abort();
  await pending;
  while (b.aborted.length === 0 && performance.now() - t0 < 3000) await new Promise((r) => setTimeout(r, 5));
  assert.equal(b.aborted.length, 1, 'the backend saw the abort');
  assert.ok(b.aborted[0]! - t0 < 1000, `cancelled ${Math.round(b.aborted[0]! - t0)} ms after the client left`);
  b.release();
  const next = await post(url, { messages: ask(3) });
  assert.equal(next.status, 200, 'the slot was freed');
});

test('a client that leaves cancels a judge on its own backend too', async (t) => {
  const judge = fakeBackend({}, true);
  const agent = fakeBackend();
  const url = await serve(t, agent, { method: 'safekeep', contextLength: 4096, judgeBackend: judge });
  const tools = [{ type: 'function', function: { name: 'send_email', parameters: { type: 'object', properties: {} } } }];
  const ac = new AbortController();
  const pending = post(url, { messages: ask(3), tools }, ac.signal).catch(() => null);
  while (judge.calls.length === 0) await new Promise((r) => setTimeout(r, 5));
  assert.equal(judge.calls[0]!.purpose, 'judge');
  const t0 = performance.now();
  ac.abort();
  await pending;
  while (judge.aborted.length === 0 && performance.now() - t0 < 3000) await new Promise((r) => setTimeout(r, 5));
  assert.equal(judge.aborted.length, 1, 'the judge saw the abort');
  assert.equal(agent.calls.length, 0, 'no agent call after the client left');
  judge.release();
});

test('a full queue → 429 with Retry-After; the deadline → 504', async (t) => {
  const b = fakeBackend({}, true);
  const url = await serve(t, b, { maxQueue: 2 });
  const a1 = post(url, { messages: ask(3) });
  const a2 = post(url, { messages: ask(3) });
  while (b.calls.length < 2) await new Promise((r) => setTimeout(r, 5));
  const r = await post(url, { messages: ask(3) });
  assert.equal(r.status, 429);
  assert.match(r.headers.get('retry-after') ?? '', /^\d+$/);
  assert.equal(((await r.json()) as { error: { type: string } }).error.type, 'rate_limit_error');
  b.release();
  assert.deepEqual([(await a1).status, (await a2).status], [200, 200]);
  const slow = fakeBackend({}, true);
  const url2 = await serve(t, slow, { requestTimeoutMs: 300 });
  const t0 = performance.now();
  const d = await post(url2, { messages: ask(3) });
  assert.equal(d.status, 504);
  assert.ok(performance.now() - t0 < 2000);
  assert.equal(slow.aborted.length, 1, 'the deadline cancelled the call');
});

test('answers: finish_reason length, end tokens stripped, usage in streams when asked; bad max_tokens → 400', async (t) => {
  const url = await serve(t, fakeBackend({ finish: 'length', content: 'Hi there<|end|>' }));
  const j = (await (await post(url, { messages: ask(3), max_tokens: 3 })).json()) as { choices: { message: { content: string }; finish_reason: string }[]; usage: { completion_tokens: number } };
  assert.deepEqual([j.choices[0]!.message.content, j.choices[0]!.finish_reason, j.usage.completion_tokens], ['Hi there', 'length', 3]);
  const s = await (await post(url, { messages: ask(3), stream: true, stream_options: { include_usage: true } })).text();
  const events = s.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  assert.equal(events.at(-1), '[DONE]');
  const usage = JSON.parse(events.at(-2)!) as { choices: unknown[]; usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } };
  assert.deepEqual(usage, { ...usage, choices: [], usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 } });
  assert.ok(!s.includes('<|end|>'));
  const plain = await (await post(url, { messages: ask(3), stream: true })).text();
  assert.ok(!plain.includes('"usage"'), 'no usage chunk unless asked');
  for (const max_tokens of [0, 'abc', -1, 2.5]) {
    const r = await post(url, { messages: ask(3), max_tokens });
    assert.equal(r.status, 400, String(max_tokens));
  }
});

test('stop: a string or up to 4 of 1..128 characters, passed to the agent call; anything else → 400', async (t) => {
  const b = fakeBackend();
  const url = await serve(t, b);
  assert.equal((await post(url, { messages: ask(3), stop: 'END' })).status, 200);
  assert.equal((await post(url, { messages: ask(3), stop: ['a', 'b', 'c', 'd'] })).status, 200);
  assert.equal((await post(url, { messages: ask(3), stop: null })).status, 200);
  assert.deepEqual(b.calls.map((c) => c.stop ?? []), [['END'], ['a', 'b', 'c', 'd'], []]);
  for (const stop of [['a', 'b', 'c', 'd', 'e'], [''], ['x'.repeat(129)], [3], 3, { s: 'x' }]) {
    const r = await post(url, { messages: ask(3), stop });
    assert.equal(r.status, 400, JSON.stringify(stop).slice(0, 40));
    assert.match(((await r.json()) as { error: { message: string } }).error.message, /^"stop"/);
  }
  assert.equal(b.calls.length, 3, 'nothing generated for a bad stop');
});

test('context length: the guard\'s own calls are counted too — a judge context or SafePrompt prompt that does not fit is the client\'s 400 before anything runs', async (t) => {
  const tools = [{ type: 'function', function: { name: 'send_email', description: 'Send an email to a recipient.', parameters: { type: 'object', properties: { to: { type: 'string' } } } } }];
  const messages = ask(20);
  const agentWords = 20;
  const specs = tools.map((x) => ({ type: 'function' as const, function: { ...x.function } }));
  // what the judge and the SafePrompt agent call hold, counted the way the server counts (words of the messages)
  const judgeWords = words(promptText(judgeCall(messages, specs, { toolView: 'prose' })));
  const safePromptWords = words(promptText({ messages: withSafetyPrompt(messages), maxTokens: 1, purpose: 'agent' }));
  const N = agentWords + 16 + 4; // the agent call fits with max_tokens 16; neither guard prompt does
  assert.ok(judgeWords + 8 > N && safePromptWords + 16 > N, `judge ${judgeWords}, safeprompt ${safePromptWords} words`);
  for (const method of ['safekeep', 'safejudge', 'safeprompt'] as const) {
    const b = fakeBackend();
    const url = await serve(t, b, { method, contextLength: N });
    const r = await post(url, { messages, tools, max_tokens: 16 });
    const j = (await r.json()) as { error: { message: string } };
    assert.equal(r.status, 400, method);
    assert.match(j.error.message, new RegExp(`^the guard's ${method === 'safeprompt' ? 'agent' : 'judge'} call for this request does not fit: This model's maximum context length is ${N} tokens`), method);
    assert.equal(b.calls.length, 0, `${method}: nothing ran`);
    // base (and any method without tools) makes only the agent call, which fits
    const ok = await post(await serve(t, b, { method: 'base', contextLength: N }), { messages, tools, max_tokens: 16 });
    assert.equal(ok.status, 200);
  }
  // with room for every call the guarded request runs: judge, then the agent (the fake's judge answer is no verdict → refusal)
  const b = fakeBackend();
  const r = await post(await serve(t, b, { method: 'safekeep', contextLength: judgeWords + 100 }), { messages, tools, max_tokens: 16 });
  assert.equal(r.status, 200);
  assert.equal(b.calls[0]!.purpose, 'judge');
});

test('fail closed: a judge or backend that throws is a 500 without its message and nothing is executed; a template refusal is a 400 without the server\'s paths', async (t) => {
  const tools = [{ type: 'function', function: { name: 'send_email', parameters: { type: 'object', properties: {} } } }];
  for (const err of [new Error('judge exploded at /models/secret-dir'), new SafekeepError('/models/secret-dir/model.safetensors: not a regular file')]) {
    const purposes: string[] = [];
    const backend: ChatBackend = {
      name: 'fake', callFormat: 'llama3',
      async chat(c) {
        purposes.push(c.purpose);
        if (c.purpose === 'judge') throw err;
        return { content: 'sent', toolCalls: [], promptTokens: 1, completionTokens: 1, latencyMs: 1, cached: false, finish: 'stop' };
      },
    };
    const url = await serve(t, backend, { method: 'safekeep', contextLength: 4096 });
    const r = await post(url, { messages: ask(3), tools });
    assert.equal(r.status, 500, err.message);
    const j = (await r.json()) as { error: { message: string; type: string }; choices?: unknown };
    assert.equal(j.error.type, 'internal_error');
    assert.ok(!j.error.message.includes('secret-dir'), j.error.message);
    assert.equal(j.choices, undefined);
    assert.deepEqual(purposes, ['judge'], 'no agent call after the judge failed');
  }
  const url = await serve(t, fakeBackend(), {
    hidden: ['/models/secret-dir'],
    countPromptTokens: () => { throw new SafekeepError('/models/secret-dir: chat template rendering failed (Conversation roles must alternate)'); },
  });
  const r = await post(url, { messages: ask(3) });
  assert.equal(r.status, 400);
  assert.equal(((await r.json()) as { error: { message: string } }).error.message, '***: chat template rendering failed (Conversation roles must alternate)');
});

test('bounds: max_tokens at most the server\'s limit, 2048 messages, 128 tools; fields at their no-op value, sampling ranges checked (a filter without a temperature refused), unknown fields refused by name', async (t) => {
  const b = fakeBackend();
  let counted = 0;
  const url = await serve(t, b, { maxTokensLimit: 20, countPromptTokens: (c, limit) => { counted++; return countTokensUpTo(promptText(c), words, limit); } });
  const status = async (extra: Record<string, unknown>) => {
    const r = await post(url, { messages: ask(3), ...extra });
    const j = (await r.json()) as { error?: { message: string } };
    return r.status === 200 ? 200 : `${r.status} ${j.error?.message}`;
  };
  assert.equal(await status({ max_tokens: 20 }), 200);
  assert.match(String(await status({ max_tokens: 21 })), /^400 "max_tokens" 21 is above this server's limit of 20 tokens$/);
  assert.match(String(await status({ max_completion_tokens: 500 })), /^400 "max_completion_tokens" 500 is above/);
  assert.equal(await status({}), 200);
  assert.equal(b.calls.at(-1)!.maxTokens, 16, 'the default when none is given');
  for (const ok of [{ n: 1 }, { logprobs: false }, { top_logprobs: 0 }, { temperature: 0.7, top_p: 0.9 }, { temperature: 0 }, { tool_choice: 'auto' },
    { response_format: { type: 'text' } }, { frequency_penalty: 0, presence_penalty: 0, logit_bias: {} }, { seed: 3, user: 'u' }, { chat_template_kwargs: {}, parallel_tool_calls: true },
    { n: 2, temperature: 1 }, { presence_penalty: 1, logit_bias: { 5: 100 } }, { temperature: 1, top_k: 5, min_p: 0.1, repetition_penalty: 1.2 }]) {
    assert.equal(await status(ok), 200, JSON.stringify(ok));
  }
  for (const [bad, field] of [[{ n: 2 }, 'n'], [{ logprobs: true }, 'logprobs'], [{ top_logprobs: 3 }, 'top_logprobs'], [{ temperature: 2.5 }, 'temperature'],
    [{ temperature: 'hot' }, 'temperature'], [{ top_p: 1.5 }, 'top_p'], [{ top_p: -0.1 }, 'top_p'], [{ tool_choice: 'required' }, 'tool_choice'],
    [{ response_format: { type: 'json_object' } }, 'response_format'], [{ logit_bias: { 5: 101 } }, 'logit_bias'], [{ presence_penalty: 3 }, 'presence_penalty'],
    [{ top_p: 0.9 }, 'top_p'], [{ top_k: 5 }, 'top_k'], [{ n: 17 }, 'n'], [{ n: 2, stream: true }, 'n'], [{ repetition_penalty: 0 }, 'repetition_penalty'],
    [{ some_future_field: [1] }, 'some_future_field'], [{ Tools: [] }, 'Tools'], [{ chat_template: '{{ 1 }}' }, 'chat_template'],
    [{ chat_template_kwargs: { enable_thinking: true } }, 'chat_template_kwargs'], [{ reasoning_effort: 'low' }, 'reasoning_effort'],
    [{ parallel_tool_calls: false }, 'parallel_tool_calls']] as const) {
    assert.match(String(await status(bad)), new RegExp(`^400 "${field}"`), JSON.stringify(bad));
  }
  const calls = b.calls.length;
  counted = 0;
  const many = Array.from({ length: 2049 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'x' }));
  assert.match(String(await status({ messages: many })), /^400 "messages": at most 2048 messages, got 2049$/);
  const tool = (i: number) => ({ type: 'function', function: { name: `f${i}`, parameters: { type: 'object', properties: {} } } });
  assert.match(String(await status({ tools: Array.from({ length: 129 }, (_, i) => tool(i)) })), /^400 "tools": at most 128 tools/);
  assert.deepEqual([counted, b.calls.length], [0, calls], 'refused before rendering or generating');
  assert.match(String(await status({ messages: many.slice(0, 2048), max_tokens: 1 })), /maximum context length is 100 tokens/, '2048 messages are counted');
});

test('engine generate: an aborted signal ends the rows at the next step (finish cancelled)', async (t) => {
  const cache = tempCache();
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-cancel-'));
  t.after(() => { rmSync(tmp, { recursive: true, force: true }); cache.cleanup(); });
  await writeRandomCheckpoint(join(tmp, 'm'), 'llama', { seed: 3, numLayers: 2, hiddenSize: 32, numHeads: 4, numKvHeads: 2, intermediateSize: 64, vocabSize: 97, std: 0.2 });
  const engine = await createEngineFromCheckpoint(await loadCheckpoint(join(tmp, 'm')), { cacheDir: cache.dir, threads: 1 });
  t.after(() => engine.dispose());
  const ids = [[5, 17, 33, 42], [12, 3]];
  const full = await engine.generate(ids, { maxNewTokens: 6, stopIds: [] });
  assert.deepEqual(full.map((r) => [r.generatedIds.length, r.finish]), [[6, 'length'], [6, 'length']]);
  const before = new AbortController();
  before.abort();
  const none = await engine.generate(ids, { maxNewTokens: 6, stopIds: [], signal: before.signal });
  assert.deepEqual(none.map((r) => [r.generatedIds.length, r.finish]), [[0, 'cancelled'], [0, 'cancelled']]);
  // aborted during the first row's prefill (the hook runs right after it): that row keeps the token its prefill
  // chose, then stops; no row goes past its first token (the scheduler prefills rows in turn, so a row whose prefill
  // had not begun ends with none)
  const mid = new AbortController();
  const cut = await engine.generate(ids, { maxNewTokens: 6, stopIds: [], signal: mid.signal, haltAfterPrefill: () => { mid.abort(); return false; } });
  assert.deepEqual([cut[0]!.generatedIds, cut[0]!.finish], [full[0]!.generatedIds.slice(0, 1), 'cancelled']);
  cut.forEach((r, i) => {
    assert.equal(r.finish, 'cancelled');
    assert.ok(r.generatedIds.length <= 1, `row ${i}: ${r.generatedIds.length} tokens after the abort`);
    assert.deepEqual(r.generatedIds, full[i]!.generatedIds.slice(0, r.generatedIds.length));
  });
});

test('stream without tools: text goes out as it is generated; an error after the first chunk ends the stream with an error event and no [DONE]; with tools the finished answer', { timeout: 30_000 }, async (t) => {
  let release = () => {};
  let fail = false;
  const backend: ChatBackend = {
    name: 'fake', callFormat: 'llama3',
    async chat(c) {
      c.onText?.('Hel');
      c.onText?.('lo');
      await new Promise<void>((r) => { release = r; });
      if (fail) throw new Error('step failed at /models/secret-dir');
      return { content: 'Hello world<|eot_id|>', toolCalls: [], promptTokens: 3, completionTokens: 4, latencyMs: 1, cached: false, finish: 'stop' };
    },
  };
  const url = await serve(t, backend);
  const contentOf = (sse: string) => sse.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)) as { choices?: { delta: { content?: string } }[]; error?: { message: string } });
  for (const failing of [false, true]) {
    fail = failing;
    const r = await post(url, { messages: ask(3), stream: true });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-type'), 'text/event-stream');
    const reader = r.body!.getReader();
    let got = '';
    // the first pieces arrive while the model is still generating (the backend waits for release)
    while (!got.includes('"lo"')) got += new TextDecoder().decode((await reader.read()).value);
    assert.deepEqual(contentOf(got).flatMap((e) => e.choices?.map((ch) => ch.delta.content ?? '') ?? []).join(''), 'Hello');
    release();
    for (;;) { const { value, done } = await reader.read(); if (done) break; got += new TextDecoder().decode(value); }
    const events = contentOf(got);
    if (!failing) {
      assert.equal(events.flatMap((e) => e.choices?.map((ch) => ch.delta.content ?? '') ?? []).join(''), 'Hello world', 'the rest of the answer, end token stripped');
      assert.ok(got.endsWith('data: [DONE]\n\n'));
    } else {
      assert.equal(events.at(-1)!.error!.message.includes('secret-dir'), false);
      assert.match(events.at(-1)!.error!.message, /generation failed/);
      assert.ok(!got.includes('[DONE]'), 'a broken stream is not a whole answer');
    }
  }
  // with tools the answer is parsed for calls first: nothing is streamed before the backend finishes
  fail = false;
  const tools = [{ type: 'function', function: { name: 'send_email', parameters: { type: 'object', properties: {} } } }];
  const pending = post(url, { messages: ask(3), tools, stream: true });
  let answered = false;
  void pending.then(() => { answered = true; });
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(answered, false, 'no headers before the answer is finished');
  release();
  const r = await pending;
  assert.equal(r.status, 200);
  assert.match(await r.text(), /"content":"Hello world"[\s\S]*data: \[DONE\]/);
});
