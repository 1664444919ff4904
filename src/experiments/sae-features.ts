/**
 * `reproduce --sae DIR`: the SAE features of the refusal direction and the Schema Directions in each condition of
 * Figures 3–4, from the activation caches `reproduce` wrote:
 *   Figure 3 — the last prompt token with the tools as JSON schemas (prompt.agent.schema) and as flattened prose
 *   (prompt.agent.flattened): R_c is the difference of the two;
 *   Figure 4 — the first generated token in the same two representations (first.schema, first.flattened).
 * Directions: refusal.chatbot (r, what Figures 3–4 measure against), schema.harmful and schema.benign (R_c), taken
 * at the SAE's hidden row. That row should be ℓ*; when it is not, the section says so and still ranks the features
 * of the directions at the SAE's own row (a decoder row lives in that row's space only).
 */
import type { Directions } from '../analysis/direction.ts';
import { directionAt } from '../analysis/direction.ts';
import type { SaeFeaturesSection } from '../analysis/results.ts';
import { readActivationCache } from '../cache/store.ts';
import { SaeEncoder } from '../engine/runtime/sae-encoder.ts';
import { directionFeatures, type ConditionRows, type DirectionFeatures, type NamedDirection } from '../sae/direction-features.ts';
import { hiddenRowOf } from '../sae/hook.ts';
import type { Sae } from '../sae/types.ts';
import { SafekeepError } from '../util/errors.ts';

/** The caches of Figures 3–4, in figure order. */
export const SAE_CONDITIONS = [
  { name: 'prompt.agent.schema', label: 'agent, JSON schema (last prompt token)', figure: 'Figure 3', position: 'last prompt token' },
  { name: 'prompt.agent.flattened', label: 'agent, flattened prose (last prompt token)', figure: 'Figure 3', position: 'last prompt token' },
  { name: 'first.schema', label: 'agent, JSON schema (first generated token)', figure: 'Figure 4', position: 'first generated token' },
  { name: 'first.flattened', label: 'agent, flattened prose (first generated token)', figure: 'Figure 4', position: 'first generated token' },
] as const;

export const SAE_DIRECTIONS = [
  { name: 'refusal.chatbot', label: 'refusal direction r (chatbot)' },
  { name: 'schema.harmful', label: 'Schema Direction R_harmful' },
  { name: 'schema.benign', label: 'Schema Direction R_benign' },
] as const;

export interface SaeFeaturesInput {
  sae: Sae;
  /** where it was read from (shown in the report) */
  source: string;
  cacheDir: string;
  /** the run's directions (reproduce's runDirections) */
  directions: Record<string, Directions>;
  lStar: number;
  /** hidden states per cache row (L+1) */
  layers: number;
  /** pair id → its harmful and benign prompt texts (snippets in the report; absent after `merge`) */
  texts?: ReadonlyMap<string, { harmful: string; benign: string }>;
  top?: number;
  k?: number;
  threads?: number;
}

/** The hidden row an SAE reads, or a SafekeepError naming why it cannot be compared with the run's directions. */
export function saeHiddenRow(sae: Sae, layers: number): number {
  const row = hiddenRowOf(sae.config.hookName, layers - 1);
  if (row === null) throw new SafekeepError(`--sae: the SAE reads ${sae.config.hookName}, not a residual-stream point (hook_resid_pre / hook_resid_post); the refusal and Schema Directions are residual-stream directions`);
  return row;
}

/** Before a run: the SAE reads a residual-stream row of this model, with its width. */
export function checkSae(sae: Sae, numLayers: number, dModel: number): void {
  saeHiddenRow(sae, numLayers + 1);
  if (sae.config.dIn !== dModel) throw new SafekeepError(`--sae: its d_in is ${sae.config.dIn}, the model's d_model is ${dModel}`);
}

const SNIPPET = 160;
const snippet = (s: string): string => (s.length > SNIPPET ? `${s.slice(0, SNIPPET - 1)}…` : s);

export async function saeFeaturesSection(o: SaeFeaturesInput): Promise<SaeFeaturesSection> {
  const row = saeHiddenRow(o.sae, o.layers);
  const dIn = o.sae.config.dIn;
  const directions: NamedDirection[] = SAE_DIRECTIONS.flatMap((d) => {
    const dir = o.directions[d.name];
    if (!dir) return [];
    if (dir.d !== dIn) throw new SafekeepError(`--sae: its d_in is ${dIn}, the model's d_model is ${dir.d}`);
    return [{ ...d, v: directionAt(dir, row) }];
  });
  const conditions: ConditionRows[] = [];
  const meta: SaeFeaturesSection['conditions'] = [];
  for (const c of SAE_CONDITIONS) {
    const cache = readActivationCache(o.cacheDir, c.name);
    const keys = (cache.manifest.rows as { key: string }[]).map((r) => r.key);
    const x = new Float32Array(cache.n * cache.d);
    for (let i = 0; i < cache.n; i++) x.set(cache.data.subarray((i * cache.layers + row) * cache.d, (i * cache.layers + row + 1) * cache.d), i * cache.d);
    conditions.push({ name: c.name, label: c.label, x, keys });
    meta.push({ ...c, n: cache.n });
  }
  // onnxruntime's encode where the graph has the SAE's math (no input normalization), else the TypeScript one
  const encoder = o.sae.config.normalizeActivations === 'none' ? await SaeEncoder.open(o.sae, o.threads ? { threads: o.threads } : {}) : null;
  let panels: DirectionFeatures[];
  try {
    panels = await directionFeatures(o.sae, directions, conditions, { top: o.top ?? 5, k: o.k ?? 3, ...(encoder ? { encodeRows: (b: Float32Array, m: number) => encoder.encode(b, m) } : {}) });
  } finally {
    await encoder?.release();
  }
  const textOf = (key: string): string | undefined => {
    const cut = key.lastIndexOf(':');
    const t = o.texts?.get(key.slice(0, cut));
    return t ? snippet(key.endsWith(':harmful') ? t.harmful : t.benign) : undefined;
  };
  for (const p of panels) {
    for (const f of [...p.byCosine, ...p.byAttribution]) {
      f.top = f.top.map((t) => {
        const text = textOf(t.key);
        return text === undefined ? t : { ...t, text };
      });
    }
  }
  return {
    sae: o.source, hook: o.sae.config.hookName ?? `hidden[${row}]`, hiddenRow: row, dSae: o.sae.config.dSae, top: o.top ?? 5, k: o.k ?? 3,
    conditions: meta, directions: directions.map(({ name, label }) => ({ name, label })), panels,
    ...(row !== o.lStar ? { note: `The SAE reads hidden[${row}], but ℓ* = ${o.lStar}: its features are those of the directions at hidden[${row}], not at ℓ*. Give an SAE trained at ℓ* to read the features of the directions the tables use.` } : {}),
  };
}
