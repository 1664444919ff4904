/**
 * The paper's causal test (Table 3): on evaluation-split requests in the full agent format (JSON schemas), subtract
 * α·R̂(ℓ*) from hidden[ℓ*] at every prompt position and every decoding step, generate greedily, and classify each
 * output as refusal / valid harmful tool call / invalid. R̂ is by default the unit harmful-request Schema Direction
 * (mean of h_schema − h_flattened over harmful extraction requests), which points against refusal, so subtracting it
 * pushes towards refusal. The same sweep runs on benign requests (how often steering breaks legitimate tool use).
 *
 * Besides the α sweep (the shorthand: add −α·R̂ at ℓ*), each intervention set (`steer --intervene FILE.json`, the
 * format `generate --intervene` reads) is one more condition on the same prompts with the same scoring, labelled by
 * the file's name.
 *
 * Each (requests, condition) runs as a harness task (src/harness/generation.ts: fixed batches, greedy, classified).
 * Writes results/<model>/steering/: generations.<requests>.alpha<α>.jsonl (every output with its label and reasons),
 * generations.<requests>.intervene-<label>.jsonl per intervention set, beside each its per-sample log (log.<same>), table3.md|csv|json, and merges the sweep into
 * results/<model>/results.json so the report shows Table 3 and its stacked-bar figure.
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
import type { Intervention, SteerPositions } from '../engine/types.ts';
import { interventionInputs } from '../engine/run/batch.ts';
import { canonicalJson } from '../data/jsonfile.ts';
import { matchRows, schemaDirection } from '../analysis/schema-direction.ts';
import { directionFromFile } from './directions-file.ts';
import { cacheIsComplete, readActivationCache } from '../cache/store.ts';
import { loadCheckpoint } from '../checkpoint/load.ts';
import type { Family } from '../checkpoint/types.ts';
import type { Pair } from '../data/types.ts';
import { writeFileAtomic } from '../util/atomic.ts';
import { buildTables, tableMarkdown, toCsv } from '../report/tables.ts';
import { writeReport } from '../report/write-report.ts';
import { SafekeepError } from '../util/errors.ts';
import { ItemProgress } from '../util/progress.ts';
import { generationTask, type GeneratedRow, type GenerationBatch } from '../harness/generation.ts';
import { writeEvalLog, type SampleLog } from '../harness/log.ts';
import { runTask, type Task } from '../harness/runner.ts';
import { Limiter } from '../util/limit.ts';
import { callFormatOf, type CallFormat, type OutcomeLabel } from '../outcome/types.ts';
import {
  extractCondition, openContext, promptCacheName, renderRows, shardIdentity, type ContextOptions, type ExtractContext, type ShardSummary,
} from './extract.ts';
import { sha256Hex } from '../util/hash.ts';
import { ShardRun } from '../util/shard-run.ts';
import { selectShard, type Shard } from '../util/shard.ts';

/** A steering strength: absolute (residual units, as the engine subtracts it) or relative to mean ‖hidden[ℓ*]‖. */
type AlphaSpec = { kind: 'absolute'; value: number } | { kind: 'relative'; value: number };

/** `0,4,8,12` (absolute) or `0,0.5x,1x` (× mean ‖hidden[ℓ*]‖); forms may be mixed. */
export function parseAlphas(s: string): AlphaSpec[] {
  return s.split(',').map((t) => {
    const rel = t.trim().endsWith('x');
    const num = (rel ? t.trim().slice(0, -1) : t).trim(); // 'x' alone would be Number('') = 0
    const v = Number(num);
    if (!num || !Number.isFinite(v)) throw new SafekeepError(`--alphas: '${t}' is not a number (use 4 or 0.5x)`);
    return rel ? { kind: 'relative', value: v } : { kind: 'absolute', value: v };
  });
}

export type DirectionChoice = 'schema-harmful' | 'schema-benign' | 'refusal' | { file: string };

/** An intervention set run as one condition of the sweep (read from FILE.json by the CLI). */
export interface InterventionSet {
  /** the row's label: the file's name without `.json` */
  label: string;
  /** where it was read from (named in errors) */
  file: string;
  interventions: Intervention[];
}

