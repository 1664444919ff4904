/**
 * What a steering sweep runs with, read from the extraction caches: ℓ* (given, or chosen as `reproduce` chooses
 * it), the unit direction R̂ at ℓ*, mean ‖hidden[ℓ*]‖ (the scale of a relative α) and the conditions — computed
 * identically by one process and by every shard.
 */
import { readFileSync } from 'node:fs';
import { makeActivations, type Activations } from '../../analysis/activations.ts';
import { chooseLayerByCV } from '../../analysis/crossval.ts';
import { directionAt, refusalDirection } from '../../analysis/direction.ts';
import type { LayerRule, SchemaDirectionPairs } from '../../analysis/results.ts';
import { auroc } from '../../analysis/auroc.ts';
import { projections } from '../../analysis/projection.ts';
import { peakLayer } from '../../analysis/analyze.ts';
import { matchRows, schemaDirection } from '../../analysis/schema-direction.ts';
import { readActivationCache } from '../../cache/store.ts';
import { loadCheckpoint } from '../../checkpoint/load.ts';
import type { Family } from '../../checkpoint/types.ts';
import { groupMap } from '../../data/split.ts';
import type { Pair } from '../../data/types.ts';
import type { SamplingSettings, SteerPositions } from '../../engine/types.ts';
import { callFormatOf, type CallFormat } from '../../outcome/types.ts';
import type { Sae } from '../../sae/types.ts';
import { SafekeepError } from '../../util/errors.ts';
import { directionFromFile } from '../directions-file.ts';
import { promptCacheName, type ContextOptions, type ExtractContext } from '../extract.ts';
import type { AlphaSpec, InterventionSet, SteerCondition } from './conditions.ts';

/** R̂: a Schema Direction, the chatbot refusal direction, or a vector from a file (JSON or directions.safetensors) */
export type DirectionChoice = 'schema-harmful' | 'schema-benign' | 'refusal' | { file: string };

export interface SteerOptions extends ContextOptions {
  alphas: AlphaSpec[];
  layer: 'auto' | number;
  direction: DirectionChoice;
  maxNewTokens: number;
  /** which requests to steer (default both) */
  requests?: ReadonlyArray<'harmful' | 'benign'>;
  /** steer every prompt and generated position ('all', default) or generated tokens only */
  positions?: SteerPositions;
  /** ℓ* rule for --layer auto (default 'cv') */
  layerRule?: LayerRule;
  /** Schema Direction pairs (default 'all') */
  schemaPairs?: SchemaDirectionPairs;
  /** intervention sets, each one more condition after the α rows */
  interventionSets?: readonly InterventionSet[];
  /** sampled decoding (with its seed; absent = greedy) and answers per request (default 1; above 1 needs sampling) */
  sampling?: SamplingSettings;
  samples?: number;
  /** a sweep by SAE feature beside the sweep by direction: the dictionary (at hidden[ℓ*]) and where it came from */
  sae?: { sae: Sae; source: string };
}

function acts(ctx: ExtractContext, name: string): { a: Activations; keys: string[] } {
  const c = readActivationCache(ctx.cacheDir, name);
  return { a: makeActivations(c.n, c.layers, c.d, c.data), keys: (c.manifest.rows as { key: string }[]).map((r) => r.key) };
}

const pairOf = (key: string): string => key.slice(0, key.lastIndexOf(':'));
const labelOf = (key: string): number => (key.endsWith(':harmful') ? 1 : 0);

/** ℓ* by the same rules as `reproduce`: CV over groups on the chatbot extraction split, or peak chatbot AUROC. */
function autoLayer(ctx: ExtractContext, chat: { a: Activations; keys: string[] }, rule: LayerRule): number {
  const ext = new Set(ctx.split.extraction);
  const rows = chat.keys.flatMap((k, i) => (ext.has(pairOf(k)) ? [i] : []));
  const labels = chat.keys.map(labelOf);
  if (rule === 'peak') {
    const evalRows = chat.keys.flatMap((k, i) => (ext.has(pairOf(k)) ? [] : [i]));
    const r = refusalDirection(chat.a, labels, rows);
    const y = evalRows.map((i) => labels[i]!);
    return peakLayer(Array.from({ length: chat.a.layers }, (_, l) => auroc(projections(chat.a, r, l, evalRows), y)));
  }
  const group = groupMap(ctx.set.pairs);
  return chooseLayerByCV(chat.a, labels, chat.keys.map((k) => group.get(pairOf(k)) ?? pairOf(k)), rows, { k: 5, seed: 0 }).layer;
}

