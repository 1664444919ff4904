// %% [markdown]
// # 1. Locating the source — Tables 1 and 2 (Pan et al. 2026, §3)
// A chatbot-derived refusal direction separates harmful from benign requests in the chatbot format. Does it still
// when the same requests are wrapped in an agent context? We add the parts of the agent prompt one at a time
// (role, tool-use instructions, tool specifications), control for length (`chatbot-long`), and then change only
// how the tools are represented (JSON schema, flattened prose, pseudowords).
//
// Runs on the planted SYNTHETIC model by default (see notebooks/setup.ts); `--model DIR` for a real one.

// %%
import { setup, row } from './setup.ts';
import { extractCondition, promptCacheName, conditionName, type Condition } from '../src/experiments/extract.ts';
import { readActivationCache } from '../src/cache/store.ts';
import { makeActivations, type Activations } from '../src/analysis/activations.ts';
import { refusalDirection } from '../src/analysis/direction.ts';
import { projections } from '../src/analysis/projection.ts';
import { auroc } from '../src/analysis/auroc.ts';
import { chooseLayerByCV } from '../src/analysis/crossval.ts';
import { bootstrapAuroc } from '../src/analysis/bootstrap.ts';
import { groupMap } from '../src/data/split.ts';

const { ctx } = await setup();

// %% [markdown]
// ## Cache the final-prompt-token residual stream for every configuration
// One row per request (harmful and benign of each pair), all layers: `[n, L+1, d_model]`.

// %%
const conditions: Condition[] = [
  { config: 'chatbot', repr: null }, { config: '+role', repr: null }, { config: '+instructions', repr: null },
  { config: 'agent', repr: 'schema' }, { config: 'chatbot-long', repr: null },
  { config: 'agent', repr: 'flattened' }, { config: 'agent', repr: 'pseudoword' },
];
const acts = new Map<string, { a: Activations; keys: string[] }>();
for (const c of conditions) {
  await extractCondition(ctx, c);
  const cache = readActivationCache(ctx.cacheDir, promptCacheName(c));
  acts.set(conditionName(c), { a: makeActivations(cache.n, cache.layers, cache.d, cache.data), keys: (cache.manifest.rows as { key: string }[]).map((r) => r.key) });
}
await ctx.engine.dispose();

// %% [markdown]
// ## The chatbot refusal direction, and ℓ* chosen on the extraction split only
// r(ℓ) = mean(h | harmful) − mean(h | benign) over extraction-split chatbot prompts. ℓ* = the layer whose direction
// separates held-out extraction folds best (5-fold CV over groups: pairs of one scenario share a fold, as they share
// a side of the split). The evaluation split is not looked at (`--layer-rule peak` in reproduce is the paper's rule).

// %%
const chat = acts.get('chatbot')!;
const pairOf = (k: string): string => k.slice(0, k.lastIndexOf(':'));
const labels = chat.keys.map((k) => (k.endsWith(':harmful') ? 1 : 0));
const ext = new Set(ctx.split.extraction);
const extRows = chat.keys.flatMap((k, i) => (ext.has(pairOf(k)) ? [i] : []));
const evalRows = chat.keys.flatMap((k, i) => (ext.has(pairOf(k)) ? [] : [i]));
const r = refusalDirection(chat.a, labels, extRows);
const group = groupMap(ctx.set.pairs);
const groupOf = (k: string): string => group.get(pairOf(k)) ?? pairOf(k);
const choice = chooseLayerByCV(chat.a, labels, chat.keys.map(groupOf), extRows, { k: 5, seed: 0 });
console.log(row('CV AUROC per layer', choice.cvAuroc));
console.log(`ℓ* = ${choice.layer}`);

// %% [markdown]
// ## Table 1 — the same chatbot direction scores every configuration (evaluation split)
// AUROC of the refusal score h·r̂(ℓ) (positive class = harmful), per layer, and at ℓ* with a 95 % paired bootstrap
// interval over groups of pairs (scenarios).

// %%
const table = (names: string[]): void => {
  for (const name of names) {
    const x = acts.get(name)!;
    const perLayer = Array.from({ length: x.a.layers }, (_, l) => auroc(projections(x.a, r, l, evalRows), evalRows.map((i) => labels[i]!)));
    console.log(row(name, perLayer));
  }
  const sets = names.map((name) => ({
    scores: projections(acts.get(name)!.a, r, choice.layer, evalRows),
    labels: evalRows.map((i) => labels[i]!),
    pairIds: evalRows.map((i) => groupOf(chat.keys[i]!)),
  }));
  const b = bootstrapAuroc(sets, { reps: 500, seed: 0 });
  names.forEach((name, i) => {
    const e = b.estimates[i]!;
    const dlt = b.differences[i]!;
    console.log(`  ℓ*=${choice.layer} ${name.padEnd(18)} AUROC ${e.auroc.toFixed(3)} [${e.lo.toFixed(3)}, ${e.hi.toFixed(3)}]  Δ vs chatbot ${dlt.diff.toFixed(3)} [${dlt.lo.toFixed(3)}, ${dlt.hi.toFixed(3)}]`);
  });
};
console.log('Table 1 (rows: configuration; columns: layer 0..L)');
table(['chatbot', '+role', '+instructions', 'agent.schema', 'chatbot-long']);

// %% [markdown]
// ## Table 2 — only the representation of the tools changes
// Flattened prose keeps the tools' content without JSON syntax; pseudowords keep the JSON structure without the
// content. In the paper (Llama-3.1-8B): 0.927 → 0.740 with schemas → 0.885 flattened.

// %%
console.log('Table 2');
table(['chatbot', 'agent.schema', 'agent.flattened', 'agent.pseudoword']);
