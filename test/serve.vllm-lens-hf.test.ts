/**
 * vllm-lens's `vllm_xargs` on /v1/completions (a prompt of token ids, no template) on the tiny Hugging Face fixture
 * models (Llama 3 and Qwen 3 architectures, ../shared/fixtures/hf-reference; skipped visibly when absent), whose
 * every block computes: steering vectors at two decoder layers (h_i += scale·v_i, v not normalised) answer as the
 * engine's adds at hidden[i+1] with α = scale·|v_i| do, and as the CLI's steering (α = −scale·|v|) for one layer;
 * `activations.residual_stream` of every layer equals `forward`'s hidden[1..L] of the prompt and the generated tokens
 * fed back under the same edits (≤ 1e-5 relative), sent while a differently steered request decodes beside it.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { compress, decompress } from '@bokuweb/zstd-wasm';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import type { Intervention } from '../src/engine/types.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { createLocalServer } from '../src/serve/local.ts';
import { zstdReady } from '../src/serve/lens-tensor.ts';
import { makeRng } from '../src/util/rng.ts';
import { charTokenizer } from './helpers/char-tokenizer.ts';
import { tempCache } from './helpers/engine.ts';
import { sharedPath } from './helpers/shared.ts';

const root = sharedPath('fixtures', 'hf-reference', 'models');

/** vllm-lens's encoding of float32 rows */
const tensor = (rows: number[][]) => ({
  data: Buffer.from(compress(new Uint8Array(Float32Array.from(rows.flat()).buffer), 3)).toString('base64'),
  dtype: 'float32', shape: [rows.length, rows[0]!.length], compression: 'zstd', original_dtype: 'torch.float32',
});
const norm = (v: readonly number[]) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));

for (const tag of ['llama3-tiny-f32', 'qwen3-tiny-f32']) {
  describe(`vllm-lens fields on ${tag}`, { skip: root ? false : 'needs ../shared/fixtures/hf-reference (set SAFEKEEP_SHARED)' }, () => {
    let engine: OnnxEngine;
    let server: Server;
    let url = '';
    let cache: ReturnType<typeof tempCache>;

    before(async () => {
      await zstdReady();
      cache = tempCache();
      engine = await createEngine(join(root!, tag), { cacheDir: cache.dir, threads: 1 });
      // random weights: run every reply to max_tokens
      (engine as { eosIds: number[] }).eosIds = [];
      const tok = charTokenizer(engine.vocabSize);
      server = createLocalServer({
        backend: new LocalBackend(engine, tok, { responseCache: 0 }), method: 'base', modelName: tag, log: () => undefined, maxQueue: 16, contextLength: 2048,
        research: { numLayers: engine.numLayers, hiddenSize: engine.dModel, numHeads: engine.config.numHeads, headDim: engine.config.headDim },
        rawPrompts: { encode: (t) => tok.encode(t), decode: (ids) => tok.decode([...ids]), vocabSize: engine.vocabSize },
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    });
    after(async () => {
      server?.closeAllConnections();
      server?.close();
      await engine?.dispose();
      cache?.cleanup();
    });

    type Reply = { choices: { text: string }[]; activations?: { residual_stream: { data: string; shape: number[] } }; error?: unknown };
    const complete = async (body: unknown): Promise<Reply> => {
      const r = await fetch(`${url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const j = (await r.json()) as Reply;
      assert.equal(r.status, 200, JSON.stringify(j.error));
      return j;
    };
    const textOf = (ids: number[]) => ids.map((i) => `<${i}>`).join('');

    test('two-layer steering vectors and every layer\'s capture equal the engine\'s adds and forward (≤ 1e-5)', async () => {
      const d = engine.dModel;
      const L = engine.numLayers;
      const rng = makeRng(11);
      const v = [0, 1].map(() => Array.from({ length: d }, () => rng.normal()));
      const ids = Array.from({ length: 7 }, () => 1 + Math.floor(rng.uniform() * (engine.vocabSize - 1)));
      const scale = 0.7;
      const layers = [0, Math.min(2, L - 1)];
      const xargs = {
        output_residual_stream: JSON.stringify(Array.from({ length: L }, (_, i) => i)),
        apply_steering_vectors: JSON.stringify([{ activations: tensor(v), layer_indices: layers, scale }]),
      };
      const [r] = await Promise.all([
        complete({ prompt: ids, max_tokens: 4, vllm_xargs: xargs }),
        complete({ prompt: ids, max_tokens: 4, vllm_xargs: { apply_steering_vectors: JSON.stringify([{ activations: tensor([v[1]!]), layer_indices: [0], scale: -2 }]) } }),
      ]);
      const interventions: Intervention[] = layers.map((i, k) => ({ layer: i + 1, kind: 'add', vector: v[k]!, alpha: scale * norm(v[k]!) }));
      const [g] = await engine.generate([ids], { maxNewTokens: 4, interventions });
      assert.equal(r!.choices[0]!.text, textOf(g!.generatedIds));
      const seq = [...ids, ...g!.generatedIds.slice(0, -1)];
      const T = seq.length;
      const [f] = await engine.forward([seq], { interventions, hiddenAt: 'all', logitsAt: 'none' });
      const t = r!.activations!.residual_stream;
      assert.deepEqual(t.shape, [L, T, d]);
      const raw = decompress(Buffer.from(t.data, 'base64'));
      const got = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
      let worst = 0;
      for (let i = 0; i < L; i++) for (let p = 0; p < T * d; p++) {
        const want = f!.hidden[(i + 1) * T * d + p]!;
        worst = Math.max(worst, Math.abs(got[i * T * d + p]! - want) / Math.max(1, Math.abs(want)));
      }
      assert.ok(worst <= 1e-5, `max relative |capture − forward| = ${worst}`);
      // one layer: the CLI's steering with the sign and layer converted
      const one = await complete({ prompt: ids, max_tokens: 4, vllm_xargs: { apply_steering_vectors: JSON.stringify([{ activations: tensor([v[0]!]), layer_indices: [1], scale: 3 }]) } });
      const [c] = await engine.generate([ids], { maxNewTokens: 4, steer: { layer: 2, vector: v[0]!, alpha: -3 * norm(v[0]!) } });
      assert.equal(one.choices[0]!.text, textOf(c!.generatedIds));
      const [plain] = await engine.generate([ids], { maxNewTokens: 4 });
      assert.notEqual(textOf(plain!.generatedIds), textOf(c!.generatedIds), 'the steering changes the answer');
    });
  });
}
