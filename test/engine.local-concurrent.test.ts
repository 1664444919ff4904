/**
 * The local chat backend on the engine's scheduler: concurrent chat() calls are batched together (the scheduler
 * decodes several at once) and each reply equals the same call made alone; `ChatCall.signal` cancels one call at
 * its next step (finish 'cancelled', the text so far, the other calls unaffected); a reply cut by maxTokens says
 * finish 'length'. A random checkpoint and a character tokenizer keep it small; the greedy ids themselves are checked
 * against the Float64 oracle in test/engine.scheduler.test.ts.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { LocalBackend } from '../src/chat/local.ts';
import type { ChatCall, ChatReply } from '../src/guard/types.ts';
import { SMALL_GQA, tempCache } from './helpers/engine.ts';
import { charTokenizer } from './helpers/char-tokenizer.ts';

let tmp = '';
let cache: ReturnType<typeof tempCache>;
let engine: OnnxEngine;
const V = SMALL_GQA[0]!.opts.vocabSize!;

const tokenizer = charTokenizer(V);

const call = (user: string, maxTokens: number, extra: Partial<ChatCall> = {}): ChatCall => ({
  messages: [{ role: 'system', content: 'You are an agent with a long shared system prompt.' }, { role: 'user', content: user }],
  maxTokens, purpose: 'agent', ...extra,
});

before(async () => {
  cache = tempCache();
  tmp = mkdtempSync(join(tmpdir(), 'safekeep-local-conc-'));
  await writeRandomCheckpoint(join(tmp, 'm'), 'llama', { seed: 5, ...SMALL_GQA[0]!.opts });
  engine = await createEngine(join(tmp, 'm'), { cacheDir: cache.dir, threads: 2 });
  // random weights: no token is an end token, so every reply runs to maxTokens
  (engine as { eosIds: number[] }).eosIds = [];
});
after(async () => {
  await engine?.dispose();
  cache?.cleanup();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('concurrent chat calls batch together and each equals the call made alone; finish length at maxTokens', async () => {
  const lb = new LocalBackend(engine, tokenizer, { responseCache: 0 });
  const users = ['summarise the reviews', 'send the report to Bob', 'hi', 'book a flight to Paris on Monday morning', 'list files'];
  const alone: ChatReply[] = [];
  for (const u of users) alone.push(await lb.chat(call(u, 9)));
  const peak0 = engine.scheduler.stats.peakBatch;
  assert.equal(peak0, 1, 'calls made one at a time decode alone');
  const together = await Promise.all(users.map((u) => lb.chat(call(u, 9))));
  assert.ok(engine.scheduler.stats.peakBatch >= 3, `concurrent calls share decode steps (peak batch ${engine.scheduler.stats.peakBatch})`);
  together.forEach((r, i) => {
    assert.equal(r.content, alone[i]!.content, `call ${i}`);
    assert.equal(r.finish, 'length');
    assert.equal(r.completionTokens, 9);
    assert.equal(r.promptTokens, alone[i]!.promptTokens);
  });
  // the shared system prompt was served from the prefix cache for the later calls
  assert.ok(engine.scheduler.prefixStore!.stats.hit > 0, 'prefix cache hits');
});

test('ChatCall.signal cancels that call at its next step; the others finish unaffected', async () => {
  const lb = new LocalBackend(engine, tokenizer, { responseCache: 0 });
  const full = await lb.chat(call('write a very long essay', 60));
  const other = await lb.chat(call('short one', 12));
  const ac = new AbortController();
  const steps0 = engine.scheduler.stats.decodeSteps;
  const pa = lb.chat(call('write a very long essay', 60, { signal: ac.signal }));
  const pb = lb.chat(call('short one', 12));
  for (let i = 0; i < 100000 && engine.scheduler.stats.decodeSteps < steps0 + 5; i++) await new Promise((r) => setImmediate(r));
  ac.abort();
  const [a, b] = await Promise.all([pa, pb]);
  assert.equal(a.finish, 'cancelled');
  assert.ok(a.completionTokens >= 5 && a.completionTokens < 60, `${a.completionTokens} tokens before the abort`);
  assert.ok(full.content.startsWith(a.content), 'the text so far is the uncancelled reply\'s beginning');
  assert.equal(b.content, other.content);
  assert.equal(b.finish, 'length');
  assert.equal(engine.scheduler.inFlight, 0, 'the cancelled sequence left the scheduler');
});

test('an identical call is answered from the response cache; calls with inspect and cancelled replies are not cached', async () => {
  const lb = new LocalBackend(engine, tokenizer, { responseCache: 2 });
  const seqs = () => engine.scheduler.stats.sequences;
  const first = await lb.chat(call('cache me', 6));
  const n0 = seqs();
  const second = await lb.chat(call('cache me', 6));
  assert.equal(seqs(), n0, 'no generation for the identical call');
  assert.equal(second.cached, true);
  assert.equal(first.cached, false);
  assert.equal(second.content, first.content);
  await lb.chat(call('cache me', 7)); // another maxTokens: another call
  assert.equal(seqs(), n0 + 1);
  let seen = 0;
  await lb.chat(call('cache me', 6, { inspect: () => { seen++; return false; } }));
  assert.equal(seen, 1, 'the inspect hook ran: not served from the cache');
  assert.equal(seqs(), n0 + 2);
  const cancelled = await lb.chat(call('never cache', 6, { signal: AbortSignal.abort() }));
  assert.equal(cancelled.finish, 'cancelled');
  const after = await lb.chat(call('never cache', 6));
  assert.equal(after.cached, false);
  assert.equal(after.finish, 'length');
  // bounded: 2 entries, least recently used dropped ('cache me'/6 was used before 'cache me'/7 and 'never cache')
  const again = await lb.chat(call('cache me', 6));
  assert.equal(again.cached, false, 'evicted');
});

test('identical calls in flight together share one generation; a call with its own signal or a cancelled twin generates itself', async () => {
  const lb = new LocalBackend(engine, tokenizer, { responseCache: 8 });
  const seqs = () => engine.scheduler.stats.sequences;
  const n0 = seqs();
  const [a, b, c] = await Promise.all([lb.chat(call('twin calls', 7)), lb.chat(call('twin calls', 7)), lb.chat(call('twin calls', 7))]);
  assert.equal(seqs(), n0 + 1, 'one generation for three identical calls in flight');
  assert.deepEqual([a.cached, b.cached, c.cached], [false, true, true]);
  assert.equal(b.content, a.content);
  assert.equal(c.completionTokens, a.completionTokens);
  // a twin cancelled mid-flight is not handed to the call waiting on it: that call generates on its own
  const ac = new AbortController();
  const n1 = seqs();
  const leader = lb.chat(call('cancelled twin', 40, { signal: ac.signal }));
  const follower = lb.chat(call('cancelled twin', 40));
  const steps0 = engine.scheduler.stats.decodeSteps;
  for (let i = 0; i < 100000 && engine.scheduler.stats.decodeSteps < steps0 + 3; i++) await new Promise((r) => setImmediate(r));
  ac.abort();
  const [l, f] = await Promise.all([leader, follower]);
  assert.equal(l.finish, 'cancelled');
  assert.equal(f.finish, 'length');
  assert.equal(f.completionTokens, 40);
  assert.equal(seqs(), n1 + 2);
  // a call with its own signal never waits on a twin
  const n2 = seqs();
  await Promise.all([lb.chat(call('own signal', 5)), lb.chat(call('own signal', 5, { signal: new AbortController().signal }))]);
  assert.equal(seqs(), n2 + 2);
});

test('stop strings: the call ends at the token that completes one (finish stop), cut before it; a stopWhen that throws fails its own sequence only', async () => {
  const lb = new LocalBackend(engine, tokenizer, { responseCache: 4 });
  const full = await lb.chat(call('stop strings here', 20));
  const toks = [...(full.content.match(/<\d+>/g) ?? [])];
  const at = toks.indexOf(toks[6]!);
  const cut = await lb.chat(call('stop strings here', 20, { stop: ['<never>', toks[6]!] }));
  assert.deepEqual([cut.content, cut.finish, cut.completionTokens, cut.cached], [toks.slice(0, at).join(''), 'stop', at + 1, false], 'stop is part of the response-cache key');
  // a stop string spanning two tokens
  const two = await lb.chat(call('stop strings here', 20, { stop: [toks[11]! + toks[12]!] }));
  assert.equal(two.content, full.content.slice(0, full.content.indexOf(toks[11]! + toks[12]!)));
  const ids = [...'stop strings here'].map((ch) => 1 + (ch.codePointAt(0)! % (V - 1)));
  const [bad, good] = await Promise.allSettled([
    engine.submit!(ids, { maxNewTokens: 10, stopWhen: (g) => { if (g.length === 3) throw new Error('stopWhen failed'); return false; } }),
    engine.submit!(ids, { maxNewTokens: 10 }),
  ]);
  assert.equal(bad.status, 'rejected');
  assert.match(String((bad as PromiseRejectedResult).reason), /stopWhen failed/);
  assert.equal(good.status, 'fulfilled');
  assert.equal((good as PromiseFulfilledResult<{ generatedIds: number[] }>).value.generatedIds.length, 10);
  assert.equal(engine.scheduler.inFlight, 0);
});

test('onText streams the reply as it is generated: the pieces join to the content, with and without stop strings, the prefix first', async () => {
  const lb = new LocalBackend(engine, tokenizer, { responseCache: 0 });
  const full = await lb.chat(call('stream this one', 16));
  const toks = [...(full.content.match(/<\d+>/g) ?? [])];
  for (const extra of [{}, { stop: [toks[9]! + toks[10]!] }, { prefix: 'I cannot' }] as Partial<ChatCall>[]) {
    const pieces: string[] = [];
    let done = false;
    const p = lb.chat(call('stream this one', 16, { ...extra, onText: (d) => { assert.equal(done, false, 'no piece after the reply'); pieces.push(d); } }));
    const r = await p.then((x) => { done = true; return x; });
    assert.ok(pieces.length > (extra.stop ? 1 : 8), `${pieces.length} pieces for ${r.completionTokens} tokens`);
    assert.equal(pieces.join(''), r.content, JSON.stringify(extra));
    if (extra.stop) assert.equal(r.content, full.content.slice(0, full.content.indexOf(toks[9]! + toks[10]!)));
    if (extra.prefix) assert.equal(pieces[0], 'I cannot');
  }
  // the stop string's first token is held back until the next token shows it is not the stop string's start
  const held: string[] = [];
  await lb.chat(call('stream this one', 16, { stop: [toks[4]! + '<never>'], onText: (d) => held.push(d) }));
  assert.equal(held.join(''), full.content);
  assert.ok(!held.includes(toks[4]!), 'the token that begins the stop string came out joined to the next one');
});
