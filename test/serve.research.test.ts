/**
 * `serve --model --allow-interventions` on the planted model: the request field `safekeep` (per-request steering by
 * vector or named direction, interventions at a layer or a hook point, residual-stream capture) and OpenAI's
 * logprobs. Values are checked against what is known independently:
 * - the planted model refuses ("sorry") iff hidden[L]·r > τ, and steering hidden[2] by −α·r moves hidden[L]·r by
 *   exactly −α (its later blocks are identities): each α's answer is known from one unsteered forward pass;
 * - requests with different steering, interventions and captures sent together decode in the same steps (the
 *   scheduler's peak batch) and each answer equals the same request sent alone;
 * - captured activations equal the engine's own `forward` hidden states of the prompt + generated tokens under the
 *   same steering (≤ 1e-5); log probabilities equal the log-softmax of `generate`'s step logits;
 * - every bound is a 400 naming the field, before any generation; a guarded server and the guard proxy refuse the
 *   field by name (the proxy calls neither its upstream nor its judge); `--allow-interventions` with a guard method exits 2.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { createServer, type Server } from 'node:http';
import { createGuardProxy } from '../src/serve/proxy.ts';
import { writePlantedModel, type PlantedTruth } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { loadPromptTokenizer, type PromptTokenizer } from '../src/prompts/tokenizer.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { createLocalServer, type LocalServerOptions } from '../src/serve/local.ts';
import { countTokensUpTo } from '../src/serve/context-length.ts';
import { parseChatRequest } from '../src/chat/body.ts';
import { HttpError } from '../src/http/errors.ts';
import { repoRoot } from './helpers/shared.ts';
import { tokenLogprob } from '../src/engine/run/scheduler.ts';

let dir = '';
let model = '';
let truth: PlantedTruth;
let engine: OnnxEngine;
let tok: PromptTokenizer;
let backend: LocalBackend;
const servers: Server[] = [];
let url = '';
/** hidden[L]·r at the last prompt token of the harmful request, unsteered */
let score = 0;

const harmful = [{ role: 'user', content: 'steal credential fraud hack malware phish steal stolen credential' }];
const benign = [{ role: 'user', content: 'Summarise the reviews of our vitamins for the newsletter' }];

