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
 * With an SAE (`steer --sae DIR`, at hidden[ℓ*]) the same α rows run once more along the unit decoder row of the
 * feature whose decoder row has the largest cosine with R̂ (normalized as R̂ is, so the α axes agree): a sweep by
 * feature beside the sweep by direction, in generations.<requests>.sae<j>.alpha<α>.jsonl and in Table 3.
 *
 * Each (requests, condition) runs as a harness task (src/harness/generation.ts: fixed batches, greedy, classified).
 * Writes results/<model>/steering/: generations.<requests>.alpha<α>.jsonl (every output with its label and reasons),
 * generations.<requests>.intervene-<label>.jsonl per intervention set, beside each its per-sample log (log.<same>), table3.md|csv|json, and merges the sweep into
 * results/<model>/results.json so the report shows Table 3 and its stacked-bar figure.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SteeringResults, SteeringRow } from '../../analysis/results.ts';
import type { Pair } from '../../data/types.ts';
import type { SteerPositions } from '../../engine/types.ts';
import type { CallFormat } from '../../outcome/types.ts';
import { writeReport } from '../../report/write-report.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { ItemProgress } from '../../util/progress.ts';
import type { GeneratedRow } from '../../harness/generation.ts';
import type { SampleLog } from '../../harness/log.ts';
import { runTask, type Task } from '../../harness/runner.ts';
import { extractCondition, openContext, type ExtractContext } from '../extract.ts';
import { checkInterventionSets, conditionName, type SteerCondition } from './conditions.ts';
import { batchOf, conditionTask, GEN_BATCH, generationsFile, generationsKey, sampledSweep, writeConditionLog, type SteerDecode, type SteerGeneration } from './generate.ts';
import { STEER_CONDITIONS, steerSetup, type SteerOptions, type SteerSetup } from './setup.ts';
import { steeringRow, tableContext, writeTable3 } from './table3.ts';
import { topFeatureVector, type FeatureVector } from '../../sae/feature-vector.ts';
import { hiddenRowOf } from '../../sae/hook.ts';
import { SafekeepError } from '../../util/errors.ts';

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
    const feature = o.sae ? featureAlong(o.sae, layer, unit) : null;
    const featureInfo = feature && o.sae
      ? { sae: o.sae.source, hook: o.sae.sae.config.hookName ?? `hidden[${layer}]`, index: feature.index, cosine: feature.cosine, of: setup.directionName }
      : null;
    for (const kind of o.requests ?? (['harmful', 'benign'] as const)) {
      const rows: SteeringRow[] = [];
      const prompts = setup.pairs.map((p) => ctx.builder.render(p[kind].prompt, p.tools, 'agent', 'schema'));
      const decode: SteerDecode = { ...(o.sampling ? { sampling: o.sampling } : {}), samples: o.samples ?? 1 };
      const all = await generateConditions(ctx, setup.pairs, prompts.map((p) => p.ids!), prompts.map((p) => p.text), kind, setup.conditions, layer, unit, o.maxNewTokens, setup.format, outDir, setup.positions, decode);
      for (const [i, cond] of setup.conditions.entries()) {
        const gens = all[i]!;
        rows.push(steeringRow(gens, cond, meanNorm));
        const counts = rows[rows.length - 1]!.counts;
        process.stderr.write(`steer ${kind} ${conditionName(cond)}: refusal ${counts.refusal}, valid ${counts.valid}, invalid ${counts.invalid} of ${gens.length}\n`);
      }
      sweeps.push({ layer, direction: setup.directionName, requests: kind, positions: setup.positions, rows, ...sampledSweep(o) });
      if (feature) {
        // the same α rows along the feature's unit decoder row, on the same prompts, cached in their own files
        // α = 0 steers nothing: its generations are the direction sweep's own
        const alphaRows = setup.conditions.filter((c) => !c.set);
        const steered = alphaRows.filter((c) => c.alpha !== 0);
        const made = await generateConditions(ctx, setup.pairs, prompts.map((p) => p.ids!), prompts.map((p) => p.text), kind, steered, layer, feature.unit, o.maxNewTokens, setup.format, outDir, setup.positions, decode, `sae${feature.index}`);
        const gens = alphaRows.map((c) => (c.alpha === 0 ? all[setup.conditions.indexOf(c)]! : made[steered.indexOf(c)]!));
        const fRows = alphaRows.map((cond, i) => steeringRow(gens[i]!, cond, meanNorm));
        if (!ctx.quiet) for (const [i, cond] of alphaRows.entries()) process.stderr.write(`steer ${kind} SAE feature #${feature.index} ${conditionName(cond)}: refusal ${fRows[i]!.counts.refusal} of ${gens[i]!.length}\n`);
        sweeps.push({
          layer, direction: `SAE feature #${feature.index} (unit decoder row; cosine ${feature.cosine.toFixed(4)} with the ${setup.directionName})`, requests: kind,
          positions: setup.positions, rows: fRows, ...sampledSweep(o), feature: featureInfo!,
        });
      }
    }
  } finally {
    await ctx.engine.dispose();
  }
  const res = writeTable3(tableContext(ctx), outDir, sweeps, setup!.protocol);
  const files = await writeReport(join(ctx.cacheDir, '..'), res);
  return { outDir, report: files.html, layer: setup.layer, meanNorm: setup.meanNorm, direction: setup.unit, sweeps };
}

