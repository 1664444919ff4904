// %% [markdown]
// # 3. Steering — Table 3 (Pan et al. 2026, §5)
// The causal test: subtract α·R̂_harmful(ℓ*) — the unit harmful-request Schema Direction at the peak refusal layer —
// from the residual stream at every decoding step of agent-format harmful requests, and count refusals, valid
// harmful tool calls and invalid outputs. (Llama-3.1-8B in the paper: α = 0, 4, 8, 12 → refusal 5, 47.5, 20, 0 %.)
// On the planted model the outcome of each request is known in advance: it refuses iff hidden[L]·r > τ.

// %%
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writePlantedModel, PLANTED } from '../src/experiments/planted.ts';
import { engineEnv } from '../src/cli/env.ts';
import { steerSweep, parseAlphas } from '../src/experiments/steer.ts';
import { loadPairSet } from '../src/data/load.ts';
import { resolveModel } from '../src/hub/resolve.ts';

const flag = (n: string): string | undefined => { const i = process.argv.indexOf(`--${n}`); return i >= 0 ? process.argv[i + 1] : undefined; };
const tmp = mkdtempSync(join(tmpdir(), 'safekeep-notebook-'));
let model = flag('model');
if (!model) {
  model = join(tmp, 'planted');
  await writePlantedModel(model, { lexiconPairs: (await loadPairSet('pairs')).pairs });
  console.log(`model: planted SYNTHETIC model (refusal threshold τ = ${PLANTED.tau} on hidden[L]·r)`);
} else model = await resolveModel(model);
const synthetic = !flag('model');

// %% [markdown]
// ## The sweep
// α may be absolute (residual units, as the engine subtracts it) or relative (`0.5x` = half the mean ‖hidden[ℓ*]‖),
// which transfers across models with different residual scales.

// %%
const result = await steerSweep({
  model, data: flag('data') ?? 'pairs', results: flag('results') ?? join(tmp, 'results'),
  limit: Number(flag('limit') ?? (synthetic ? 30 : 0)) || undefined,
  alphas: parseAlphas(flag('alphas') ?? (synthetic ? '0,0.5,1,1.5' : '0,4,8,12')),
  layer: 'auto', direction: 'schema-harmful', maxNewTokens: Number(flag('max-new-tokens') ?? (synthetic ? 12 : 256)),
  engine: engineEnv(), // SAFEKEEP_CACHE etc., as the CLI reads them
});
console.log(`ℓ* = ${result.layer}; mean ‖hidden[ℓ*]‖ = ${result.meanNorm.toFixed(3)}`);
for (const s of result.sweeps) {
  console.log(`${s.requests} requests, direction: ${s.direction}`);
  for (const r of s.rows) {
    const pct = (k: number): string => `${((100 * k) / r.n).toFixed(1)}%`.padStart(7);
    console.log(`  α=${String(r.alpha).padEnd(6)} (${r.alphaRelative?.toFixed(2)}×‖h‖)  refusal ${pct(r.counts.refusal)}  valid call ${pct(r.counts.valid)}  invalid ${pct(r.counts.invalid)}  n=${r.n}`);
  }
}
console.log(`Table 3 and every generation: ${result.outDir}`);
