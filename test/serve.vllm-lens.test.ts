/**
 * vllm-lens's wire format (`vllm_xargs`) on `serve --model --allow-interventions`, spoken by a client written here
 * from vllm-lens's documented fields (UKGovernmentBEIS/vllm-lens: `output_residual_stream`, `apply_steering_vectors`
 * as a JSON string of SteeringVector objects, its tensor encoding — base64 of a zstd frame of the raw bytes with
 * dtype, shape, compression, original_dtype), on the planted model. Checked against what is known independently:
 * - captured `activations.residual_stream` [n_layers, positions, d] (layer i = hidden[i+1]; the prompt's positions
 *   from 0, then the generated tokens fed back) equals the engine's own `forward` hidden states under the same
 *   steering (≤ 1e-5), decoded with the zstd package's own decompressor;
 * - a SteeringVector (h += scale·v at decoder layer i, v not normalised) answers as the CLI's steering
 *   (`generate --steer-layer i+1 --alpha −scale·|v|` with v) does, token for token, and as the planted model's
 *   threshold predicts (its later blocks are identities: the score moves by exactly scale·(v·r));
 * - bfloat16, float16 and uncompressed tensors read as the float32 values they hold;
 * - every unsupported or malformed field is a 400 naming it; `apply_hooks` (pickled Python) is refused saying why;
 *   the guard proxy and a server without --allow-interventions refuse `vllm_xargs` by name.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { createServer, type Server } from 'node:http';
import { compress, decompress } from '@bokuweb/zstd-wasm';
import { createGuardProxy } from '../src/serve/proxy.ts';
import { writePlantedModel, type PlantedTruth } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { loadPromptTokenizer, type PromptTokenizer } from '../src/prompts/tokenizer.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { createLocalServer, type LocalServerOptions } from '../src/serve/local.ts';
import { countTokensUpTo } from '../src/serve/context-length.ts';
// the package's module is instantiated once per process (a second init races the first): the server's own
import { frameContentSize, zstdReady } from '../src/serve/lens-tensor.ts';
import { stripEndTokens } from '../src/outcome/parse-calls.ts';

let dir = '';
let truth: PlantedTruth;
let engine: OnnxEngine;
let tok: PromptTokenizer;
let backend: LocalBackend;
const servers: Server[] = [];
let url = '';
/** hidden[L]·r at the last prompt token of the harmful request, unsteered */
let score = 0;

const harmful = [{ role: 'user', content: 'steal credential fraud hack malware phish steal stolen credential' }];

