/**
 * Hook points and edits at them against transformers' own forward hooks: test/fixtures/hf5-hooks
 * (scripts/hf-fixtures/hooks.py) holds, for one checkpoint per family of test/fixtures/hf5 (sliding windows on mistral
 * and qwen2), the value of every hook point of a clean prompt and the logits and downstream activations of a
 * corrupted prompt under activation patching (resid_post at the last position, z at two positions), head ablation,
 * add / clamp / ablate at attn_out, mlp_out, resid_mid. Both the ONNX engine (runWithCache, patching from its own
 * clean cache) and the Float64 oracle are checked, ≤ 1e-4 relative.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import type { Checkpoint } from '../src/checkpoint/types.ts';
import { createEngine, type OnnxEngine } from '../src/engine/engine.ts';
import { allHookNames } from '../src/engine/graph/hooks.ts';
import { referenceForward } from '../src/engine/reference.ts';
import { ActivationCache } from '../src/engine/run/activation-cache.ts';
import type { HookIntervention } from '../src/engine/run/hooked.ts';
import { maxAbsDiff, readAllF32, tempCache } from './helpers/engine.ts';
import { HF5 } from './helpers/hf5.ts';
import { repoRoot } from './helpers/shared.ts';

const DIR = join(repoRoot, 'test', 'fixtures', 'hf5-hooks');
type Spec = { hook: string; kind: HookIntervention['kind']; positions?: number[]; heads?: number[]; vector?: number[]; alpha?: number };
const index = JSON.parse(readFileSync(join(DIR, 'index.json'), 'utf8')) as { clean: number[]; corrupt: number[]; cases: Record<string, Record<string, { hooks: Spec[] }>> };

function close(what: string, got: ArrayLike<number>, want: ArrayLike<number>): void {
  let scale = 1;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  const d = maxAbsDiff(got, want);
  assert.ok(d <= 1e-4 * scale, `${what}: max |diff| ${d.toExponential(2)} (scale ${scale.toFixed(2)})`);
}

for (const [tag, cases] of Object.entries(index.cases)) {
  describe(`hook points vs transformers forward hooks: ${tag}`, () => {
    let engine: OnnxEngine;
    let ck: Checkpoint;
    let cache: ReturnType<typeof tempCache>;
    let refs: ReturnType<typeof readAllF32>;
    before(async () => {
      cache = tempCache();
      ck = await loadCheckpoint(join(HF5, tag, 'model'));
      engine = await createEngine(join(HF5, tag, 'model'), { cacheDir: cache.dir, threads: 1 });
      refs = readAllF32(join(DIR, `${tag}.safetensors`));
    });
    after(async () => {
      await engine?.dispose();
      cache?.cleanup();
    });

    test('every hook point of the clean prompt = transformers (engine and oracle)', async () => {
      const r = await engine.runWithCache(index.clean, { names: ['blocks.*.*'] });
      const o = referenceForward(ck, index.clean, { capture: ['blocks.*.*'] });
      for (const name of allHookNames(ck.config)) {
        const want = refs.get(`clean.${name}`)!;
        assert.deepEqual(r.cache.get(name).shape, want.shape, name);
        close(`engine ${name}`, r.cache.get(name).data, want.data);
        close(`oracle ${name}`, o.hooks.get(name)!, want.data);
      }
      close('engine logits', r.logits, refs.get('clean.logits')!.data);
    });

    for (const [name, c] of Object.entries(cases)) {
      test(`${name}: ${c.hooks.map((h) => `${h.kind}@${h.hook}`).join(', ')} = transformers (engine and oracle)`, async () => {
        const { cache: clean } = await engine.runWithCache(index.clean, { names: ['blocks.*.*'] });
        const hfClean = new ActivationCache(allHookNames(ck.config).map((n) => [n, refs.get(`clean.${n}`)!]));
        const toHooks = (from: ActivationCache): HookIntervention[] => c.hooks.map((h): HookIntervention => {
          switch (h.kind) {
            case 'patch': return { hook: h.hook, kind: 'patch', from, ...(h.positions ? { positions: h.positions } : {}) };
            case 'ablate_heads': return { hook: h.hook, kind: 'ablate_heads', heads: h.heads! };
            case 'ablate': return { hook: h.hook, kind: 'ablate', vector: h.vector! };
            default: return { hook: h.hook, kind: h.kind, vector: h.vector!, alpha: h.alpha! };
          }
        });
        const names = ['blocks.1.attn_out', 'blocks.1.resid_post'];
        const r = await engine.runWithCache(index.corrupt, { names, hooks: toHooks(clean) });
        close('engine logits', r.logits, refs.get(`${name}.logits`)!.data);
        for (const n of names) close(`engine ${n}`, r.cache.get(n).data, refs.get(`${name}.${n}`)!.data);
        const o = referenceForward(ck, index.corrupt, { capture: names, hookEdits: toHooks(hfClean) });
        close('oracle logits', o.logits, refs.get(`${name}.logits`)!.data);
        for (const n of names) close(`oracle ${n}`, o.hooks.get(n)!, refs.get(`${name}.${n}`)!.data);
      });
    }
  });
}