/** One condition of the sweep: the shorthand at strength α, or an intervention set (α = 0: no shorthand on top). */
interface SteerCondition {
  alpha: number;
  set?: { label: string; hash: string; interventions: Intervention[] };
}

/** sha256 of an intervention set's content (every vector value): a changed file is a different condition. */
export function interventionSetHash(list: readonly Intervention[]): string {
  return sha256Hex(canonicalJson(list.map((iv) => ({
    layer: iv.layer, kind: iv.kind, vector: Array.from(iv.vector, Number), alpha: iv.alpha ?? null, positions: iv.positions ?? 'all',
  }))));
}

/** `label=sha256[:12]` per set: how shard records name the sets (merge shows it when shards differ). */
const setsIdentity = (sets: ReadonlyArray<{ label: string; hash: string }>): string =>
  sets.length ? sets.map((s) => `${s.label}=${s.hash.slice(0, 12)}`).join(',') : 'none';

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
}

interface SteerGeneration {
  pairId: string;
  requests: 'harmful' | 'benign';
  alpha: number;
  /** the intervention set's label (absent on α rows) */
  condition?: string;
  text: string;
  generatedIds: number[];
  finish: string;
  label: OutcomeLabel;
  reasons: string[];
}

interface SteerResult {
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
interface SteerSetup {
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
const STEER_CONDITIONS = [{ config: 'chatbot', repr: null }, { config: 'agent', repr: 'schema' }, { config: 'agent', repr: 'flattened' }] as const;

async function steerSetup(ctx: ExtractContext, o: SteerOptions, sets: ReadonlyArray<InterventionSet & { hash: string }>): Promise<SteerSetup> {
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
  };
  return { layer, meanNorm, unit, directionName, alphas, conditions, format: callFormat(ctx, ckpt.config.family), pairs: ctx.set.pairs.filter((p) => evalSet.has(p.id)), positions, protocol };
}

/**
 * Intervention sets checked against the model before anything runs (the engine's own checks, with the file named)
 * and given their content hash; labels must be unique, since they name the rows and the generation files.
 */
function checkInterventionSets(sets: readonly InterventionSet[], numLayers: number, d: number): Array<InterventionSet & { hash: string }> {
  const seen = new Map<string, string>();
  return sets.map((s) => {
    if (!/^[A-Za-z0-9_.+-]+$/.test(s.label)) throw new SafekeepError(`${s.file}: the row label '${s.label}' (the file's name) may use only letters, digits and _ . + -`);
    const other = seen.get(s.label);
    if (other !== undefined) throw new SafekeepError(`--intervene: ${other} and ${s.file} have the same name '${s.label}'; rename one (the name labels the row)`);
    seen.set(s.label, s.file);
    try {
      interventionInputs(numLayers, d, s.interventions);
    } catch (e) {
      if (e instanceof SafekeepError) throw new SafekeepError(`${s.file}: ${e.message}`);
      throw e;
    }
    return { ...s, hash: interventionSetHash(s.interventions) };
  });
}

/** Pairs per generation batch: fixed, so one process and every shard decode exactly the same batches. */
const GEN_BATCH = 8;

export async function steerSweep(o: SteerOptions): Promise<SteerResult> {
  const ctx = await openContext(o);
  const outDir = join(ctx.cacheDir, '..', 'steering');
  mkdirSync(outDir, { recursive: true });
  let setup: SteerSetup;
  const sweeps: SteeringResults[] = [];
  try {
    // a bad intervention file fails before any extraction or generation
    const sets = checkInterventionSets(o.interventionSets ?? [], ctx.engine.numLayers, ctx.engine.dModel);
    for (const c of STEER_CONDITIONS) await extractCondition(ctx, c);
    setup = await steerSetup(ctx, o, sets);
    const { layer, meanNorm, unit } = setup;
    for (const kind of o.requests ?? (['harmful', 'benign'] as const)) {
      const rows: SteeringRow[] = [];
      const prompts = setup.pairs.map((p) => ctx.builder.render(p[kind].prompt, p.tools, 'agent', 'schema'));
      const all = await generateConditions(ctx, setup.pairs, prompts.map((p) => p.ids!), prompts.map((p) => p.text), kind, setup.conditions, layer, unit, o.maxNewTokens, setup.format, outDir, setup.positions);
      for (const [i, cond] of setup.conditions.entries()) {
        const gens = all[i]!;
        rows.push(steeringRow(gens, cond, meanNorm));
        const counts = rows[rows.length - 1]!.counts;
        process.stderr.write(`steer ${kind} ${conditionName(cond)}: refusal ${counts.refusal}, valid ${counts.valid}, invalid ${counts.invalid} of ${gens.length}\n`);
      }
      sweeps.push({ layer, direction: setup.directionName, requests: kind, positions: setup.positions, rows });
    }
  } finally {
    await ctx.engine.dispose();
  }
  const res = writeTable3(tableContext(ctx), outDir, sweeps, setup!.protocol);
  const files = await writeReport(join(ctx.cacheDir, '..'), res);
  return { outDir, report: files.html, layer: setup.layer, meanNorm: setup.meanNorm, direction: setup.unit, sweeps };
}

function steeringRow(gens: readonly SteerGeneration[], cond: SteerCondition, meanNorm: number): SteeringRow {
  const counts = { refusal: 0, valid: 0, invalid: 0 };
  for (const g of gens) counts[g.label]++;
  if (cond.set) return { alpha: 0, condition: cond.set.label, interventionsSha256: cond.set.hash, n: gens.length, counts };
  return { alpha: round(cond.alpha), alphaRelative: round(cond.alpha / meanNorm), n: gens.length, counts };
}

const round = (x: number): number => Math.round(x * 1e6) / 1e6;

/** how progress lines and errors name a condition */
const conditionName = (c: SteerCondition): string => (c.set ? `intervene ${c.set.label}` : `α=${round(c.alpha)}`);

/** 'generated' gets its own files so both sweeps can sit side by side (intervention sets carry their own positions) */
const generationsFile = (kind: string, cond: SteerCondition, positions: SteerPositions): string => cond.set
  ? `generations.${kind}.intervene-${cond.set.label}.jsonl`
  : `generations.${kind}.alpha${round(cond.alpha)}${positions === 'generated' ? '.generated' : ''}.jsonl`;

/**
 * The header key of a generations file: the exact inputs, so a rerun with the same inputs reuses it — for an
 * intervention set its content hash, so an edited file is generated again.
 */
function generationsKey(ctx: ExtractContext, pairs: readonly Pair[], ids: number[][], layer: number, cond: SteerCondition, maxNewTokens: number, unit: Float32Array, positions: SteerPositions): string {
  return JSON.stringify({
    ids: ids.map((x) => x.length), pairs: pairs.map((p) => p.id), layer, alpha: cond.alpha, maxNewTokens, dir: Array.from(unit.slice(0, 8)), model: ctx.baseManifest.model, positions,
    ...(cond.set ? { interventions: cond.set.hash } : {}),
  });
}

/** The harness task of one (requests, condition): fixed batches of prompts, greedy, each output classified. */
function conditionTask(
  ctx: ExtractContext, kind: 'harmful' | 'benign', cond: SteerCondition, layer: number, unit: Float32Array, maxNewTokens: number, format: CallFormat, positions: SteerPositions,
): Task<GenerationBatch, GeneratedRow<SteerGeneration>[], SteerGeneration> {
  return generationTask<SteerGeneration>({
    name: `steer/${kind}`, solver: conditionName(cond), format,
    model: { generate: (ids, o) => ctx.engine.generate(ids, o), decode: (ids) => ctx.tok.decode(ids) },
    options: {
      maxNewTokens,
      ...(cond.alpha !== 0 ? { steer: { layer, vector: unit, alpha: cond.alpha, positions } } : {}),
      ...(cond.set ? { interventions: cond.set.interventions } : {}),
    },
    row: (p, g) => ({
      pairId: p.id, requests: kind, alpha: round(cond.alpha), ...(cond.set ? { condition: cond.set.label } : {}),
      text: g.text, generatedIds: g.generatedIds, finish: g.finish, label: g.label, reasons: g.reasons,
    }),
  });
}

/** The prompts of one batch: the pairs' requests rendered in the agent format with JSON schemas. */
const batchOf = (pairs: readonly Pair[], ids: number[][], texts: readonly string[], start: number): GenerationBatch =>
  ({ start, prompts: pairs.map((p, i) => ({ id: p.id, text: texts[i] ?? '', ids: ids[i]!, tools: p.tools })) });

/** Greedy generations of one batch of pairs (steered unless α = 0; an intervention set's interventions), each classified. */
async function generateChunk(
  ctx: ExtractContext, pairs: readonly Pair[], ids: number[][], texts: readonly string[], kind: 'harmful' | 'benign', cond: SteerCondition, layer: number,
  unit: Float32Array, maxNewTokens: number, format: CallFormat, positions: SteerPositions,
): Promise<{ gens: SteerGeneration[]; samples: SampleLog<SteerGeneration>[] }> {
  const r = await runTask(conditionTask(ctx, kind, cond, layer, unit, maxNewTokens, format, positions), [batchOf(pairs, ids, texts, 0)]);
  return { gens: r.results.flat().map((x) => x.row), samples: r.samples };
}

/** The per-sample log beside a generations file (same name, `log.` for `generations.`). */
const logFileOf = (generations: string): string => generations.replace(/generations\.([^/]*)$/, 'log.$1');

function writeConditionLog(file: string, key: string, kind: string, cond: SteerCondition, samples: readonly SampleLog<SteerGeneration>[]): void {
  writeEvalLog(logFileOf(file), { header: { format: 'safekeep-log', task: `steer/${kind}`, protocol: { condition: conditionName(cond) }, context: { key } }, samples: [...samples] });
}

/**
 * Generations for every condition of one request kind, each cached as JSONL keyed by its exact inputs (a rerun costs
 * nothing). The conditions still to compute run as one task whose items are ordered batch-major — batch 0 of every
 * condition, then batch 1, … — with `ctx.genConcurrency` batches in flight: the same prompts under each α are on the
 * scheduler together, so their decode steps are shared and, with generated-only steering, their prefill blocks too.
 */
async function generateConditions(
  ctx: ExtractContext, pairs: readonly Pair[], ids: number[][], texts: readonly string[], kind: 'harmful' | 'benign', conditions: readonly SteerCondition[], layer: number,
  unit: Float32Array, maxNewTokens: number, format: CallFormat, outDir: string, positions: SteerPositions,
): Promise<SteerGeneration[][]> {
  const out: (SteerGeneration[] | null)[] = conditions.map((cond) => {
    const file = join(outDir, generationsFile(kind, cond, positions));
    if (!existsSync(file)) return null;
    const lines = readFileSync(file, 'utf8').trim().split('\n');
    const head = JSON.parse(lines[0]!) as { key?: string };
    return head.key === generationsKey(ctx, pairs, ids, layer, cond, maxNewTokens, unit, positions) ? lines.slice(1).map((l) => JSON.parse(l) as SteerGeneration) : null;
  });
  const todo = conditions.flatMap((_, a) => (out[a] ? [] : [a]));
  if (todo.length === 0) return out as SteerGeneration[][];
  const tasks = new Map(todo.map((a) => [a, conditionTask(ctx, kind, conditions[a]!, layer, unit, maxNewTokens, format, positions)]));
  const starts = Array.from({ length: Math.ceil(pairs.length / GEN_BATCH) }, (_, b) => b * GEN_BATCH);
  const items = starts.flatMap((s) => todo.map((a) => ({ a, batch: { ...batchOf(pairs.slice(s, s + GEN_BATCH), ids.slice(s, s + GEN_BATCH), texts.slice(s, s + GEN_BATCH), 0), start: s } })));
  const label = todo.length === 1 ? conditionName(conditions[todo[0]!]!) : `${todo.length} conditions`;
  const progress = new ItemProgress(`steer ${kind} ${label}`, pairs.length * todo.length, { quiet: ctx.quiet });
  // each finished item's log lines, kept by item so every condition writes its own log
  const logs = new Map<(typeof items)[number], SampleLog<SteerGeneration>[]>();
  const task: Task<(typeof items)[number], GeneratedRow<SteerGeneration>[], SteerGeneration> = {
    name: `steer/${kind}`,
    key: (it) => `${it.a} ${tasks.get(it.a)!.key(it.batch)}`,
    solve: (it, rec) => tasks.get(it.a)!.solve(it.batch, rec),
    samples: (it, r, calls) => {
      const x = tasks.get(it.a)!.samples(it.batch, r, calls);
      logs.set(it, x);
      progress.add(it.batch.prompts.length);
      return x;
    },
  };
  const r = await runTask(task, items, { concurrency: ctx.genConcurrency });
  progress.finish();
  for (const a of todo) {
    const cond = conditions[a]!;
    const mine = items.flatMap((it, i) => (it.a === a ? [i] : []));
    const gens = mine.flatMap((i) => r.results[i]!.map((x) => x.row));
    const file = join(outDir, generationsFile(kind, cond, positions));
    const key = generationsKey(ctx, pairs, ids, layer, cond, maxNewTokens, unit, positions);
    writeFileAtomic(file, [JSON.stringify({ key }), ...gens.map((g) => JSON.stringify(g))].join('\n') + '\n');
    writeConditionLog(file, key, kind, cond, mine.flatMap((i) => logs.get(items[i]!)!));
    out[a] = gens;
  }
  return out as SteerGeneration[][];
}

/** What `merge` needs to finish a sharded sweep (recorded in every steer shard; equal across shards). */
export interface SteerMergeOptions {
  table: TableContext;
  layer: number;
  meanNorm: number;
  directionName: string;
  alphas: number[];
  /** intervention sets after the α rows: label and content hash */
  interventionSets: Array<{ label: string; hash: string }>;
  requests: Array<'harmful' | 'benign'>;
  /** number of evaluation pairs (chunks of GEN_BATCH) */
  pairs: number;
  /** generations-file key per `<requests>/<condition index>` (α rows, then intervention sets) */
  keys: Record<string, string>;
  positions: SteerPositions;
  protocol: Record<string, unknown>;
}

/**
 * `steer --shard i/n`: this shard's (requests × condition × batch-of-8-pairs) generations, token-balanced (prompt tokens +
 * max new tokens per pair), into results/<model>/shards/steer/shard-<i>-of-<n>/; `safekeep merge` writes the
 * generation files, Table 3 and the report. Needs the extraction caches (chatbot, agent.schema, agent.flattened)
 * already merged: ℓ* and R̂ come from them, identically in every shard.
 */
export async function steerShard(o: SteerOptions, shard: Shard): Promise<ShardSummary> {
  const ctx = await openContext(o);
  try {
    const sets = checkInterventionSets(o.interventionSets ?? [], ctx.engine.numLayers, ctx.engine.dModel);
    const missing = STEER_CONDITIONS.filter((c) => !cacheIsComplete(ctx.cacheDir, promptCacheName(c), renderRows(ctx, c)));
    if (missing.length) {
      throw new SafekeepError(`steer --shard needs the caches ${missing.map((c) => promptCacheName(c)).join(', ')} in ${ctx.cacheDir} first: `
        + 'run `safekeep extract --configs chatbot,agent --repr schema,flattened` (sharded and merged, or in one process); `safekeep slurm steer` does this stage first');
    }
    const setup = await steerSetup(ctx, o, sets);
    const kinds = [...(o.requests ?? (['harmful', 'benign'] as const))];
    const rendered = Object.fromEntries(kinds.map((k) => [k, setup.pairs.map((p) => ctx.builder.render(p[k].prompt, p.tools, 'agent', 'schema'))]));
    const ids = Object.fromEntries(kinds.map((k) => [k, rendered[k]!.map((r) => r.ids!)])) as Record<string, number[][]>;
    const texts = Object.fromEntries(kinds.map((k) => [k, rendered[k]!.map((r) => r.text)])) as Record<string, string[]>;
    const items: Array<{ kind: 'harmful' | 'benign'; a: number; s: number; cost: number }> = [];
    for (const kind of kinds) {
      for (let a = 0; a < setup.conditions.length; a++) {
        for (let s = 0; s < setup.pairs.length; s += GEN_BATCH) {
          const chunk = ids[kind]!.slice(s, s + GEN_BATCH);
          items.push({ kind, a, s, cost: chunk.reduce((t, x) => t + x.length + o.maxNewTokens, 0) });
        }
      }
    }
    const mine = selectShard(items, (x) => x.cost, shard);
    const keys: Record<string, string> = {};
    for (const kind of kinds) setup.conditions.forEach((cond, a) => (keys[`${kind}/${a}`] = generationsKey(ctx, setup.pairs, ids[kind]!, setup.layer, cond, o.maxNewTokens, setup.unit, setup.positions)));
    const interventionSets = setup.conditions.flatMap((c) => (c.set ? [{ label: c.set.label, hash: c.set.hash }] : []));
    const merge: SteerMergeOptions = {
      table: tableContext(ctx), layer: setup.layer, meanNorm: setup.meanNorm, directionName: setup.directionName, alphas: setup.alphas, interventionSets,
      requests: kinds, pairs: setup.pairs.length, keys, positions: setup.positions, protocol: setup.protocol,
    };
    // the intervention sets by name and hash first, so merge names them when shards were run with different files
    const identity = { ...shardIdentity(ctx), interventions: setsIdentity(interventionSets), steer: sha256Hex(JSON.stringify({ ...merge, table: null })).slice(0, 12) };
    const run = new ShardRun(join(ctx.cacheDir, '..'), 'steer', shard, identity, { ...merge }, { items: mine.length, tokens: mine.reduce((t, x) => t + x.cost, 0) });
    let computed = 0;
    // the shard's batches in flight together (--gen-concurrency), batch-major (the same prompts under every condition
    // side by side, as in one process), each written as it finishes
    const limiter = new Limiter(ctx.genConcurrency);
    const order = [...mine].sort((x, y) => kinds.indexOf(x.kind) - kinds.indexOf(y.kind) || x.s - y.s || x.a - y.a);
    await Promise.all(order.map((it) => limiter.run(async () => {
      const file = join(run.dir, chunkFile(it.kind, it.a, it.s));
      const key = keys[`${it.kind}/${it.a}`]!;
      if (existsSync(file) && (JSON.parse(readFileSync(file, 'utf8').split('\n')[0]!) as { key?: string }).key === key) { run.add(1, it.cost); return; }
      const { gens, samples } = await generateChunk(ctx, setup.pairs.slice(it.s, it.s + GEN_BATCH), ids[it.kind]!.slice(it.s, it.s + GEN_BATCH), texts[it.kind]!.slice(it.s, it.s + GEN_BATCH), it.kind,
        setup.conditions[it.a]!, setup.layer, setup.unit, o.maxNewTokens, setup.format, setup.positions);
      // the log lines first: a chunk file present means its log lines are too
      writeFileAtomic(samplesChunkFile(file), samples.map((x) => JSON.stringify(x)).join('\n') + '\n');
      writeFileAtomic(file, [JSON.stringify({ key }), ...gens.map((g) => JSON.stringify(g))].join('\n') + '\n');
      computed += gens.length;
      run.add(1, it.cost);
    })));
    const rec = run.finish();
    return { dir: run.dir, items: rec.items, tokens: rec.tokens, computedRows: computed, seconds: rec.seconds ?? 0 };
  } finally {
    await ctx.engine.dispose();
  }
}

/** A shard's generations of one batch: `<requests>.a<condition index>.<first pair index>.jsonl` (key header, then rows). */
const chunkFile = (kind: string, a: number, s: number): string => `${kind}.a${a}.${String(s).padStart(6, '0')}.jsonl`;
/** the chunk's log lines, beside it */
const samplesChunkFile = (chunk: string): string => chunk.replace(/\.jsonl$/, '.samples.jsonl');

/**
 * After every steer shard is done: the generation files one process writes (same key header, same rows in pair
 * order), Table 3 and the report. `shardDirs` = the complete shard set's folders; each batch must be in exactly one.
 */
export async function finishSteer(resultsDir: string, m: SteerMergeOptions, shardDirs: ReadonlyArray<{ name: string; dir: string }>): Promise<{ outDir: string; report: string; sweeps: SteeringResults[] }> {
  const outDir = join(resultsDir, 'steering');
  mkdirSync(outDir, { recursive: true });
  const sweeps: SteeringResults[] = [];
  for (const kind of m.requests) {
    const rows: SteeringRow[] = [];
    const conditions: SteerCondition[] = [...m.alphas.map((alpha) => ({ alpha })), ...(m.interventionSets ?? []).map((s) => ({ alpha: 0, set: { ...s, interventions: [] } }))];
    for (const [a, cond] of conditions.entries()) {
      const key = m.keys[`${kind}/${a}`]!;
      const gens: SteerGeneration[] = [];
      const samples: SampleLog<SteerGeneration>[] = [];
      for (let s = 0; s < m.pairs; s += GEN_BATCH) {
        const have = shardDirs.filter((d) => existsSync(join(d.dir, chunkFile(kind, a, s))));
        if (have.length !== 1) {
          throw new SafekeepError(`steer ${kind} ${conditionName(cond)} pairs ${s}..${Math.min(s + GEN_BATCH, m.pairs) - 1}: `
            + (have.length ? `duplicate in ${have.map((d) => d.name).join(' and ')}` : 'in no shard; rerun the shard that owns it'));
        }
        const lines = readFileSync(join(have[0]!.dir, chunkFile(kind, a, s)), 'utf8').trim().split('\n');
        if ((JSON.parse(lines[0]!) as { key?: string }).key !== key) throw new SafekeepError(`${join(have[0]!.dir, chunkFile(kind, a, s))}: generated with other inputs; delete it and rerun ${have[0]!.name}`);
        gens.push(...lines.slice(1).map((l) => JSON.parse(l) as SteerGeneration));
        const sf = samplesChunkFile(join(have[0]!.dir, chunkFile(kind, a, s)));
        if (existsSync(sf)) samples.push(...readFileSync(sf, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as SampleLog<SteerGeneration>));
      }
      const file = join(outDir, generationsFile(kind, cond, m.positions));
      writeFileAtomic(file, [JSON.stringify({ key }), ...gens.map((g) => JSON.stringify(g))].join('\n') + '\n');
      writeConditionLog(file, key, kind, cond, samples);
      rows.push(steeringRow(gens, cond, m.meanNorm));
    }
    sweeps.push({ layer: m.layer, direction: m.directionName, requests: kind, positions: m.positions, rows });
  }
  const res = writeTable3(m.table, outDir, sweeps, m.protocol);
  const files = await writeReport(resultsDir, res);
  return { outDir, report: files.html, sweeps };
}

/** What Table 3 and the results shell need from a run (no engine). */
interface TableContext {
  cacheDir: string;
  modelDir: string;
  modelName: string;
  numLayers: number;
  dModel: number;
  baseManifest: Record<string, unknown>;
}

const tableContext = (ctx: ExtractContext): TableContext => ({
  cacheDir: ctx.cacheDir, modelDir: ctx.modelDir, modelName: ctx.modelName, numLayers: ctx.engine.numLayers, dModel: ctx.engine.dModel, baseManifest: ctx.baseManifest,
});

/** Table 3 into steering/; returns the run's results (from `reproduce` when present) with the sweep merged in. */
function writeTable3(ctx: TableContext, outDir: string, sweeps: SteeringResults[], protocol: Record<string, unknown>): AnalysisResults {
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
function minimalResults(ctx: TableContext, layer: number): AnalysisResults {
  const L1 = ctx.numLayers + 1;
  return {
    version: 1, model: ctx.modelName, layers: L1, dModel: ctx.dModel, synthetic: existsSync(join(ctx.modelDir, 'PLANTED.json')),
    lStar: { layer, method: 'given by the steering run', cvAuroc: [] }, bootstrap: { reps: 0, seed: 0, level: 0.95 },
    curves: [], table1: [], table2: [], norms: { directions: [], meanHidden: [] }, manifest: ctx.baseManifest,
  };
}
