/**
 * The paper's causal test (Table 3): on evaluation-split requests in the full agent format (JSON schemas), subtract
 * α·R̂(ℓ*) from hidden[ℓ*] at every prompt position and every decoding step, generate greedily, and classify each
 * output as refusal / valid harmful tool call / invalid. R̂ is by default the unit harmful-request Schema Direction
 * (mean of h_schema − h_flattened over harmful extraction requests), which points against refusal, so subtracting it
 * pushes towards refusal. The same sweep runs on benign requests (how often steering breaks legitimate tool use).
 *
 * Writes results/<model>/steering/: generations.<requests>.alpha<α>.jsonl (every output with its label and reasons),
 * table3.md|csv|json, and merges the sweep into results/<model>/results.json so the report shows Table 3 and its
 * stacked-bar figure.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeActivations, type Activations } from '../analysis/activations.ts';
import { chooseLayerByCV } from '../analysis/crossval.ts';
import { directionAt, refusalDirection } from '../analysis/direction.ts';
import type { AnalysisResults, LayerRule, SchemaDirectionPairs, SteeringResults, SteeringRow } from '../analysis/results.ts';
import { auroc } from '../analysis/auroc.ts';
import { projections } from '../analysis/projection.ts';
import { peakLayer } from '../analysis/analyze.ts';
import { groupMap } from '../data/split.ts';
import type { SteerPositions } from '../engine/types.ts';
import { matchRows, schemaDirection } from '../analysis/schema-direction.ts';
import { readActivationCache } from '../cache/store.ts';
import { loadCheckpoint } from '../checkpoint/load.ts';
import type { Family } from '../checkpoint/types.ts';
import type { Pair } from '../data/types.ts';
import { writeFileAtomic } from '../report/atomic.ts';
import { buildTables, tableMarkdown, toCsv } from '../report/tables.ts';
import { writeReport } from '../report/write-report.ts';
import { SafekeepError } from '../util/errors.ts';
import { ItemProgress } from '../util/progress.ts';
import { classifyOutput } from './outcome/classify.ts';
import { callFormatOf, type CallFormat, type OutcomeLabel } from './outcome/types.ts';
import { extractCondition, openContext, promptCacheName, type ContextOptions, type ExtractContext } from './extract.ts';

/** A steering strength: absolute (residual units, as the engine subtracts it) or relative to mean ‖hidden[ℓ*]‖. */
export type AlphaSpec = { kind: 'absolute'; value: number } | { kind: 'relative'; value: number };

/** `0,4,8,12` (absolute) or `0,0.5x,1x` (× mean ‖hidden[ℓ*]‖); forms may be mixed. */
export function parseAlphas(s: string): AlphaSpec[] {
  return s.split(',').map((t) => {
    const rel = t.trim().endsWith('x');
    const v = Number(rel ? t.trim().slice(0, -1) : t.trim());
    if (!t.trim() || !Number.isFinite(v)) throw new SafekeepError(`--alphas: '${t}' is not a number (use 4 or 0.5x)`);
    return rel ? { kind: 'relative', value: v } : { kind: 'absolute', value: v };
  });
}

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
}

export interface SteerGeneration {
  pairId: string;
  requests: 'harmful' | 'benign';
  alpha: number;
  text: string;
  generatedIds: number[];
  finish: string;
  label: OutcomeLabel;
  reasons: string[];
}