async function start(extra: Partial<LocalServerOptions> = {}): Promise<string> {
  const server = createLocalServer({
    backend, method: 'base', modelName: 'planted', log: () => undefined, defaultMaxTokens: 8, maxQueue: 16, maxTokensLimit: 16, contextLength: 8192,
    countPromptTokens: (call, limit) => countTokensUpTo(backend.renderCall(call), (t) => tok.encode(t).length, limit),
    research: { numLayers: engine.numLayers, hiddenSize: engine.dModel, numHeads: engine.config.numHeads, headDim: engine.config.headDim, maxCaptureBytes: 256 * 1024 },
    ...extra,
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

before(async () => {
  await zstdReady();
  dir = mkdtempSync(join(tmpdir(), 'safekeep-lens-'));
  const model = join(dir, 'planted');
  truth = await writePlantedModel(model, { lexiconPairs: (await loadPairSet('pairs')).pairs });
  tok = await loadPromptTokenizer(model);
  engine = await createEngine(model, { cacheDir: join(dir, '.cache'), threads: 1 });
  backend = new LocalBackend(engine, tok, { responseCache: 0 });
  const [f] = await engine.forward([promptIds(harmful)], { hiddenAt: 'last', logitsAt: 'none' });
  score = truth.r.reduce((a, x, j) => a + x * f!.hidden[engine.numLayers * engine.dModel + j]!, 0);
  url = await start();
});
after(async () => {
  for (const s of servers) { s.closeAllConnections(); s.close(); }
  await engine?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const promptIds = (messages: typeof harmful) => tok.encode(backend.renderCall({ messages, maxTokens: 1, purpose: 'agent' }));

// ---- a vllm-lens client, from its documented wire format ----

interface WireTensor { data: string; dtype: string; shape: number[]; compression?: string; original_dtype?: string }

/** numpy storage dtype + torch dtype; bfloat16 as int16 bits (the upper half of a float32) */
function encodeTensor(values: number[][], dtype: 'float32' | 'float16' | 'bfloat16' = 'float32', zstd = true): WireTensor {
  const flat = values.flat();
  const size = dtype === 'float32' ? 4 : 2;
  const raw = new Uint8Array(flat.length * size);
  const view = new DataView(raw.buffer);
  flat.forEach((x, i) => {
    if (dtype === 'float32') view.setFloat32(i * 4, x, true);
    else if (dtype === 'bfloat16') view.setUint16(i * 2, new Uint32Array(Float32Array.of(x).buffer)[0]! >>> 16, true);
    else view.setUint16(i * 2, toHalf(x), true);
  });
  return {
    data: Buffer.from(zstd ? compress(raw, 3) : raw).toString('base64'),
    dtype: dtype === 'bfloat16' ? 'int16' : dtype, shape: [values.length, values[0]!.length],
    ...(zstd ? { compression: 'zstd' } : {}), original_dtype: `torch.${dtype}`,
  };
}

/** float → IEEE half, for values exactly representable (the test picks them) */
function toHalf(x: number): number {
  if (x === 0) return 0;
  const sign = x < 0 ? 0x8000 : 0;
  const a = Math.abs(x);
  const e = Math.floor(Math.log2(a));
  const frac = Math.round((a / 2 ** e - 1) * 1024);
  return sign | ((e + 15) << 10) | frac;
}

function decodeTensor(t: WireTensor): { shape: number[]; values: Float32Array } {
  assert.equal(t.compression, 'zstd');
  assert.equal(t.dtype, 'float32');
  assert.equal(t.original_dtype, 'torch.float32');
  const frame = Buffer.from(t.data, 'base64');
  const raw = decompress(frame);
  // the frame carries its content size (Python's zstandard needs it)
  assert.equal(frameContentSize(frame), raw.length);
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  return { shape: t.shape, values: Float32Array.from({ length: raw.length / 4 }, (_, i) => view.getFloat32(i * 4, true)) };
}

interface SteeringVector { activations: WireTensor; layer_indices: number[]; scale?: number; norm_match?: boolean; position_indices?: number[] | null }

interface Reply {
  choices: { message: { content: string }; finish_reason: string }[];
  usage: { prompt_tokens: number; completion_tokens: number };
  activations?: { residual_stream: WireTensor };
  error?: { message: string };
}

/** VLLMLensClient.chat: the xargs as JSON strings, as vLLM passes them */
async function chat(messages: typeof harmful, o: { maxTokens: number; captureLayers?: number[]; steering?: SteeringVector[]; xargs?: Record<string, unknown> }, at = url): Promise<{ status: number; json: Reply }> {
  const xargs: Record<string, unknown> = { ...o.xargs };
  if (o.captureLayers) xargs.output_residual_stream = JSON.stringify(o.captureLayers);
  if (o.steering) xargs.apply_steering_vectors = JSON.stringify(o.steering);
  const body = { model: 'planted', messages, max_tokens: o.maxTokens, temperature: 0, ...(Object.keys(xargs).length ? { vllm_xargs: xargs } : {}) };
  const r = await fetch(`${at}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Reply };
}

const norm = (v: readonly number[]) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));

test('output_residual_stream: [n_layers, positions, d] of decoder-layer outputs (hidden[i+1]) equals forward under the same steering (≤ 1e-5)', async () => {
  const scale = -0.75;
  const v = truth.r.map((x) => 2 * x);
  // the CLI's steering of the same edit: hidden[2] −= α·v̂ with α = −scale·|v|
  const cli = { layer: 2, vector: v, alpha: -scale * norm(v) };
  const steering = [{ activations: encodeTensor([v]), layer_indices: [1], scale }];
  const [r] = await Promise.all([
    chat(harmful, { maxTokens: 5, captureLayers: [3, 0, 2], steering }),
    // decoded alongside a differently steered and a plain row
    chat(harmful, { maxTokens: 5, steering: [{ activations: encodeTensor([v]), layer_indices: [0], scale: 1 }] }),
    chat(harmful, { maxTokens: 5 }),
  ]);
  assert.equal(r!.status, 200, JSON.stringify(r!.json.error));
  const ids = promptIds(harmful);
  const [g] = await engine.generate([ids], { maxNewTokens: 5, steer: cli });
  const seq = [...ids, ...g!.generatedIds.slice(0, -1)];
  const [f] = await engine.forward([seq], { steer: cli, hiddenAt: 'all', logitsAt: 'none' });
  const { shape, values } = decodeTensor(r!.json.activations!.residual_stream);
  const d = engine.dModel;
  const T = seq.length;
  assert.deepEqual(shape, [3, T, d]);
  // layers ascending: 0, 2, 3 → hidden[1], hidden[3], hidden[4]
  [1, 3, 4].forEach((h, k) => {
    let worst = 0;
    for (let t = 0; t < T; t++) for (let j = 0; j < d; j++) worst = Math.max(worst, Math.abs(values[(k * T + t) * d + j]! - f!.hidden[(h * T + t) * d + j]!));
    assert.ok(worst <= 1e-5, `layer ${h - 1}: max |capture − forward| = ${worst}`);
  });
  assert.equal(T, r!.json.usage.prompt_tokens + r!.json.usage.completion_tokens - 1);
  // `true` = every layer
  const all = await chat(harmful, { maxTokens: 1, xargs: { output_residual_stream: 'true' } });
  assert.deepEqual(all.json.activations!.residual_stream.shape, [engine.numLayers, ids.length, d]);
});

test('apply_steering_vectors: scale·v at decoder layer i answers as the CLI\'s steering at hidden[i+1] with α = −scale·|v|, and as the planted threshold predicts', async () => {
  const v = truth.r.map((x, j) => 1.5 * x + (j % 3 === 0 ? 0.01 : 0));
  const vr = v.reduce((a, x, j) => a + x * truth.r[j]!, 0);
  const scales = [-6, -3, -1.5, -0.5, 0, 0.5, 2].filter((s) => Math.abs(score + s * vr - truth.tau) > 0.05);
  assert.ok(scales.some((s) => score + s * vr > truth.tau) && scales.some((s) => score + s * vr < truth.tau), `the sweep crosses the threshold (score ${score})`);
  const ids = promptIds(harmful);
  const replies = await Promise.all(scales.map((scale) => chat(harmful, { maxTokens: 4, steering: [{ activations: encodeTensor([v]), layer_indices: [1], scale, norm_match: false, position_indices: null }] })));
  for (const [k, scale] of scales.entries()) {
    const r = replies[k]!;
    assert.equal(r.status, 200, JSON.stringify(r.json.error));
    const [g] = await engine.generate([ids], { maxNewTokens: 4, steer: { layer: 2, vector: v, alpha: -scale * norm(v) } });
    assert.equal(r.json.usage.completion_tokens, g!.generatedIds.length, `scale ${scale}`);
    const cliText = stripEndTokens(tok.decode(g!.generatedIds, { skipSpecial: false }));
    assert.equal(r.json.choices[0]!.message.content, cliText, `scale ${scale}`);
    assert.equal(cliText.startsWith('sorry'), score + scale * vr > truth.tau, `scale ${scale}: ${cliText}`);
  }
  // two layers in one vector, and two vectors at one layer, add up
  const two = await chat(harmful, { maxTokens: 4, captureLayers: [3], steering: [{ activations: encodeTensor([v, v]), layer_indices: [0, 2], scale: -1 }, { activations: encodeTensor([v]), layer_indices: [2], scale: -0.5 }] });
  const interventions = [{ layer: 1, kind: 'add' as const, vector: v, alpha: -norm(v) }, { layer: 3, kind: 'add' as const, vector: v, alpha: -norm(v) }, { layer: 3, kind: 'add' as const, vector: v, alpha: -0.5 * norm(v) }];
  const [g] = await engine.generate([ids], { maxNewTokens: 4, interventions });
  const seq = [...ids, ...g!.generatedIds.slice(0, -1)];
  const [f] = await engine.forward([seq], { interventions, hiddenAt: 'all', logitsAt: 'none' });
  const got = decodeTensor(two.json.activations!.residual_stream).values;
  const d = engine.dModel;
  let worst = 0;
  for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i]! - f!.hidden[4 * seq.length * d + i]!));
  assert.ok(worst <= 1e-5, `max |capture − forward| = ${worst}`);
});

test('bfloat16, float16 and uncompressed activations read as the float32 values they hold', async () => {
  // values every dtype holds exactly
  const v = truth.r.map((x) => Math.round(x * 64) / 32);
  const capture = [engine.numLayers - 1];
  const of = async (t: WireTensor) => {
    const r = await chat(harmful, { maxTokens: 3, captureLayers: capture, steering: [{ activations: t, layer_indices: [1], scale: -2 }] });
    assert.equal(r.status, 200, JSON.stringify(r.json.error));
    return r.json;
  };
  const ref = await of(encodeTensor([v]));
  const unsteered = await chat(harmful, { maxTokens: 3, captureLayers: capture });
  assert.notDeepEqual(decodeTensor(ref.activations!.residual_stream).values, decodeTensor(unsteered.json.activations!.residual_stream).values, 'the vector steers');
  for (const t of [encodeTensor([v], 'bfloat16'), encodeTensor([v], 'float16'), encodeTensor([v], 'float32', false)]) {
    const r = await of(t);
    assert.equal(r.choices[0]!.message.content, ref.choices[0]!.message.content, t.original_dtype);
    assert.deepEqual(decodeTensor(r.activations!.residual_stream).values, decodeTensor(ref.activations!.residual_stream).values, `${t.original_dtype} ${t.compression ?? 'raw'}`);
  }
});

test('a streamed request gets its activations in a data event of its own before [DONE]', async () => {
  const r = await fetch(`${url}/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: harmful, max_tokens: 3, stream: true, vllm_xargs: { output_residual_stream: '[1]' } }),
  });
  const events = (await r.text()).split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, ''));
  assert.equal(events.at(-1), '[DONE]');
  const last = JSON.parse(events.at(-2)!) as { activations?: { residual_stream: WireTensor } };
  assert.deepEqual(Object.keys(last), ['activations']);
  const plain = await chat(harmful, { maxTokens: 3, captureLayers: [1] });
  assert.deepEqual(decodeTensor(last.activations!.residual_stream).values, decodeTensor(plain.json.activations!.residual_stream).values);
});

