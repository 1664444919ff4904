// %% [markdown]
// # 2. The mechanism — Figures 3 and 4 (Pan et al. 2026, §4)
// If JSON schemas suppress refusal, the representation shift they cause should point AGAINST the refusal direction.
// The Schema Direction of a category (harmful or benign requests) is R_c(ℓ) = mean_c[h_schema(ℓ) − h_flattened(ℓ)]
// for the same request; we compare its cosine with the chatbot refusal direction r(ℓ) to what random directions
// and label-permuted refusal directions give (Figure 3), then follow the FIRST GENERATED token (Figure 4).

// %%
import { setup, row } from './setup.ts';
import { extractCondition, extractFirstToken, promptCacheName, firstTokenCacheName } from '../src/experiments/extract.ts';
import { readActivationCache } from '../src/cache/store.ts';
import { makeActivations, type Activations } from '../src/analysis/activations.ts';
import { refusalDirection, layerCosines, directionNorms } from '../src/analysis/direction.ts';
import { schemaDirection, matchRows } from '../src/analysis/schema-direction.ts';
import { randomCosineBand, permutationCosineBand } from '../src/analysis/baselines.ts';
import { projectionStats } from '../src/analysis/projection.ts';

const { ctx, plantedR } = await setup();
const load = (name: string): { a: Activations; keys: string[] } => {
  const c = readActivationCache(ctx.cacheDir, name);
  return { a: makeActivations(c.n, c.layers, c.d, c.data), keys: (c.manifest.rows as { key: string }[]).map((r) => r.key) };
};
for (const c of [{ config: 'chatbot', repr: null }, { config: 'agent', repr: 'schema' }, { config: 'agent', repr: 'flattened' }] as const) await extractCondition(ctx, c);
await extractFirstToken(ctx, 'schema');
await extractFirstToken(ctx, 'flattened');
await ctx.engine.dispose();

// %% [markdown]
// ## Refusal direction (chatbot, extraction split) and Schema Directions per category

// %%
const pairOf = (k: string): string => k.slice(0, k.lastIndexOf(':'));
const isHarm = (k: string): number => (k.endsWith(':harmful') ? 1 : 0);
const ext = new Set(ctx.split.extraction);
const chat = load(promptCacheName({ config: 'chatbot', repr: null }));
const extRows = chat.keys.flatMap((k, i) => (ext.has(pairOf(k)) ? [i] : []));
const labels = chat.keys.map(isHarm);
const r = refusalDirection(chat.a, labels, extRows);
const schema = load(promptCacheName({ config: 'agent', repr: 'schema' }));
const text = load(promptCacheName({ config: 'agent', repr: 'flattened' }));
// the paper's Eq. 2: R_c averages every request of category c (reproduce: --schema-pairs extraction for the split only)
const R = (y: number) => {
  const s = schema.keys.flatMap((k, i) => (isHarm(k) === y ? [i] : []));
  const t = text.keys.flatMap((k, i) => (isHarm(k) === y ? [i] : []));
  const m = matchRows(s.map((i) => schema.keys[i]!), t.map((i) => text.keys[i]!));
  return schemaDirection(schema.a, text.a, m.a.map((i) => s[i]!), m.b.map((i) => t[i]!));
};
const Rh = R(1);
const Rb = R(0);
console.log('per layer 0..L');
console.log(row('‖r‖ (refusal)', directionNorms(r)));
console.log(row('‖R_harmful‖', directionNorms(Rh)));
if (plantedR) {
  const planted = { layers: r.layers, d: r.d, data: Float64Array.from({ length: r.layers * r.d }, (_, i) => plantedR[i % r.d]!) };
  console.log(row('cos(r, planted r)', layerCosines(r, planted)));
}

// %% [markdown]
// ## Figure 3 — cosine of the Schema Direction with the refusal direction, against two baselines

// %%
const rand = randomCosineBand(r, { reps: 1000, seed: 0 });
const perm = permutationCosineBand(chat.a, labels, Rh, extRows, { reps: 300, seed: 0 });
console.log(row('cos(R_harmful, r)', layerCosines(Rh, r)));
console.log(row('cos(R_benign, r)', layerCosines(Rb, r)));
console.log(row('random 2.5 %', rand.lo));
console.log(row('random 97.5 %', rand.hi));
console.log(row('label-permuted 2.5 %', perm.lo));
console.log(row('label-permuted 97.5 %', perm.hi));

// %% [markdown]
// ## Figure 4 — the first generated token's projection on r̂
// Harmful vs benign, JSON schema vs flattened prose, evaluation split. In the paper the schema lines sit below the
// flattened ones from the middle layers on.

// %%
const evalSet = new Set(ctx.split.evaluation);
for (const repr of ['schema', 'flattened'] as const) {
  const f = load(firstTokenCacheName(repr));
  for (const y of [1, 0]) {
    const rows = f.keys.flatMap((k, i) => (evalSet.has(pairOf(k)) && isHarm(k) === y ? [i] : []));
    const s = projectionStats(f.a, r, rows);
    console.log(row(`${y ? 'harmful' : 'benign'} / ${repr} mean`, s.mean));
    console.log(row(`${y ? 'harmful' : 'benign'} / ${repr} sd`, s.sd));
  }
}
