/**
 * `npm run bench:sae-generate [-- --model-d 256 --layers 8 --rows 4 --new 32 --threads 2 --rounds 3]`: the cost of an
 * SAE spliced into generation (src/engine/run/sae-rows.ts). A random Llama-shaped checkpoint, `rows` prompts of 16
 * tokens generating `new` tokens each (greedy, no stop), SAE d_sae = 16 × d at blocks.1.resid_post:
 *   plain      — no SAE (the plain graph: what every row without an SAE runs, unchanged by SAE support)
 *   unedited   — every row the same SAE, no edits (splice 'error': the model exact; one set of edit inputs a step)
 *   per-row    — every row the same SAE with its own edits (ablate / clamp / add: keep / set / add one row each)
 *   mixed      — half the rows per-row edits, half no SAE (two decode batches a step)
 * Same process, interleaved rounds, best of each; prints tokens per second (decode and prefill together: the whole
 * generate call's wall time).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { createEngine } from '../src/engine/engine.ts';
import type { SaeAttachment } from '../src/engine/run/sae-hooks.ts';
import type { FeatureEdit } from '../src/sae/math.ts';
import { best, flag, loadavg } from './common.ts';
import { randomSae } from './random-sae.ts';

const d = Number(flag('model-d') ?? 256);
const layers = Number(flag('layers') ?? 8);
const rows = Number(flag('rows') ?? 4);
const newTokens = Number(flag('new') ?? 32);
const threads = Number(flag('threads') ?? 2);
const rounds = Number(flag('rounds') ?? 3);

const dir = mkdtempSync(join(tmpdir(), 'bench-sae-gen-'));
try {
  await writeRandomCheckpoint(dir, 'llama', { seed: 3, numLayers: layers, hiddenSize: d, numHeads: 4, numKvHeads: 2, intermediateSize: 4 * d, vocabSize: 4096, ropeScaling: null });
  const engine = await createEngine(dir, { cacheDir: join(dir, '.cache'), threads, quiet: true });
  const sae = randomSae(d, 16 * d, 2);
  const prompts = Array.from({ length: rows }, (_, r) => Array.from({ length: 16 }, (_, i) => (r * 131 + i * 7919) % 4096));
  const o = { maxNewTokens: newTokens, stopIds: [] };
  const rowEdits = (r: number): FeatureEdit[] => [{ kind: 'ablate', feature: r }, { kind: 'clamp', feature: 100 + r, value: 2 }, { kind: 'add', feature: 200 + r, alpha: 0.5 }];
  const run = (saesOf: (r: number) => SaeAttachment[] | undefined) => () =>
    Promise.all(prompts.map((p, r) => { const saes = saesOf(r); return engine.submit(p, saes ? { ...o, saes } : o); }));
  const cases: [string, () => Promise<unknown>][] = [
    ['plain', run(() => undefined)],
    ['unedited', run(() => [{ sae }])],
    ['per-row', run((r) => [{ sae, edits: rowEdits(r) }])],
    ['mixed', run((r) => (r % 2 ? undefined : [{ sae, edits: rowEdits(r) }]))],
  ];
  for (const [, f] of cases) await f();
  const t = cases.map(() => Infinity);
  for (let k = 0; k < rounds; k++) for (const [i, [, f]] of cases.entries()) t[i] = Math.min(t[i]!, await best(1, f));
  console.log(`generate ${rows} rows × ${newTokens} new tokens (16-token prompts), random Llama d=${d} (${layers} layers), SAE d_sae=${16 * d} at blocks.1.resid_post, ${threads} threads, load ${loadavg().toFixed(2)}:`);
  cases.forEach(([name], i) => console.log(`  ${name.padEnd(9)} ${(t[i]! * 1e3).toFixed(1)} ms  ${((rows * newTokens) / t[i]!).toFixed(0)} tok/s  ${(t[i]! / t[0]!).toFixed(2)}× plain`));
  await engine.dispose();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