/** The top feature of R̂ at ℓ* and its unit decoder row; the SAE must read hidden[ℓ*] (its rows live there only). */
function featureAlong(o: NonNullable<SteerOptions['sae']>, layer: number, unit: Float32Array): FeatureVector {
  const row = hiddenRowOf(o.sae.config.hookName, Number.MAX_SAFE_INTEGER, '--sae');
  if (row !== layer) throw new SafekeepError(`--sae: the SAE reads ${o.sae.config.hookName} = hidden[${row ?? 'none'}], the sweep steers hidden[${layer}] (ℓ*); give --layer ${row ?? 'N'} or an SAE at hidden[${layer}]`);
  if (o.sae.config.dIn !== unit.length) throw new SafekeepError(`--sae: its d_in is ${o.sae.config.dIn}, the model's d_model is ${unit.length}`);
  return topFeatureVector(o.sae, unit);
}

/**
 * Generations for every condition of one request kind, each cached as JSONL keyed by its exact inputs (a rerun costs
 * nothing). The conditions still to compute run as one task whose items are ordered batch-major — batch 0 of every
 * condition, then batch 1, … — with `ctx.genConcurrency` batches in flight: the same prompts under each α are on the
 * scheduler together, so their decode steps are shared and, with generated-only steering, their prefill blocks too.
 */
async function generateConditions(
  ctx: ExtractContext, pairs: readonly Pair[], ids: number[][], texts: readonly string[], kind: 'harmful' | 'benign', conditions: readonly SteerCondition[], layer: number,
  unit: Float32Array, maxNewTokens: number, format: CallFormat, outDir: string, positions: SteerPositions, decode: SteerDecode, along?: string,
): Promise<SteerGeneration[][]> {
  const out: (SteerGeneration[] | null)[] = conditions.map((cond) => {
    const file = join(outDir, generationsFile(kind, cond, positions, along));
    if (!existsSync(file)) return null;
    const lines = readFileSync(file, 'utf8').trim().split('\n');
    const head = JSON.parse(lines[0]!) as { key?: string };
    return head.key === generationsKey(ctx, pairs, ids, layer, cond, maxNewTokens, unit, positions, decode) ? lines.slice(1).map((l) => JSON.parse(l) as SteerGeneration) : null;
  });
  const todo = conditions.flatMap((_, a) => (out[a] ? [] : [a]));
  if (todo.length === 0) return out as SteerGeneration[][];
  const tasks = new Map(todo.map((a) => [a, conditionTask(ctx, kind, conditions[a]!, layer, unit, maxNewTokens, format, positions, decode)]));
  const starts = Array.from({ length: Math.ceil(pairs.length / GEN_BATCH) }, (_, b) => b * GEN_BATCH);
  const items = starts.flatMap((s) => todo.map((a) => ({ a, batch: { ...batchOf(pairs.slice(s, s + GEN_BATCH), ids.slice(s, s + GEN_BATCH), texts.slice(s, s + GEN_BATCH), 0), start: s } })));
  const label = todo.length === 1 ? conditionName(conditions[todo[0]!]!) : `${todo.length} conditions`;
  const progress = new ItemProgress(`steer ${kind} ${label}`, pairs.length * todo.length * decode.samples, { quiet: ctx.quiet });
  // each finished item's log lines, kept by item so every condition writes its own log
  const logs = new Map<(typeof items)[number], SampleLog<SteerGeneration>[]>();
  const task: Task<(typeof items)[number], GeneratedRow<SteerGeneration>[], SteerGeneration> = {
    name: `steer/${kind}`,
    key: (it) => `${it.a} ${tasks.get(it.a)!.key(it.batch)}`,
    solve: (it, rec) => tasks.get(it.a)!.solve(it.batch, rec),
    samples: (it, r, calls) => {
      const x = tasks.get(it.a)!.samples(it.batch, r, calls);
      logs.set(it, x);
      progress.add(x.length);
      return x;
    },
  };
  const r = await runTask(task, items, { concurrency: ctx.genConcurrency });
  progress.finish();
  for (const a of todo) {
    const cond = conditions[a]!;
    const mine = items.flatMap((it, i) => (it.a === a ? [i] : []));
    const gens = mine.flatMap((i) => r.results[i]!.map((x) => x.row));
    const file = join(outDir, generationsFile(kind, cond, positions, along));
    const key = generationsKey(ctx, pairs, ids, layer, cond, maxNewTokens, unit, positions, decode);
    writeFileAtomic(file, [JSON.stringify({ key }), ...gens.map((g) => JSON.stringify(g))].join('\n') + '\n');
    writeConditionLog(file, key, kind, cond, mine.flatMap((i) => logs.get(items[i]!)!));
    out[a] = gens;
  }
  return out as SteerGeneration[][];
}