test('what this engine does not do is a 400 naming it; apply_hooks is refused saying why; a guard refuses vllm_xargs by name', async () => {
  const d = engine.dModel;
  const v = truth.r;
  const sv = (o: Record<string, unknown>) => JSON.stringify([{ activations: encodeTensor([v]), layer_indices: [1], scale: 1, ...o }]);
  const lie = encodeTensor([v]);
  // a frame that declares more bytes than the shape holds (never decompressed)
  const big = { ...lie, data: Buffer.from(compress(new Uint8Array(d * 8), 1)).toString('base64') };
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ apply_hooks: '[{"fn": {"cloudpickle": "gASV"}, "layer_indices": [0]}]' }, /^vllm_xargs\.apply_hooks: not accepted: its hooks are pickled Python functions \(cloudpickle\), code this server would run/],
    [{ apply_steering_vectors: sv({ norm_match: true }) }, /^vllm_xargs\.apply_steering_vectors\[0\]\.norm_match: not supported/],
    [{ apply_steering_vectors: sv({ position_indices: [0, 1] }) }, /^vllm_xargs\.apply_steering_vectors\[0\]\.position_indices: position-specific steering is not supported/],
    [{ apply_steering_vectors: JSON.stringify([{ activations: { ...lie, shape: [1, 1, d] }, layer_indices: [1] }]) }, /activations\.shape \[1,1,\d+\]: position-specific \(3-D\) steering is not supported/],
    [{ apply_steering_vectors: sv({ layer_indices: [engine.numLayers] }) }, /layer_indices\[0\]: \d+ is not a decoder layer of this model/],
    [{ apply_steering_vectors: sv({ layer_indices: [0, 1] }) }, /activations\.shape \[1,\d+\]: its first axis must match layer_indices \(2\)/],
    [{ apply_steering_vectors: JSON.stringify([{ activations: big, layer_indices: [1] }]) }, /activations\.data: the zstd frame holds \d+ bytes; shape \[1,\d+\] of float32 is \d+/],
    [{ apply_steering_vectors: JSON.stringify([{ activations: { ...lie, data: Buffer.from('not zstd').toString('base64') }, layer_indices: [1] }]) }, /activations\.data: not a zstd frame/],
    [{ apply_steering_vectors: JSON.stringify([{ activations: { ...lie, dtype: 'int8' }, layer_indices: [1] }]) }, /activations\.dtype: "int8" .*is not read here/],
    [{ apply_steering_vectors: sv({ scale: 1e39 }) }, /scale must be a finite float32 number/],
    [{ apply_steering_vectors: sv({ extra: 1 }) }, /apply_steering_vectors\[0\]\.extra: unknown field/],
    [{ apply_steering_vectors: '[{' }, /^vllm_xargs\.apply_steering_vectors: not JSON/],
    [{ output_residual_stream: '[0, 99]' }, /^vllm_xargs\.output_residual_stream: layer 99 is not a decoder layer/],
    [{ output_residual_stream: '"all"' }, /^vllm_xargs\.output_residual_stream must be a non-empty list of layer indices/],
    [{ skip_reading_prefix_cache: true }, /^vllm_xargs\.skip_reading_prefix_cache: unknown field/],
  ];
  for (const [xargs, want] of cases) {
    const r = await chat(harmful, { maxTokens: 2, xargs });
    assert.equal(r.status, 400, JSON.stringify(xargs).slice(0, 80));
    assert.match(r.json.error!.message, want);
  }
  const both = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: harmful, safekeep: {}, vllm_xargs: {} }) });
  assert.equal(both.status, 400);
  // too many captured bytes for the server's bound: a 400 before generation
  const many = await chat(harmful, { maxTokens: 16, xargs: { output_residual_stream: true } }, await start({ research: { numLayers: engine.numLayers, hiddenSize: d, numHeads: engine.config.numHeads, headDim: engine.config.headDim, maxCaptureBytes: 4096 } }));
  assert.equal(many.status, 400);
  assert.match(many.json.error!.message, /^safekeep\.capture: .*above this server's 4096 bytes/);
  // a server without --allow-interventions, and the guard proxy (which calls neither upstream nor judge)
  const plain = await start({ research: undefined });
  const p = await chat(harmful, { maxTokens: 2, captureLayers: [0] }, plain);
  assert.equal(p.status, 400);
  assert.match(p.json.error!.message, /^"vllm_xargs": not accepted: vllm-lens's steering vectors, activation capture and hooks are accepted only by serve --model --allow-interventions \(never by a guard\)/);
  let calls = 0;
  const up = createServer((_req, res) => { calls++; res.writeHead(200, { 'content-type': 'application/json' }); res.end('{}'); });
  await new Promise<void>((r) => up.listen(0, '127.0.0.1', r));
  const proxy = createGuardProxy({ upstream: `http://127.0.0.1:${(up.address() as AddressInfo).port}/v1`, judgeModel: 'judge-m', timeoutMs: 5000, retries: 0, log: () => undefined });
  servers.push(up, proxy);
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  const r = await chat(harmful, { maxTokens: 2, xargs: { apply_hooks: '[]' } }, `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/v1`);
  assert.equal(r.status, 400);
  assert.match(r.json.error!.message, /^"vllm_xargs": not accepted: .*never by a guard/);
  assert.equal(calls, 0);
});
