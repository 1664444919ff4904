/**
 * askVerdict: the one YES/NO call the SafeKeep judge and the S³ LLM checks share. Each caller's reading of the
 * answer and of a cancelled reply is an option; unparseable fails closed unless the policy says 'safe'.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { askVerdict } from '../src/guard/verdict-call.ts';
import type { ChatBackend, ChatCall, ChatReply } from '../src/guard/types.ts';

const call: ChatCall = { messages: [{ role: 'user', content: 'x' }], maxTokens: 8, purpose: 'judge' };
const backendOf = (reply: Partial<ChatReply>): ChatBackend => ({
  name: 'fake', callFormat: 'llama3',
  chat: async () => ({ content: '', toolCalls: [], promptTokens: 5, completionTokens: 2, latencyMs: 1234, cached: false, finish: 'stop', ...reply }),
});

test('askVerdict: verdict, raw answer, tokens; unparseable fails closed unless the policy is safe', async () => {
  const yes = await askVerdict(backendOf({ content: 'YES' }), call);
  assert.deepEqual({ ...yes, latencyMs: 0 }, { unsafe: true, verdict: 'yes', raw: 'YES', latencyMs: 0, tokens: 7 });
  assert.equal((await askVerdict(backendOf({ content: 'No.' }), call)).unsafe, false);
  assert.equal((await askVerdict(backendOf({ content: 'maybe' }), call)).unsafe, true);
  assert.equal((await askVerdict(backendOf({ content: 'maybe' }), call, { onUnparseable: 'safe' })).unsafe, false);
});

test('askVerdict: the first line only, or the whole answer', async () => {
  const raw = 'YES\nEVIDENCE: no, really';
  assert.equal((await askVerdict(backendOf({ content: raw }), call, { readFrom: 'first-line' })).verdict, 'yes');
  const think = '<think>\nhmm\n</think>\nNO';
  assert.equal((await askVerdict(backendOf({ content: think }), call, { readFrom: 'answer' })).verdict, 'no');
  assert.equal((await askVerdict(backendOf({ content: think }), call, { readFrom: 'first-line' })).verdict, 'unparseable');
});

test('askVerdict: a cancelled reply throws, or is read as its text so far', async () => {
  const cut = backendOf({ content: 'Y', finish: 'cancelled' });
  await assert.rejects(askVerdict(cut, call, { onCancelled: 'throw' }), /cancelled/);
  const read = await askVerdict(cut, call, { onCancelled: 'parse' });
  assert.equal(read.verdict, 'unparseable');
  assert.equal(read.unsafe, true);
});

test('askVerdict: a cached reply keeps its own latency; a fresh one is timed from startedAt', async () => {
  assert.equal((await askVerdict(backendOf({ content: 'NO', cached: true }), call)).latencyMs, 1234);
  const fresh = await askVerdict(backendOf({ content: 'NO' }), call, { startedAt: performance.now() - 5000 });
  assert.ok(fresh.latencyMs >= 5000, String(fresh.latencyMs));
});

test('askVerdict: a backend error propagates (no verdict is made up)', async () => {
  const failing: ChatBackend = { name: 'down', callFormat: 'llama3', chat: async () => { throw new Error('upstream down'); } };
  await assert.rejects(askVerdict(failing, call), /upstream down/);
});
