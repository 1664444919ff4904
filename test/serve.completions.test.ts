/**
 * `POST /v1/completions` on `serve --model` (method base), the planted model: a raw prompt continued without a chat
 * template, checked against the engine's own `generate` of the prompt's ids (text, finish reason, usage), its log
 * probabilities against the log-softmax of generate's step logits, the stream against the JSON answer (each piece
 * with its own tokens' log probabilities), vllm-lens's capture against `forward` of the raw ids; bounds are 400s
 * naming the field; a guarded server has no such route (404). Python's `openai` client speaks to it where it imports
 * (skipped visibly otherwise: pip install openai; SAFEKEEP_PYTHON picks the interpreter).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { decompress } from '@bokuweb/zstd-wasm';
import { writePlantedModel, type PlantedTruth } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { loadPromptTokenizer, type PromptTokenizer } from '../src/prompts/tokenizer.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { createLocalServer, type LocalServerOptions } from '../src/serve/local.ts';
import { countTokensUpTo } from '../src/serve/context-length.ts';
import { stripEndTokens } from '../src/outcome/parse-calls.ts';
import { tokenLogprob } from '../src/engine/run/scheduler.ts';
import { zstdReady } from '../src/serve/lens-tensor.ts';

let dir = '';
let truth: PlantedTruth;
let engine: OnnxEngine;
let tok: PromptTokenizer;
let backend: LocalBackend;
const servers: Server[] = [];
let url = '';

const prompt = 'Please steal the stolen credential and phish';

async function start(extra: Partial<LocalServerOptions> = {}): Promise<string> {
  const server = createLocalServer({
    backend, method: 'base', modelName: 'planted', log: () => undefined, defaultMaxTokens: 8, maxQueue: 16, maxTokensLimit: 16, contextLength: 512,
    countPromptTokens: (call, limit) => countTokensUpTo(backend.renderCall(call), (t) => tok.encode(t).length, limit),
    research: { numLayers: engine.numLayers, hiddenSize: engine.dModel, numHeads: engine.config.numHeads, headDim: engine.config.headDim },
    rawPrompts: { encode: (t) => tok.encode(t), decode: (ids) => tok.decode([...ids], { skipSpecial: false }), vocabSize: engine.vocabSize },
    ...extra,
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

before(async () => {
  await zstdReady();
  dir = mkdtempSync(join(tmpdir(), 'safekeep-completions-'));
  const model = join(dir, 'planted');
  truth = await writePlantedModel(model, { lexiconPairs: (await loadPairSet('pairs')).pairs });
  tok = await loadPromptTokenizer(model);
  engine = await createEngine(model, { cacheDir: join(dir, '.cache'), threads: 1 });
  backend = new LocalBackend(engine, tok, { responseCache: 0 });
  url = await start();
});
after(async () => {
  for (const s of servers) { s.closeAllConnections(); s.close(); }
  await engine?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

interface Completion {
  object: string;
  choices: { text: string; finish_reason: string; logprobs: { tokens: string[]; token_logprobs: number[]; top_logprobs: Record<string, number>[]; text_offset: number[] } | null }[];
  usage: { prompt_tokens: number; completion_tokens: number };
  activations?: { residual_stream: { data: string; shape: number[] } };
  error?: { message: string };
}

const post = async (body: unknown, at = url): Promise<{ status: number; json: Completion }> => {
  const r = await fetch(`${at}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Completion };
};
const events = async (body: unknown): Promise<Record<string, unknown>[]> => {
  const r = await fetch(`${url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body as object, stream: true }) });
  assert.equal(r.status, 200);
  const text = await r.text();
  assert.ok(text.endsWith('data: [DONE]\n\n'));
  return text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)) as Record<string, unknown>);
};

test('a raw prompt (text or ids) is continued as generate continues its ids: text, finish reason, usage; no template', async () => {
  const ids = tok.encode(prompt);
  const [g] = await engine.generate([ids], { maxNewTokens: 6 });
  const want = stripEndTokens(tok.decode(g!.generatedIds, { skipSpecial: false }));
  for (const p of [prompt, ids, [prompt], [ids]]) {
    const r = await post({ model: 'planted', prompt: p, max_tokens: 6 });
    assert.equal(r.status, 200, JSON.stringify(r.json.error));
    assert.equal(r.json.object, 'text_completion');
    assert.equal(r.json.choices[0]!.text, want);
    assert.equal(r.json.choices[0]!.finish_reason, g!.finish === 'length' ? 'length' : 'stop');
    assert.deepEqual(r.json.usage, { prompt_tokens: ids.length, completion_tokens: g!.generatedIds.length, total_tokens: ids.length + g!.generatedIds.length });
    assert.equal(r.json.choices[0]!.logprobs, null);
  }
  // the chat route renders a template around the same words: another prompt
  assert.notEqual(backend.promptIds({ messages: [{ role: 'user', content: prompt }], maxTokens: 1, purpose: 'agent' }).length, ids.length);
  const echo = await post({ prompt, max_tokens: 6, echo: true });
  assert.equal(echo.json.choices[0]!.text, prompt + want);
});

test('logprobs k: the completions API\'s shape, equal to the log-softmax of generate\'s step logits', async () => {
  const ids = tok.encode(prompt);
  const [g] = await engine.generate([ids], { maxNewTokens: 5, returnStepLogits: true });
  const r = await post({ prompt, max_tokens: 5, logprobs: 2 });
  const lp = r.json.choices[0]!.logprobs!;
  const V = engine.vocabSize;
  assert.equal(lp.tokens.length, g!.generatedIds.length);
  g!.generatedIds.forEach((id, k) => {
    const want = tokenLogprob(g!.stepLogits!.subarray(k * V, (k + 1) * V), id, 2);
    assert.equal(lp.tokens[k], tok.decode([id], { skipSpecial: false }));
    assert.ok(Math.abs(lp.token_logprobs[k]! - want.logprob) < 1e-9);
    assert.deepEqual(Object.values(lp.top_logprobs[k]!), want.top.map((t) => t.logprob));
  });
  assert.deepEqual(lp.text_offset, lp.tokens.map((_, k) => lp.tokens.slice(0, k).join('').length));
});

test('a stream streams: text pieces as generated, each with its own tokens\' log probabilities; together the JSON answer', async () => {
  const body = { prompt, max_tokens: 8, logprobs: 1 };
  const whole = (await post(body)).json.choices[0]!;
  const ev = await events({ ...body, stream_options: { include_usage: true } });
  type Choice = { text: string; logprobs: NonNullable<Completion['choices'][0]['logprobs']> | null; finish_reason: string | null };
  const pieces = ev.filter((e) => (e.choices as Choice[]).length && (e.choices as Choice[])[0]!.finish_reason === null).map((e) => (e.choices as Choice[])[0]!);
  assert.ok(pieces.length >= 2, `${pieces.length} pieces`);
  assert.equal(pieces.map((p) => p.text).join(''), whole.text);
  assert.deepEqual(pieces.flatMap((p) => p.logprobs?.tokens ?? []), whole.logprobs!.tokens);
  assert.deepEqual(pieces.flatMap((p) => p.logprobs?.token_logprobs ?? []), whole.logprobs!.token_logprobs);
  assert.deepEqual(pieces.flatMap((p) => p.logprobs?.text_offset ?? []), whole.logprobs!.text_offset);
  // a piece's log probabilities are those of the tokens generated since the previous piece, not all at the end
  assert.ok(pieces.filter((p) => p.logprobs).length >= 2, 'log probabilities come with more than one piece');
  const fin = ev.find((e) => (e.choices as Choice[])[0]?.finish_reason);
  assert.equal((fin!.choices as Choice[])[0]!.finish_reason, whole.finish_reason);
  assert.deepEqual(ev.at(-1)!.choices, []);
  assert.ok(ev.at(-1)!.usage);
});

test('research fields on a raw prompt: vllm-lens capture equals forward of the prompt\'s own ids under safekeep steering', async () => {
  const ids = tok.encode(prompt);
  const steer = { layer: 2, vector: truth.r, alpha: 2 };
  const plainXargs = await post({ prompt, max_tokens: 3, vllm_xargs: { output_residual_stream: '[1]' } });
  assert.equal(plainXargs.status, 200, JSON.stringify(plainXargs.json.error));
  const [g] = await engine.generate([ids], { maxNewTokens: 3 });
  const seq = [...ids, ...g!.generatedIds.slice(0, -1)];
  const [f] = await engine.forward([seq], { hiddenAt: 'all', logitsAt: 'none' });
  const t = plainXargs.json.activations!.residual_stream;
  assert.deepEqual(t.shape, [1, seq.length, engine.dModel]);
  const raw = decompress(Buffer.from(t.data, 'base64'));
  const got = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
  const want = f!.hidden.subarray(2 * seq.length * engine.dModel, 3 * seq.length * engine.dModel);
  let worst = 0;
  got.forEach((x, i) => { worst = Math.max(worst, Math.abs(x - want[i]!)); });
  assert.ok(worst <= 1e-5, `max |capture − forward| = ${worst}`);
  const steered = await post({ prompt, max_tokens: 4, safekeep: { steer } });
  const [gs] = await engine.generate([ids], { maxNewTokens: 4, steer });
  assert.equal(steered.json.choices[0]!.text, stripEndTokens(tok.decode(gs!.generatedIds, { skipSpecial: false })));
});

test('bounds are 400s naming the field; a guarded server has no /v1/completions; without --allow-interventions the research fields are refused', async () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ prompt: ['a', 'b'] }, /^"prompt": one prompt per request, got 2/],
    [{ prompt: [engine.vocabSize] }, /^"prompt"\[0\]: token id \d+ is outside this model's vocabulary/],
    [{ prompt: [] }, /^"prompt" must be a string or a non-empty list of token ids/],
    [{ prompt, logprobs: 21 }, /^"logprobs" must be an integer 0\.\.20/],
    [{ prompt, logprobs: true }, /^"logprobs" must be an integer/],
    [{ prompt, echo: true, logprobs: 1 }, /^"echo" with "logprobs": the prompt tokens' log probabilities are not computed/],
    [{ prompt, suffix: 'x' }, /^"suffix"/],
    [{ prompt, best_of: 2 }, /^"best_of"/],
    [{ prompt, n: 2 }, /^"n"/],
    [{ prompt, messages: [] }, /^"messages": unknown field/],
    [{ prompt, max_tokens: 17 }, /^"max_tokens" 17 is above this server's limit of 16/],
    [{ prompt: 'x '.repeat(600), max_tokens: 4 }, /maximum context length is 512 tokens/],
    [{ prompt, vllm_xargs: { apply_hooks: '[]' } }, /^vllm_xargs\.apply_hooks: not accepted/],
  ];
  for (const [body, want] of cases) {
    const r = await post(body);
    assert.equal(r.status, 400, JSON.stringify(body).slice(0, 60));
    assert.match(r.json.error!.message, want);
  }
  const guarded = await start({ research: undefined, method: 'safekeep' });
  assert.equal((await post({ prompt, max_tokens: 2 }, guarded)).status, 404);
  const base = await start({ research: undefined });
  assert.equal((await post({ prompt, max_tokens: 2 }, base)).status, 200);
  const refused = await post({ prompt, max_tokens: 2, safekeep: { steer: { layer: 2, vector: truth.r, alpha: 1 } } }, base);
  assert.equal(refused.status, 400);
  assert.match(refused.json.error!.message, /^"safekeep": not accepted/);
  // no raw prompts configured: no route
  assert.equal((await post({ prompt, max_tokens: 2 }, await start({ rawPrompts: undefined }))).status, 404);
});

test('Python\'s openai client: completions, a stream and vllm_xargs through extra_body', async (t) => {
  const python = process.env.SAFEKEEP_PYTHON ?? 'python3';
  const probe = spawnSync(python, ['-c', 'import openai'], { encoding: 'utf8' });
  if (probe.status !== 0) {
    t.skip(`Python's openai is not importable with ${python} (pip install openai; SAFEKEEP_PYTHON picks the interpreter)`);
    return;
  }
  const script = [
    'import json, sys',
    'from openai import OpenAI',
    'c = OpenAI(base_url=sys.argv[1], api_key="none")',
    'r = c.completions.create(model="planted", prompt=sys.argv[2], max_tokens=6, logprobs=2)',
    's = c.completions.create(model="planted", prompt=sys.argv[2], max_tokens=6, stream=True)',
    'streamed = "".join(ch.choices[0].text for ch in s if ch.choices)',
    'x = c.completions.create(model="planted", prompt=sys.argv[2], max_tokens=2, extra_body={"vllm_xargs": {"output_residual_stream": "[0, 2]"}})',
    'print(json.dumps({"text": r.choices[0].text, "finish": r.choices[0].finish_reason, "tokens": r.choices[0].logprobs.tokens,',
    '  "lp": r.choices[0].logprobs.token_logprobs, "streamed": streamed, "completion_tokens": r.usage.completion_tokens,',
    '  "shape": x.model_extra["activations"]["residual_stream"]["shape"]}))',
  ].join('\n');
  // asynchronously: the server answers from this process's event loop
  const r = await promisify(execFile)(python, ['-c', script, url, prompt], { encoding: 'utf8', timeout: 120_000 });
  const got = JSON.parse(r.stdout) as { text: string; finish: string; tokens: string[]; lp: number[]; streamed: string; completion_tokens: number; shape: number[] };
  const want = (await post({ prompt, max_tokens: 6, logprobs: 2 })).json.choices[0]!;
  assert.equal(got.text, want.text);
  assert.equal(got.streamed, want.text);
  assert.equal(got.finish, want.finish_reason);
  assert.deepEqual(got.tokens, want.logprobs!.tokens);
  assert.deepEqual(got.lp, want.logprobs!.token_logprobs);
  const n = tok.encode(prompt).length;
  assert.deepEqual(got.shape, [2, n + 1, engine.dModel]);
});
