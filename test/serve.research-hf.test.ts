/**
 * The research fields of `serve --model --allow-interventions` on the tiny Hugging Face fixture models (Llama 3 and
 * Qwen 3 architectures, ../shared/fixtures/hf-reference; skipped visibly when absent), with a one-token-per-character
 * tokenizer (replies compare token for token): requests with different steering, interventions and captures sent
 * together each equal the same request sent alone (greedy ids), and the captured residual stream equals the engine's
 * own `forward` hidden states of the prompt + generated tokens under the same steering (≤ 1e-5).
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { createLocalServer } from '../src/serve/local.ts';
import { countTokensUpTo } from '../src/serve/context-length.ts';
import { makeRng } from '../src/util/rng.ts';
import { charTokenizer } from './helpers/char-tokenizer.ts';
import { tempCache } from './helpers/engine.ts';
import { sharedPath } from './helpers/shared.ts';

const root = sharedPath('fixtures', 'hf-reference', 'models');

for (const tag of ['llama3-tiny-f32', 'qwen3-tiny-f32']) {
  describe(`research fields on ${tag}`, { skip: root ? false : 'needs ../shared/fixtures/hf-reference (set SAFEKEEP_SHARED)' }, () => {
    let engine: OnnxEngine;
    let server: Server;
    let url = '';
    let cache: ReturnType<typeof tempCache>;
    let v: number[] = [];
    const tok = () => charTokenizer(engine.vocabSize);
    let backend: LocalBackend;

    before(async () => {
      cache = tempCache();
      engine = await createEngine(join(root!, tag), { cacheDir: cache.dir, threads: 1 });
      // random weights: run every reply to max_tokens
      (engine as { eosIds: number[] }).eosIds = [];
      backend = new LocalBackend(engine, tok(), { responseCache: 0 });
      const rng = makeRng(7);
      v = Array.from({ length: engine.dModel }, () => rng.normal());
      server = createLocalServer({
        backend, method: 'base', modelName: tag, log: () => undefined, maxQueue: 16, contextLength: 2048,
        countPromptTokens: (call, limit) => countTokensUpTo(backend.renderCall(call), (t) => tok().encode(t).length, limit),
        research: { numLayers: engine.numLayers, hiddenSize: engine.dModel, numHeads: engine.config.numHeads, headDim: engine.config.headDim },
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

    type Reply = { choices: { message: { content: string } }[]; safekeep?: { activations: Record<string, { shape: number[]; data: string }> }; error?: unknown };
    const post = async (body: unknown): Promise<Reply> => {
      const r = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const j = (await r.json()) as Reply;
      assert.equal(r.status, 200, JSON.stringify(j.error));
      return j;
    };
    const messages = (s: string) => [{ role: 'user', content: s }];

    test('batched requests with different steering and interventions each equal their one-at-a-time answer', async () => {
      const bodies = [
        { messages: messages('hello there'), max_tokens: 6 },
        ...[-8, 2, 8, 16].map((alpha) => ({ messages: messages('hello there'), max_tokens: 6, safekeep: { steer: { layer: 2, vector: v, alpha } } })),
        { messages: messages('a longer prompt for the batch'), max_tokens: 6, safekeep: { interventions: [{ layer: 1, kind: 'clamp', vector: v, alpha: 3 }, { layer: 3, kind: 'add', vector: v, alpha: 5, positions: 'generated' }] } },
        { messages: messages('hello there'), max_tokens: 6, safekeep: { interventions: [{ hook: 'blocks.1.attn_out', kind: 'ablate', vector: v }] } },
        { messages: messages('hi'), max_tokens: 6, safekeep: { steer: { layer: 1, vector: v, alpha: 4 }, capture: { hooks: ['blocks.1.resid_post'], positions: 'all', generated: true } } },
      ];
      const alone: Reply[] = [];
      for (const b of bodies) alone.push(await post(b));
      const together = await Promise.all(bodies.map(post));
      together.forEach((r, i) => assert.equal(r.choices[0]!.message.content, alone[i]!.choices[0]!.message.content, `request ${i}`));
      assert.ok(new Set(alone.slice(0, 5).map((r) => r.choices[0]!.message.content)).size > 1, 'steering changes the answer');
      assert.ok(engine.scheduler.stats.peakBatch >= 4, `peak batch ${engine.scheduler.stats.peakBatch}`);
    });

    test('capture equals forward\'s hidden states (residual stream) and runWithCache (inside the blocks) under the same steering (≤ 1e-5)', async () => {
      const steer = { layer: 2, vector: v, alpha: 3 };
      const text = 'capture me';
      const [r] = await Promise.all([
        post({ messages: messages(text), max_tokens: 4, safekeep: { steer, capture: { hooks: ['blocks.0.resid_pre', 'blocks.2.resid_post', 'blocks.1.attn_out', 'blocks.3.z'], positions: 'all', generated: true } } }),
        post({ messages: messages('another row'), max_tokens: 4, safekeep: { steer: { ...steer, alpha: -3 } } }),
      ]);
      const ids = tok().encode(backend.renderCall({ messages: messages(text), maxTokens: 4, purpose: 'agent' }));
      const [g] = await engine.generate([ids], { maxNewTokens: 4, steer });
      const seq = [...ids, ...g!.generatedIds.slice(0, -1)];
      const [f] = await engine.forward([seq], { steer, hiddenAt: 'all', logitsAt: 'none' });
      const d = engine.dModel;
      const T = seq.length;
      for (const [name, layer] of [['blocks.0.resid_pre', 0], ['blocks.2.resid_post', 3]] as const) {
        const a = r!.safekeep!.activations[name]!;
        assert.deepEqual(a.shape, [T, d]);
        const b = Buffer.from(a.data, 'base64');
        const got = new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
        let worst = 0;
        for (let t = 0; t < T; t++) for (let j = 0; j < d; j++) {
          const want = f!.hidden[(layer * T + t) * d + j]!;
          worst = Math.max(worst, Math.abs(got[t * d + j]! - want) / Math.max(1, Math.abs(want)));
        }
        assert.ok(worst <= 1e-5, `${name}: ${worst}`);
      }
      // points inside the blocks: the engine's runWithCache of the same tokens under the same steering
      const ref = await engine.runWithCache(seq, { names: ['blocks.1.attn_out', 'blocks.3.z'], steer, logitsAt: 'none' });
      for (const name of ['blocks.1.attn_out', 'blocks.3.z']) {
        const a = r!.safekeep!.activations[name]!;
        const want = ref.cache.get(name).data;
        assert.deepEqual(a.shape, [T, want.length / T], name);
        const b = Buffer.from(a.data, 'base64');
        const got = new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
        let worst = 0;
        for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / Math.max(1, Math.abs(want[i]!)));
        assert.ok(worst <= 1e-5, `${name}: ${worst}`);
      }
    });
  });
}