/** The unit steering direction at `layer`. [d] */
function steeringVector(ctx: ExtractContext, choice: DirectionChoice, layer: number, d: number, schemaPairs: SchemaDirectionPairs): { v: Float64Array; name: string } {
  const ext = new Set(ctx.split.extraction);
  if (typeof choice === 'object' && /\.safetensors(#.*)?$/.test(choice.file)) return directionFromFile(choice.file, layer, d);
  if (typeof choice === 'object') {
    let parsed: unknown;
    try { parsed = JSON.parse(readFileSync(choice.file, 'utf8')); } catch (e) { throw new SafekeepError(`${choice.file}: cannot read direction (${(e as Error).message})`); }
    const vec = (parsed as { vector?: unknown }).vector;
    if (!Array.isArray(vec) || vec.length !== d || !vec.every((x) => typeof x === 'number' && Number.isFinite(x))) {
      throw new SafekeepError(`${choice.file}: expected {"vector": [${d} numbers]}`);
    }
    return { v: Float64Array.from(vec as number[]), name: `file ${choice.file}` };
  }
  if (choice === 'refusal') {
    const chat = acts(ctx, promptCacheName({ config: 'chatbot', repr: null }));
    const rows = chat.keys.flatMap((k, i) => (ext.has(pairOf(k)) ? [i] : []));
    return { v: directionAt(refusalDirection(chat.a, chat.keys.map(labelOf), rows), layer), name: 'chatbot refusal direction' };
  }
  const y = choice === 'schema-harmful' ? 1 : 0;
  const s = acts(ctx, promptCacheName({ config: 'agent', repr: 'schema' }));
  const t = acts(ctx, promptCacheName({ config: 'agent', repr: 'flattened' }));
  // Schema Direction over every pair (the paper's Eq. 2) or the extraction split only
  const inR = (pairId: string) => schemaPairs === 'all' || ext.has(pairId);
  const sRows = s.keys.flatMap((k, i) => (inR(pairOf(k)) && labelOf(k) === y ? [i] : []));
  const tRows = t.keys.flatMap((k, i) => (inR(pairOf(k)) && labelOf(k) === y ? [i] : []));
  const m = matchRows(sRows.map((i) => s.keys[i]!), tRows.map((i) => t.keys[i]!));
  const R = schemaDirection(s.a, t.a, m.a.map((i) => sRows[i]!), m.b.map((i) => tRows[i]!));
  return { v: directionAt(R, layer), name: `Schema Direction (${y ? 'harmful' : 'benign'} requests, ${schemaPairs === 'all' ? 'all pairs' : 'extraction split'})` };
}

function callFormat(ctx: ExtractContext, family: Family): CallFormat {
  const t = ctx.tok.family;
  return t === 'llama3' || t === 'qwen' || t === 'mistral' ? t : callFormatOf[family];
}

/** The sweep's setup from the caches: ℓ*, the unit direction R̂, mean ‖hidden[ℓ*]‖, α values — the same in every shard. */
export interface SteerSetup {
  layer: number;
  meanNorm: number;
  /** R̂. [d] */
  unit: Float32Array;
  directionName: string;
  alphas: number[];
  /** the α rows, then one per intervention set */
  conditions: SteerCondition[];
  format: CallFormat;
  /** evaluation pairs, in set order */
  pairs: Pair[];
  positions: SteerPositions;
  /** the protocol values of the steering run (docs/protocol.md), recorded in the manifest */
  protocol: Record<string, unknown>;
}

/** Caches the direction and ℓ* come from (reused when `reproduce` or `extract` already built them). */
export const STEER_CONDITIONS = [{ config: 'chatbot', repr: null }, { config: 'agent', repr: 'schema' }, { config: 'agent', repr: 'flattened' }] as const;

export async function steerSetup(ctx: ExtractContext, o: SteerOptions, sets: ReadonlyArray<InterventionSet & { hash: string }>): Promise<SteerSetup> {
  const schema = acts(ctx, promptCacheName({ config: 'agent', repr: 'schema' }));
  const layer = o.layer === 'auto' ? autoLayer(ctx, acts(ctx, promptCacheName({ config: 'chatbot', repr: null })), o.layerRule ?? 'cv') : o.layer;
  if (!Number.isInteger(layer) || layer < 0 || layer > ctx.engine.numLayers) {
    throw new SafekeepError(`--layer ${layer}: must be auto or 0..${ctx.engine.numLayers}`);
  }
  const d = ctx.engine.dModel;
  const { v, name: directionName } = steeringVector(ctx, o.direction, layer, d, o.schemaPairs ?? 'all');
  let vn = 0;
  for (const x of v) vn += x * x;
  if (!(vn > 0)) throw new SafekeepError(`steering direction at layer ${layer} is zero`);
  const unit = Float32Array.from(v, (x) => x / Math.sqrt(vn));
  // mean ‖hidden[ℓ*]‖ over evaluation requests in the agent/schema format: the residual scale of α
  const evalSet = new Set(ctx.split.evaluation);
  const evalRows = schema.keys.flatMap((k, i) => (evalSet.has(pairOf(k)) ? [i] : []));
  let meanNorm = 0;
  for (const i of evalRows) {
    let s = 0;
    const off = (i * schema.a.layers + layer) * d;
    for (let j = 0; j < d; j++) s += schema.a.data[off + j]! ** 2;
    meanNorm += Math.sqrt(s) / evalRows.length;
  }
  const alphas = o.alphas.map((a) => (a.kind === 'absolute' ? a.value : a.value * meanNorm));
  const conditions: SteerCondition[] = [...alphas.map((alpha) => ({ alpha })), ...sets.map((set) => ({ alpha: 0, set }))];
  const ckpt = await loadCheckpoint(ctx.modelDir);
  const positions: SteerPositions = o.positions ?? 'all';
  const protocol = {
    positions, layer, layerChoice: o.layer === 'auto' ? `auto (--layer-rule ${o.layerRule ?? 'cv'})` : 'given', schemaPairs: o.schemaPairs ?? 'all', thinking: ctx.baseManifest.thinking,
    // by name and content hash, not path: shards on other machines may read the same file from elsewhere
    ...(sets.length ? {
      interventions: sets.map((s) => ({
        label: s.label, sha256: s.hash,
        list: s.interventions.map((iv) => ({ layer: iv.layer, kind: iv.kind, ...(iv.alpha !== undefined ? { alpha: iv.alpha } : {}), positions: iv.positions ?? 'all' })),
      })),
    } : {}),
    ...(o.sampling ? { sampling: { ...o.sampling, samples: o.samples ?? 1 } } : {}),
  };
  return { layer, meanNorm, unit, directionName, alphas, conditions, format: callFormat(ctx, ckpt.config.family), pairs: ctx.set.pairs.filter((p) => evalSet.has(p.id)), positions, protocol };
}