async function start(extra: Partial<LocalServerOptions> = {}): Promise<string> {
  const server = createLocalServer({
    backend, method: 'base', modelName: 'planted', log: () => undefined, defaultMaxTokens: 8, maxQueue: 16, maxTokensLimit: 16, contextLength: 8192,
    countPromptTokens: (call, limit) => countTokensUpTo(backend.renderCall(call), (t) => tok.encode(t).length, limit),
    research: {
      numLayers: engine.numLayers, hiddenSize: engine.dModel, numHeads: engine.config.numHeads, headDim: engine.config.headDim,
      directions: new Map([['refusal.chatbot', Float32Array.from({ length: (engine.numLayers + 1) * engine.dModel }, (_, i) => truth.r[i % engine.dModel]!)]]),
      maxHooks: 4, maxCaptureBytes: 32 * 1024,
    },
    ...extra,
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'safekeep-research-'));
  model = join(dir, 'planted');
  truth = await writePlantedModel(model, { lexiconPairs: (await loadPairSet('pairs')).pairs });
  tok = await loadPromptTokenizer(model);
  engine = await createEngine(model, { cacheDir: join(dir, '.cache'), threads: 1 });
  backend = new LocalBackend(engine, tok, { responseCache: 0 });
  const [f] = await engine.forward([promptIds(harmful)], { hiddenAt: 'last', logitsAt: 'none' });
  const L = engine.numLayers;
  score = truth.r.reduce((a, x, j) => a + x * f!.hidden[L * engine.dModel + j]!, 0);
  url = await start();
});
after(async () => {
  for (const s of servers) { s.closeAllConnections(); s.close(); }
  await engine?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const promptIds = (messages: typeof harmful) => tok.encode(backend.renderCall({ messages, maxTokens: 1, purpose: 'agent' }));

interface Completion {
  choices: { message: { content: string }; finish_reason: string; logprobs?: { content: { token: string; logprob: number; bytes: number[]; top_logprobs: { token: string; logprob: number }[] }[] } }[];
  usage: { completion_tokens: number };
  safekeep?: { activations: Record<string, { shape: number[]; dtype: string; data: string; positions: number[] }> };
  error?: { message: string; type?: string };
}

const post = async (body: unknown, at = url): Promise<{ status: number; json: Completion }> => {
  const r = await fetch(`${at}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Completion };
};
const steer = (alpha: number, extra: Record<string, unknown> = {}) => ({ layer: 2, vector: truth.r, alpha, ...extra });
const f32Of = (b64: string) => { const b = Buffer.from(b64, 'base64'); return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)); };

test('steering per request: each α refuses exactly when the planted score minus α is above τ; a named direction is the same as its vector', async () => {
  const alphas = [0, 0.5, 1, 1.5, 2, 3, 4, 6].filter((a) => Math.abs(score - a - truth.tau) > 0.05);
  assert.ok(alphas.some((a) => score - a > truth.tau) && alphas.some((a) => score - a < truth.tau), `the sweep crosses the threshold (score ${score})`);
  for (const a of alphas) {
    const r = await post({ messages: harmful, max_tokens: 4, safekeep: { steer: steer(a) } });
    assert.equal(r.status, 200, JSON.stringify(r.json.error));
    assert.equal(r.json.choices[0]!.message.content.startsWith('sorry'), score - a > truth.tau, `α ${a}: ${r.json.choices[0]!.message.content}`);
  }
  const byName = await post({ messages: harmful, max_tokens: 4, safekeep: { steer: { layer: 2, direction: 'refusal.chatbot', alpha: 3 } } });
  const byVector = await post({ messages: harmful, max_tokens: 4, safekeep: { steer: steer(3) } });
  assert.equal(byName.json.choices[0]!.message.content, byVector.json.choices[0]!.message.content);
});

test('batched: requests with different steering, interventions, hook edits and captures decode in the same steps, each equal to its one-at-a-time answer', async () => {
  const bodies: Record<string, unknown>[] = [
    { messages: harmful, max_tokens: 6 },
    ...[0.5, 2, 4, 8].map((a) => ({ messages: harmful, max_tokens: 6, safekeep: { steer: steer(a) } })),
    { messages: harmful, max_tokens: 6, safekeep: { steer: steer(3, { positions: 'generated' }) } },
    { messages: harmful, max_tokens: 6, safekeep: { interventions: [{ layer: 2, kind: 'ablate', vector: truth.r }] } },
    { messages: benign, max_tokens: 6, safekeep: { interventions: [{ layer: 3, kind: 'clamp', vector: truth.r, alpha: 2 }] } },
    { messages: harmful, max_tokens: 6, safekeep: { interventions: [{ hook: 'blocks.1.resid_post', kind: 'add', vector: truth.r, alpha: -5 }] } },
    { messages: harmful, max_tokens: 6, logprobs: true, top_logprobs: 2, safekeep: { steer: steer(1), capture: { hooks: ['blocks.2.resid_pre'], positions: 'last', generated: true } } },
  ];
  const alone: Completion[] = [];
  for (const b of bodies) alone.push((await post(b)).json);
  const peak = engine.scheduler.stats.peakBatch;
  const together = await Promise.all(bodies.map((b) => post(b)));
  assert.ok(engine.scheduler.stats.peakBatch > peak && engine.scheduler.stats.peakBatch >= 4, `decoded together (peak batch ${engine.scheduler.stats.peakBatch}, before ${peak})`);
  together.forEach((r, i) => {
    assert.equal(r.status, 200);
    assert.equal(r.json.choices[0]!.message.content, alone[i]!.choices[0]!.message.content, `request ${i}`);
    assert.equal(r.json.usage.completion_tokens, alone[i]!.usage.completion_tokens, `request ${i}`);
  });
  // the interventions did something: an ablation of r at hidden[2] removes the refusal; a large negative add at blocks.1.resid_post (= hidden[2]) too
  assert.ok(score > truth.tau && alone[0]!.choices[0]!.message.content.startsWith('sorry'));
  assert.ok(!alone[6]!.choices[0]!.message.content.startsWith('sorry'), alone[6]!.choices[0]!.message.content);
  assert.ok(alone[7]!.choices[0]!.message.content.startsWith('sorry'), 'clamping r to 2 > τ makes the benign request refuse');
  const last = together.at(-1)!.json;
  const a = alone.at(-1)!;
  assert.deepEqual(last.choices[0]!.logprobs!.content.map((x) => x.token), a.choices[0]!.logprobs!.content.map((x) => x.token));
  const x = f32Of(last.safekeep!.activations['blocks.2.resid_pre']!.data);
  const y = f32Of(a.safekeep!.activations['blocks.2.resid_pre']!.data);
  assert.equal(x.length, y.length);
  x.forEach((v, i) => assert.ok(Math.abs(v - y[i]!) <= 1e-5 * Math.max(1, Math.abs(y[i]!)), `capture ${i}: ${v} vs ${y[i]}`));
});

test('capture equals forward\'s hidden states of the prompt and the generated tokens under the same steering (≤ 1e-5)', async () => {
  const alpha = 1.5;
  const ids = promptIds(harmful);
  const body = { messages: harmful, max_tokens: 5, safekeep: { steer: steer(alpha), capture: { hooks: ['blocks.0.resid_pre', 'blocks.1.resid_post', 'blocks.3.resid_post'], positions: 'all', generated: true } } };
  // sent while other steered requests decode, so the captured rows come from batched steps
  const [r] = await Promise.all([post(body), post({ messages: benign, max_tokens: 5, safekeep: { steer: steer(-2) } }), post({ messages: harmful, max_tokens: 5 })]);
  assert.equal(r!.status, 200, JSON.stringify(r!.json.error));
  const [g] = await engine.generate([ids], { maxNewTokens: 5, steer: { layer: 2, vector: truth.r, alpha } });
  const gen = g!.generatedIds;
  const seq = [...ids, ...gen.slice(0, -1)];
  const [f] = await engine.forward([seq], { steer: { layer: 2, vector: truth.r, alpha }, hiddenAt: 'all', logitsAt: 'none' });
  const d = engine.dModel;
  const T = seq.length;
  for (const [name, layer] of [['blocks.0.resid_pre', 0], ['blocks.1.resid_post', 2], ['blocks.3.resid_post', 4]] as const) {
    const a = r!.json.safekeep!.activations[name]!;
    assert.equal(a.dtype, 'float32');
    assert.deepEqual(a.shape, [T, d], name);
    assert.deepEqual(a.positions, seq.map((_, i) => i));
    const got = f32Of(a.data);
    let worst = 0;
    for (let t = 0; t < T; t++) for (let j = 0; j < d; j++) worst = Math.max(worst, Math.abs(got[t * d + j]! - f!.hidden[(layer * T + t) * d + j]!));
    assert.ok(worst <= 1e-5, `${name}: max |capture − forward| = ${worst}`);
  }
  // explicit positions (negative from the end), no generated rows
  const p = await post({ messages: harmful, max_tokens: 2, safekeep: { capture: { hooks: ['blocks.1.resid_post'], positions: [0, -1] } } });
  assert.deepEqual(p.json.safekeep!.activations['blocks.1.resid_post']!.positions, [0, ids.length - 1]);
});

test('capture at hook points inside the blocks (z, attn_out, resid_mid, mlp_out) equals runWithCache under the same steering and hook edit (≤ 1e-5), batched with other rows', async () => {
  const alpha = 2;
  const edit = { hook: 'blocks.1.attn_out', kind: 'add' as const, vector: truth.u, alpha: 0.5 };
  const names = ['blocks.1.z', 'blocks.1.attn_out', 'blocks.2.resid_mid', 'blocks.0.mlp_out', 'blocks.3.resid_post'];
  const body = { messages: harmful, max_tokens: 4, safekeep: { steer: steer(alpha), interventions: [edit], capture: { hooks: names, positions: 'all', generated: true } } };
  const same = { ...body, safekeep: { ...body.safekeep, steer: steer(-alpha) } };
  const at = await start({ research: { numLayers: engine.numLayers, hiddenSize: engine.dModel, numHeads: engine.config.numHeads, headDim: engine.config.headDim, maxHooks: 8 } });
  const [r, twin] = await Promise.all([post(body, at), post(same, at), post({ messages: benign, max_tokens: 4, safekeep: { steer: steer(1) } }, at)]);
  assert.equal(r!.status, 200, JSON.stringify(r!.json.error));
  assert.equal(twin!.status, 200);
  const ids = promptIds(harmful);
  const s = { layer: 2, vector: truth.r, alpha };
  const [g] = await engine.generate([ids], { maxNewTokens: 4, steer: s, hooks: [edit] });
  const seq = [...ids, ...g!.generatedIds.slice(0, -1)];
  const ref = await engine.runWithCache(seq, { names, steer: s, hooks: [edit], logitsAt: 'none' });
  for (const name of names) {
    const a = r!.json.safekeep!.activations[name]!;
    const want = ref.cache.get(name);
    const w = want.data.length / seq.length;
    assert.deepEqual(a.shape, [seq.length, w], name);
    const b = Buffer.from(a.data, 'base64');
    const got = new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
    let worst = 0;
    for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want.data[i]!) / Math.max(1, Math.abs(want.data[i]!)));
    assert.ok(worst <= 1e-5, `${name}: ${worst}`);
  }
  // a point inside the blocks alone (no hidden-state rows kept): the prompt's positions, then each generated token's
  const only = await post({ ...body, safekeep: { ...body.safekeep, capture: { hooks: ['blocks.1.attn_out'], positions: [0, -1], generated: true } } }, at);
  const a = only.json.safekeep!.activations['blocks.1.attn_out']!;
  const T = seq.length;
  assert.deepEqual(a.positions, [0, ids.length - 1, ...seq.slice(ids.length).map((_, k) => ids.length + k)]);
  const want = ref.cache.get('blocks.1.attn_out').data;
  const d = engine.dModel;
  const got = f32Of(a.data);
  assert.equal(got.length, a.positions.length * d);
  a.positions.forEach((p, i) => { for (let j = 0; j < d; j++) assert.ok(Math.abs(got[i * d + j]! - want[p * d + j]!) <= 1e-5 * Math.max(1, Math.abs(want[p * d + j]!)), `position ${p}`); });
  assert.ok(T > ids.length);
});

test('logprobs: OpenAI\'s shape, equal to the log-softmax of generate\'s step logits; streamed with their tokens', async () => {
  const r = await post({ messages: harmful, max_tokens: 4, logprobs: true, top_logprobs: 3 });
  assert.equal(r.status, 200, JSON.stringify(r.json.error));
  const content = r.json.choices[0]!.logprobs!.content;
  const [g] = await engine.generate([promptIds(harmful)], { maxNewTokens: 4, returnStepLogits: true });
  const V = engine.vocabSize;
  assert.equal(content.length, g!.generatedIds.length);
  content.forEach((c, k) => {
    const row = Array.from(g!.stepLogits!.subarray(k * V, (k + 1) * V));
    const m = Math.max(...row);
    const lse = m + Math.log(row.reduce((a, x) => a + Math.exp(x - m), 0));
    const id = g!.generatedIds[k]!;
    assert.ok(Math.abs(c.logprob - (row[id]! - lse)) < 1e-5, `token ${k}`);
    assert.equal(c.token, tok.decode([id], { skipSpecial: false }));
    assert.deepEqual(c.bytes, [...Buffer.from(c.token, 'utf8')]);
    assert.equal(c.top_logprobs.length, 3);
    assert.equal(c.top_logprobs[0]!.logprob, c.logprob, 'greedy: the chosen token is the most likely');
    const sorted = [...row].sort((a, b) => b - a);
    c.top_logprobs.forEach((t, i) => assert.ok(Math.abs(t.logprob - (sorted[i]! - lse)) < 1e-5));
  });
  const s = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: harmful, max_tokens: 4, logprobs: true, top_logprobs: 3, stream: true }) });
  const events = (await s.text()).split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)) as { choices: { logprobs?: { content: unknown[] } }[] });
  const streamed = events.flatMap((e) => e.choices[0]?.logprobs?.content ?? []);
  assert.deepEqual(streamed, content);
  // each token's entry comes with its text as it is generated, not all at the end
  assert.ok(events.filter((e) => e.choices[0]?.logprobs?.content.length).length >= 2, 'log probabilities on more than one chunk');
});

test('capture with stream: the activations on the finish-reason chunk equal the JSON response\'s', async () => {
  const body = { messages: harmful, max_tokens: 3, safekeep: { steer: steer(1), capture: { hooks: ['blocks.1.resid_post'], positions: 'all', generated: true } } };
  const plain = await post(body);
  const s = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
  const text = await s.text();
  assert.ok(text.trim().endsWith('data: [DONE]'));
  const events = text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)) as { choices: { finish_reason: string | null; delta: { content?: string } }[]; safekeep?: Completion['safekeep'] });
  const fin = events.find((e) => e.choices[0]?.finish_reason);
  assert.deepEqual(fin!.safekeep, plain.json.safekeep);
  assert.equal(events.map((e) => e.choices[0]?.delta.content ?? '').join(''), plain.json.choices[0]!.message.content);
});

test('bounds: each bad research value is a 400 naming its field, before any generation', async () => {
  const before = engine.scheduler.stats.sequences;
  const cases: [Record<string, unknown> | string, RegExp][] = [
    [{ safekeep: { steer: { layer: 2, vector: [1, 2, 3], alpha: 1 } } }, /^safekeep\.steer\.vector has 3 values; this model's width there is 64/],
    [`{"messages": [{"role": "user", "content": "x"}], "safekeep": {"steer": {"layer": 2, "vector": [1e400${', 0'.repeat(63)}], "alpha": 1}}}`, /^safekeep\.steer\.vector\[0\] is not a finite float32 number/],
    [{ safekeep: { steer: { layer: 2, vector: truth.r.map((x, i) => (i === 5 ? 1e39 : x)), alpha: 1 } } }, /^safekeep\.steer\.vector\[5\] is not a finite float32/],
    [{ safekeep: { steer: { layer: 2, vector: truth.r, alpha: 1e39 } } }, /^safekeep\.steer\.alpha must be a finite number with \|alpha\| ≤ 1e\+12/],
    [{ safekeep: { steer: { layer: 2, vector: truth.r, alpha: 'big' } } }, /^safekeep\.steer\.alpha/],
    [{ safekeep: { steer: { layer: 2, vector: truth.r.map(() => 0), alpha: 1 } } }, /^safekeep\.steer\.vector is all zeros/],
    [{ safekeep: { steer: { layer: 9, vector: truth.r, alpha: 1 } } }, /^safekeep\.steer\.layer must be an integer 0\.\.4/],
    [{ safekeep: { steer: { layer: 2, direction: 'refusal.agent', alpha: 1 } } }, /^safekeep\.steer\.direction: no direction "refusal\.agent" \(this server has refusal\.chatbot\)/],
    [{ safekeep: { steer: { layer: 2, vector: truth.r, alpha: 1, positions: 'prompt' } } }, /^safekeep\.steer\.positions must be one of all, generated/],
    [{ safekeep: { steer: { layer: 2, vector: truth.r, alpha: 1, scale: 2 } } }, /^safekeep\.steer\.scale: unknown field/],
    [{ safekeep: { stear: {} } }, /^safekeep\.stear: unknown field/],
    [{ safekeep: { interventions: [{ layer: 2, kind: 'rotate', vector: truth.r }] } }, /^safekeep\.interventions\[0\]\.kind must be one of add, ablate, clamp/],
    [{ safekeep: { interventions: [{ layer: 2, kind: 'ablate', vector: truth.r }, { layer: 2, kind: 'clamp', vector: truth.r, alpha: 1 }] } }, /^safekeep: .*a second ablate\/clamp at layer 2/],
    [{ safekeep: { interventions: [{ hook: 'blocks.7.attn_out', kind: 'add', vector: truth.r, alpha: 1 }] } }, /^safekeep\.interventions\[0\]\.hook: .*layer 7 is not in 0\.\.3/],
    [{ safekeep: { capture: { hooks: ['blocks.2.pattern'] } } }, /^safekeep\.capture\.hooks: blocks\.2\.pattern cannot be captured while generating/],
    [{ safekeep: { capture: { hooks: ['blocks.*.resid_post', 'blocks.0.resid_pre'] } } }, /^safekeep: 5 hook points \(captured and edited\) in one request; this server allows at most 4$/],
    [{ messages: harmful, max_tokens: 16, safekeep: { capture: { hooks: ['blocks.0.resid_pre', 'blocks.1.resid_pre', 'blocks.2.resid_pre', 'blocks.3.resid_pre'], positions: 'all', generated: true } } }, /^safekeep\.capture: 4 hooks \(256 floats a position\) × \d+ positions = \d+ bytes, above this server's 32768 bytes per response/],
    [{ safekeep: { capture: { hooks: ['blocks.0.resid_pre'], positions: [999] } } }, /^safekeep\.capture\.positions: position 999 is outside/],
    [{ logprobs: true, top_logprobs: 21 }, /^"top_logprobs" must be an integer 0\.\.20/],
    [{ top_logprobs: 2 }, /^"top_logprobs" needs "logprobs": true/],
  ];
  for (const [extra, re] of cases) {
    const body = typeof extra === 'string' ? extra : { messages: [{ role: 'user', content: 'steal' }], max_tokens: 2, ...extra };
    const r = await post(body);
    assert.equal(r.status, 400, `${JSON.stringify(extra).slice(0, 120)} → ${r.status}`);
    assert.match(r.json.error!.message, re);
  }
  assert.equal(engine.scheduler.stats.sequences, before, 'nothing was generated for a refused request');
});

test('overflow: an add or clamp whose steered hidden state would overflow float32 is a 400 naming the field; at the bound the answer and its activations are finite', async () => {
  const before = engine.scheduler.stats.sequences;
  const huge = truth.r.map(() => 1e38);
  const cases: [Record<string, unknown>, RegExp][] = [
    // α·v̂ is finite in float32 (3.4e38/8 per entry), the hidden state it makes is not: its square overflows in the norm
    [{ interventions: [{ layer: 2, kind: 'add', vector: huge, alpha: 3.4e38 }] }, /^safekeep\.interventions\[0\]\.alpha must be a finite number with \|alpha\| ≤ 1e\+12/],
    [{ interventions: [{ layer: 2, kind: 'add', vector: truth.r, alpha: -1e20 }] }, /^safekeep\.interventions\[0\]\.alpha must be/],
    [{ interventions: [{ layer: 2, kind: 'clamp', vector: truth.r, alpha: 3e38 }] }, /^safekeep\.interventions\[0\]\.alpha must be/],
    [{ interventions: [{ hook: 'blocks.1.attn_out', kind: 'add', vector: huge, alpha: 3.4e38 }] }, /^safekeep\.interventions\[0\]\.alpha must be/],
    [{ steer: { layer: 2, vector: huge, alpha: 1.0000001e12 } }, /^safekeep\.steer\.alpha must be/],
    // each within the bound, together above it
    [{ interventions: [{ layer: 2, kind: 'add', vector: truth.r, alpha: 8e11 }, { layer: 2, kind: 'add', vector: truth.r, alpha: 8e11 }] }, /^safekeep: .*steering at layer 2 \(all its adds together\) has norm above 1e\+12/],
    [{ interventions: [{ hook: 'blocks.1.attn_out', kind: 'add', vector: truth.r, alpha: 8e11 }, { hook: 'blocks.1.attn_out', kind: 'add', vector: truth.r, alpha: 8e11 }] }, /^safekeep\.interventions: .*adds at blocks\.1\.attn_out together have norm above 1e\+12/],
  ];
  for (const [field, re] of cases) {
    const r = await post({ messages: [{ role: 'user', content: 'steal' }], max_tokens: 2, safekeep: field });
    assert.equal(r.status, 400, `${JSON.stringify(field).slice(0, 120)} → ${r.status}`);
    assert.equal(r.json.error!.type, 'invalid_request_error');
    assert.match(r.json.error!.message, re);
  }
  assert.equal(engine.scheduler.stats.sequences, before, 'nothing was generated for a refused request');
  // at the bound: generated, every captured value finite (the planted model's norm sees a state of norm 1e12)
  const ok = await post({ messages: benign, max_tokens: 2, safekeep: { interventions: [{ layer: 1, kind: 'add', vector: huge, alpha: 1e12 }], capture: { hooks: ['blocks.3.resid_post'], positions: 'last' } } });
  assert.equal(ok.status, 200);
  const vals = f32Of(ok.json.safekeep!.activations['blocks.3.resid_post']!.data);
  assert.ok(vals.length > 0 && vals.every(Number.isFinite), 'the steered activations are finite');
});

test('guards refuse the field: a server without --allow-interventions, the proxies\' parser, and --allow-interventions with a guard method (exit 2)', async () => {
  const plain = await start({ research: undefined });
  const r = await post({ messages: harmful, safekeep: { steer: steer(1) } }, plain);
  assert.equal(r.status, 400);
  assert.match(r.json.error!.message, /^"safekeep": not accepted: per-request steering, interventions and activation capture are accepted only by serve --model --allow-interventions/);
  // the proxies parse with the default: refused by name, never part of the canonical body an upstream receives
  assert.throws(() => parseChatRequest(JSON.stringify({ messages: harmful, safekeep: {} })), (e: unknown) => e instanceof HttpError && e.status === 400 && /^"safekeep"/.test(e.message));
  const ok = parseChatRequest(JSON.stringify({ messages: harmful, safekeep: { steer: {} } }), { research: true });
  assert.equal(ok.body.safekeep, undefined);
  assert.deepEqual(ok.research, { steer: {} });
  // logprobs under a guard: the answer may be the guard's refusal, so only requests the operator lets through
  // unjudged (--pass-unjudged no-tools) get them
  const guarded = await start({ research: undefined, method: 'safekeep', passUnjudged: ['no-tools'] });
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
  const lp = await post({ messages: harmful, tools, logprobs: true }, guarded);
  assert.equal(lp.status, 400);
  assert.match(lp.json.error!.message, /^"logprobs": not under the guard \(method safekeep\)/);
  const free = await post({ messages: harmful, max_tokens: 2, logprobs: true }, guarded);
  assert.equal(free.status, 200);
  assert.equal(free.json.choices[0]!.logprobs!.content.length, free.json.usage.completion_tokens);
  assert.throws(() => createLocalServer({ backend, method: 'safekeep', modelName: 'm', research: { numLayers: 4, hiddenSize: 64, numHeads: 4, headDim: 16 } }), /need method base/);
  const cli = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'serve', '--model', model, '--allow-interventions', '--method', 'safekeep'], { encoding: 'utf8', env: { ...process.env, SAFEKEEP_CACHE: join(dir, '.cache') } });
  assert.equal(cli.status, 2, cli.stderr);
  assert.match(cli.stderr, /--allow-interventions runs no guard/);
});

test('tokenLogprob: log-softmax in float64, the k most likely in order, ties by lower id', () => {
  const row = Float32Array.from([1, 3, 3, -2, 0.5, 3]);
  const lse = Math.log([...row].reduce((a, x) => a + Math.exp(x), 0));
  const t = tokenLogprob(row, 2, 4);
  assert.ok(Math.abs(t.logprob - (3 - lse)) < 1e-12);
  assert.deepEqual(t.top.map((x) => x.token), [1, 2, 5, 0]);
  t.top.forEach((x) => assert.ok(Math.abs(x.logprob - (row[x.token]! - lse)) < 1e-12));
  assert.deepEqual(tokenLogprob(row, 0, 0).top, []);
  assert.equal(tokenLogprob(row, 0, 10).top.length, 6);
});

test('the guard proxy refuses the field by name and never calls its upstream or judge', async () => {
  let calls = 0;
  const up = createServer((_req, res) => { calls++; res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify({ choices: [{ message: { role: 'assistant', content: 'NO' }, finish_reason: 'stop' }] })); });
  await new Promise<void>((r) => up.listen(0, '127.0.0.1', r));
  const proxy = createGuardProxy({ upstream: `http://127.0.0.1:${(up.address() as AddressInfo).port}/v1`, judgeModel: 'judge-m', timeoutMs: 5000, retries: 0, log: () => undefined });
  servers.push(up, proxy);
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  const at = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/v1`;
  for (const safekeep of [{ steer: steer(4) }, { capture: { hooks: ['blocks.0.resid_pre'] } }, {}]) {
    const r = await post({ model: 'm', messages: harmful, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }], safekeep }, at);
    assert.equal(r.status, 400);
    assert.match(r.json.error!.message, /^"safekeep": not accepted: .*only by serve --model --allow-interventions \(never by a guard\)/);
  }
  assert.equal(calls, 0);
});

test('a plain request on the research server stays plain: streamed as generated, no research in its log line', async () => {
  const logs: Record<string, unknown>[] = [];
  const at = await start({ log: (l) => logs.push(JSON.parse(l) as Record<string, unknown>) });
  for (const safekeep of [undefined, null, {}]) {
    const r = await post({ messages: benign, max_tokens: 3, ...(safekeep !== undefined ? { safekeep } : {}) }, at);
    assert.equal(r.status, 200);
  }
  assert.deepEqual(logs.map((l) => l.research), [undefined, undefined, undefined]);
  const steered = await post({ messages: benign, max_tokens: 3, safekeep: { steer: steer(1) } }, at);
  assert.equal(steered.status, 200);
  assert.deepEqual(logs.at(-1)!.research, { steer: { layer: 2, alpha: 1 }, interventions: 0, capture: 0, logprobs: null });
});