export interface SteerResult {
  outDir: string;
  /** results/<model>/report.html, re-rendered with Table 3 */
  report: string;
  layer: number;
  meanNorm: number;
  /** the unit steering direction R̂ at ℓ*. [d] */
  direction: Float32Array;
  sweeps: SteeringResults[];
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
  // Schema Direction over every pair (the paper's Eq. 2) or the extraction split only
  const inR = (pairId: string) => schemaPairs === 'all' || ext.has(pairId);
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

export async function steerSweep(o: SteerOptions): Promise<SteerResult> {
  const ctx = await openContext(o);
  const positions: SteerPositions = o.positions ?? 'all';
  const outDir = join(ctx.cacheDir, '..', 'steering');
  mkdirSync(outDir, { recursive: true });
  let layer = 0;
  let meanNorm = 0;
  let unit = new Float32Array(0);
  const sweeps: SteeringResults[] = [];
  try {
    // the caches the direction and ℓ* come from (reused when `reproduce` already built them)
    for (const c of [{ config: 'chatbot', repr: null }, { config: 'agent', repr: 'schema' }, { config: 'agent', repr: 'flattened' }] as const) {
      await extractCondition(ctx, c);
    }
    const schema = acts(ctx, promptCacheName({ config: 'agent', repr: 'schema' }));
    layer = o.layer === 'auto' ? autoLayer(ctx, acts(ctx, promptCacheName({ config: 'chatbot', repr: null })), o.layerRule ?? 'cv') : o.layer;
    if (!Number.isInteger(layer) || layer < 0 || layer > ctx.engine.numLayers) {
      throw new SafekeepError(`--layer ${layer}: must be auto or 0..${ctx.engine.numLayers}`);
    }
    const d = ctx.engine.dModel;
    const { v, name: directionName } = steeringVector(ctx, o.direction, layer, d, o.schemaPairs ?? 'all');
    let vn = 0;
    for (const x of v) vn += x * x;
    if (!(vn > 0)) throw new SafekeepError(`steering direction at layer ${layer} is zero`);
    unit = Float32Array.from(v, (x) => x / Math.sqrt(vn));
    // mean ‖hidden[ℓ*]‖ over evaluation requests in the agent/schema format: the residual scale of α
    const evalSet = new Set(ctx.split.evaluation);
    const evalRows = schema.keys.flatMap((k, i) => (evalSet.has(pairOf(k)) ? [i] : []));
    for (const i of evalRows) {
      let s = 0;
      const off = (i * schema.a.layers + layer) * d;
      for (let j = 0; j < d; j++) s += schema.a.data[off + j]! ** 2;
      meanNorm += Math.sqrt(s) / evalRows.length;
    }
    const alphas = o.alphas.map((a) => (a.kind === 'absolute' ? a.value : a.value * meanNorm));

    const ckpt = await loadCheckpoint(ctx.modelDir);
    const format = callFormat(ctx, ckpt.config.family);
    const pairs = ctx.set.pairs.filter((p) => evalSet.has(p.id));
    for (const kind of o.requests ?? (['harmful', 'benign'] as const)) {
      const rows: SteeringRow[] = [];
      const prompts = pairs.map((p) => ctx.builder.render(p[kind].prompt, p.tools, 'agent', 'schema'));
      for (const alpha of alphas) {
        const gens = await generateAll(ctx, pairs, prompts.map((p) => p.ids!), kind, alpha, layer, unit, o.maxNewTokens, format, outDir, positions);
        const counts = { refusal: 0, valid: 0, invalid: 0 };
        for (const g of gens) counts[g.label]++;
        rows.push({ alpha: round(alpha), alphaRelative: round(alpha / meanNorm), n: gens.length, counts });
        process.stderr.write(`steer ${kind} α=${alpha.toFixed(3)}: refusal ${counts.refusal}, valid ${counts.valid}, invalid ${counts.invalid} of ${gens.length}\n`);
      }
      sweeps.push({ layer, direction: directionName, requests: kind, positions, rows });
    }
  } finally {
    await ctx.engine.dispose();
  }
  const res = writeTable3(ctx, outDir, sweeps, {
    positions, layer, layerChoice: o.layer === 'auto' ? `auto (--layer-rule ${o.layerRule ?? 'cv'})` : 'given', schemaPairs: o.schemaPairs ?? 'all', thinking: ctx.baseManifest.thinking,
  });
  const files = await writeReport(join(ctx.cacheDir, '..'), res);
  return { outDir, report: files.html, layer, meanNorm, direction: unit, sweeps };
}

const round = (x: number): number => Math.round(x * 1e6) / 1e6;

/** Generations for one (requests, α), cached as JSONL keyed by the exact inputs, so a rerun costs nothing. */
async function generateAll(
  ctx: ExtractContext, pairs: readonly Pair[], ids: number[][], kind: 'harmful' | 'benign', alpha: number, layer: number,
  unit: Float32Array, maxNewTokens: number, format: CallFormat, outDir: string, positions: SteerPositions,
): Promise<SteerGeneration[]> {
  // 'generated' gets its own files so both sweeps can sit side by side
  const file = join(outDir, `generations.${kind}.alpha${round(alpha)}${positions === 'generated' ? '.generated' : ''}.jsonl`);
  const key = JSON.stringify({ ids: ids.map((x) => x.length), pairs: pairs.map((p) => p.id), layer, alpha, maxNewTokens, dir: Array.from(unit.slice(0, 8)), model: ctx.baseManifest.model, positions });
  if (existsSync(file)) {
    const lines = readFileSync(file, 'utf8').trim().split('\n');
    const head = JSON.parse(lines[0]!) as { key?: string };
    if (head.key === key) return lines.slice(1).map((l) => JSON.parse(l) as SteerGeneration);
  }
  const out: SteerGeneration[] = [];
  const progress = new ItemProgress(`steer ${kind} α=${round(alpha)}`, pairs.length);
  const batch = 8;
  for (let s = 0; s < pairs.length; s += batch) {
    const chunk = ids.slice(s, s + batch);
    const res = await ctx.engine.generate(chunk, {
      maxNewTokens,
      ...(alpha !== 0 ? { steer: { layer, vector: unit, alpha, positions } } : {}),
    });
    res.forEach((r, i) => {
      const p = pairs[s + i]!;
      const text = ctx.tok.decode(r.generatedIds);
      const oc = classifyOutput(text, p.tools, format);
      out.push({ pairId: p.id, requests: kind, alpha: round(alpha), text, generatedIds: r.generatedIds, finish: r.finish, label: oc.label, reasons: oc.reasons });
    });
    progress.add(chunk.length);
  }
  progress.finish();
  writeFileAtomic(file, [JSON.stringify({ key }), ...out.map((g) => JSON.stringify(g))].join('\n') + '\n');
  return out;
}

/** Table 3 into steering/; returns the run's results (from `reproduce` when present) with the sweep merged in. */
function writeTable3(ctx: ExtractContext, outDir: string, sweeps: SteeringResults[], protocol: Record<string, unknown>): AnalysisResults {
  const resultsPath = join(ctx.cacheDir, '..', 'results.json');
  const base: AnalysisResults | null = existsSync(resultsPath) ? (JSON.parse(readFileSync(resultsPath, 'utf8')) as AnalysisResults) : null;
  const res: AnalysisResults = base ?? minimalResults(ctx, sweeps[0]!.layer);
  res.steering = sweeps;
  // the protocol values of the steering run (docs/protocol.md)
  res.manifest = { ...res.manifest, steeringProtocol: protocol };
  const t = buildTables(res).find((x) => x.name === 'table3-steering')!;
  writeFileAtomic(join(outDir, 'table3.md'), tableMarkdown(t));
  writeFileAtomic(join(outDir, 'table3.csv'), toCsv(t.columns, t.rows));
  writeFileAtomic(join(outDir, 'table3.json'), JSON.stringify(t.json, null, 2) + '\n');
  return res;
}

/** Results shell for a model that has no `reproduce` run yet (the report then shows Table 3 only). */
function minimalResults(ctx: ExtractContext, layer: number): AnalysisResults {
  const L1 = ctx.engine.numLayers + 1;
  return {
    version: 1, model: ctx.modelName, layers: L1, dModel: ctx.engine.dModel, synthetic: existsSync(join(ctx.modelDir, 'PLANTED.json')),
    lStar: { layer, method: 'given by the steering run', cvAuroc: [] }, bootstrap: { reps: 0, seed: 0, level: 0.95 },
    curves: [], table1: [], table2: [], norms: { directions: [], meanHidden: [] }, manifest: ctx.baseManifest,
  };
}
