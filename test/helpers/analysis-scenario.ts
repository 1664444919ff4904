/**
 * A synthetic "paper scenario" for analysis and report tests: a chatbot configuration with a refusal direction u
 * planted at layers 3–4, agent configurations whose JSON schemas push harmful requests by −suppression·u (and
 * every request by a common schema offset v ⟂-ish u), flattened prose that does not, and first-token activations.
 * The construction implies: AUROC(chatbot) > AUROC(+tools, schema); flattened ≈ chatbot; cos(R_harmful, r) < 0
 * outside the random band; cos(R_benign, r) ≈ 0.
 */
import type { AnalysisInput, ConfigActivations } from '../../src/analysis/analyze.ts';
import { planted, randomUnit } from './analysis-synthetic.ts';

export const SCENARIO = { layers: 7, d: 48, pairs: 80, planted: [3, 4] as const, strength: [0, 0, 2, 10, 10, 2, 0] };

/** Planted strength per layer: 10 at the two middle layers, 2 next to them (the SCENARIO default for 7 layers). */
export function plantedStrength(layers: number): number[] {
  const m = Math.floor(layers / 2);
  return Array.from({ length: layers }, (_, l) => (l === m || l === m + 1 ? 10 : l === m - 1 || l === m + 2 ? 2 : 0));
}

export function scenarioInput(opts: { suppression?: number; reps?: number; layers?: number; d?: number; pairs?: number } = {}): AnalysisInput {
  const layers = opts.layers ?? SCENARIO.layers;
  const d = opts.d ?? SCENARIO.d;
  const pairs = opts.pairs ?? SCENARIO.pairs;
  const strength = opts.layers === undefined ? SCENARIO.strength : plantedStrength(layers);
  const supp = opts.suppression ?? 8;
  const u = randomUnit(d, 77);
  const v = randomUnit(d, 78).map((x) => 2 * x);
  const isPlanted = (l: number) => strength[l]! >= 10;
  const split = (n: number) => ({
    extraction: Array.from({ length: n }, (_, i) => i).filter((i) => i < n / 2),
    evaluation: Array.from({ length: n }, (_, i) => i).filter((i) => i >= n / 2),
  });
  const make = (name: string, label: string, seed: number, schema: boolean, partial = 1): ConfigActivations => {
    const p = planted({
      pairs,
      layers,
      d,
      strength,
      seed,
      u,
      shift: schema
        ? (l, y) => Array.from({ length: d }, (_, j) => v[j]! - (y === 1 && isPlanted(l) ? partial * supp * u[j]! : 0))
        : undefined,
    });
    return { name, label, acts: p.acts, labels: p.labels, pairIds: p.pairIds, ...split(2 * pairs) };
  };
  const chatbot = make('chatbot', 'Chatbot', 1, false);
  const schema = make('schema', 'JSON schema tools', 5, true);
  const flattened = make('flattened', 'Flattened prose tools', 6, false);
  const firstToken = (['schema', 'flattened'] as const).flatMap((rep, k) => {
    const p = planted({ pairs: 30, layers, d, strength, seed: 40 + k, u, shift: rep === 'schema' ? (l, y) => (y === 1 && isPlanted(l) ? u.map((x) => -supp * x) : null) : undefined });
    return (['harmful', 'benign'] as const).map((category) => ({
      category,
      representation: rep,
      acts: p.acts,
      rows: Array.from({ length: p.acts.n }, (_, i) => i).filter((i) => p.labels[i] === (category === 'harmful' ? 1 : 0)),
    }));
  });
  return {
    model: 'synthetic-planted',
    synthetic: true,
    chatbot,
    table1: [make('agent-role', '+ role', 2, false), make('agent-instructions', '+ instructions', 3, true, 0.4), make('agent-full', '+ tools (full agent)', 4, true), make('chatbot-long', 'Chatbot (long)', 9, false)],
    table2: [schema, flattened, make('pseudoword', 'Pseudoword schema', 7, true, 0.9)],
    schemaPair: { schema, text: flattened },
    firstToken,
    manifest: { note: 'synthetic activations for tests', seed: 1 },
    options: { reps: opts.reps ?? 200, randomReps: 1000, permutationReps: 200 },
  };
}
