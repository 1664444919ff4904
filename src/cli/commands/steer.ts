/**
 * `safekeep steer --model M [--data pairs|agentharm|PATH] [--alphas 0,4,8,12 | 0,0.5x,1x] [--layer auto|N]
 *    [--direction schema-harmful|schema-benign|refusal|FILE.json] [--max-new-tokens 256] [--requests harmful,benign]
 *    [--intervene A.json,B.json] [--limit N] [--results DIR] [--dtype f32|bf16|f16|q8|q4] [--device cpu|cuda|webgpu] [--threads N] [--template FILE]`
 * Table 3: steer hidden[ℓ*] − α·R̂ at every step, classify outputs (refusal / valid harmful call / invalid).
 * `--intervene` (a comma list; one flag, since a repeated flag would replace the earlier one): each file is an
 * intervention set as `generate --intervene` reads it, run as one more row labelled by the file's name.
 * `Nx` alphas are multiples of mean ‖hidden[ℓ*]‖ (residual units), so sweeps transfer across models.
 * `--temperature T [--samples K --seed S --top-k --top-p --min-p --repetition-penalty]`: sampled answers, K per request
 * (seeds S, S+1, …); Table 3 then reports refusal over requests × answers with a Wilson and a per-prompt bootstrap
 * interval. Greedy by default, as the paper decodes.
 * `--sae DIR` (an SAE at hidden[ℓ*]): the same α rows once more along the unit decoder row of the feature with the
 * largest cosine with R̂ — a sweep by feature beside the sweep by direction, in Table 3 and one figure with both curves.
 * `--shard i/n` (0-based): this shard's token-balanced share of the (requests × α × batch) generations, into
 * results/<model>/shards/steer/; needs the chatbot/agent.schema/agent.flattened caches first (`safekeep slurm steer`
 * runs that extraction as its own sharded stage); `safekeep merge results/<model>` writes Table 3 and the report.
 */
import { checkPairBudget, CV_BUDGET, DIRECTION_BUDGET } from '../pair-budget.ts';
import { choiceValue, numberValue, parseArgs, type FlagTable } from '../args.ts';
import { ANALYSIS_FLAG_DEFS, analysisOptions, RUN_FLAG_DEFS, runContextOptions } from '../run-flags.ts';
import { STEER_POSITIONS } from '../../engine/types.ts';
import { parseAlphas, type InterventionSet } from '../../experiments/steer/conditions.ts';
import type { DirectionChoice, SteerOptions } from '../../experiments/steer/setup.ts';
import { steerShard } from '../../experiments/steer/shard.ts';
import { steerSweep } from '../../experiments/steer/sweep.ts';
import { parseShard } from '../../util/shard.ts';
import { SHARD_FLAG_DEF } from '../shard-flag.ts';
import { SafekeepError } from '../../util/errors.ts';
import { readInterventionsFile } from '../engine-flags.ts';
import { basename } from 'node:path';
import { SAMPLING_FLAG_DEFS, samplingFlags, samplingSummary } from '../sampling-flags.ts';
import { SAE_FLAG_DEFS, openSae } from '../sae-flags.ts';

export const summary = 'steering sweep (Table 3): subtract α·R̂ at ℓ*, classify agent outputs';

export const flags: FlagTable = {
  usage: 'steer --model M [--alphas 0,4,8,12 | 0,0.5x,1x] [--layer auto|N] [--direction D] [flags]',
  flags: [
    ...RUN_FLAG_DEFS,
    { name: 'alphas', value: 'LIST', default: '0,4,8,12', help: 'steering strengths; Nx = N × mean ‖hidden[ℓ*]‖' },
    { name: 'layer', value: 'auto|N', default: 'auto', help: 'steering layer (auto = ℓ* of the analysis)' },
    { name: 'direction', value: 'schema-harmful|schema-benign|refusal|FILE', default: 'schema-harmful', help: 'direction R̂ to subtract' },
    { name: 'max-new-tokens', value: 'N', default: '256', help: 'generation budget per request' },
    { name: 'requests', value: 'harmful,benign', default: 'harmful,benign', help: 'which requests to steer' },
    { name: 'steer-positions', value: 'all|generated', default: 'all', help: 'steer every prompt and generated position (an HF forward hook) or generated tokens only (the paper\'s "each decoding step")' },
    {
      name: 'intervene', value: 'A.json,B.json',
      help: 'comma list of intervention files (generate --intervene\'s format: add / ablate / clamp); each one more row, named by its file, on the same prompts',
    },
    ...ANALYSIS_FLAG_DEFS,
    ...SAE_FLAG_DEFS.map((f) => ({ ...f, help: f.name === 'sae' ? `${f.help}: also sweep α along the unit decoder row of R̂'s top feature (an SAE at hidden[ℓ*])` : f.help })),
    SHARD_FLAG_DEF,
    ...SAMPLING_FLAG_DEFS,
  ],
  example: 'steer --model models/planted --alphas 0,1,1.5',
};

/** `--intervene A.json,B.json`: each file read as `generate --intervene` reads it, named by its file name. */
function interventionSetsFlag(v: string | undefined): InterventionSet[] {
  if (v === undefined) return [];
  const files = v.split(',').map((f) => f.trim());
  if (files.some((f) => !f)) throw new SafekeepError(`--intervene: an empty file name in '${v}' (a comma list of FILE.json)`);
  return files.map((file) => ({ label: basename(file).replace(/\.json$/i, ''), file, interventions: readInterventionsFile(file) }));
}

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, flags);
  const layerArg = a.values.get('layer') ?? 'auto';
  const layer = layerArg === 'auto' ? 'auto' : Number(layerArg);
  if (layer !== 'auto' && !Number.isInteger(layer)) throw new SafekeepError(`--layer must be auto or an integer, got '${layerArg}'`);
  const dirArg = a.values.get('direction') ?? 'schema-harmful';
  const direction: DirectionChoice = ['schema-harmful', 'schema-benign', 'refusal'].includes(dirArg)
    ? (dirArg as DirectionChoice) : { file: dirArg };
  const sampling = samplingFlags(a);
  const requests = (a.values.get('requests') ?? 'harmful,benign').split(',');
  for (const r of requests) if (r !== 'harmful' && r !== 'benign') throw new SafekeepError(`--requests: '${r}' (harmful, benign)`);
  if (a.values.has('hook') && !a.values.has('sae')) throw new SafekeepError('--hook needs --sae');
  if (a.values.has('sae') && a.values.has('shard')) throw new SafekeepError('--sae: the sweep by feature runs in one process (not with --shard); run steer --sae after the merge, it reuses the direction sweep');
  // opened before the engine, whose --max-memory plan counts the process's resident bytes
  const sae = a.values.has('sae') ? { sae: await openSae(a), source: a.values.get('sae')! } : null;
  const o: SteerOptions = {
    ...(sae ? { sae } : {}),
    ...(await runContextOptions(a)),
    alphas: parseAlphas(a.values.get('alphas') ?? '0,4,8,12'),
    layer,
    direction,
    maxNewTokens: numberValue(a, 'max-new-tokens', 256),
    requests: requests as Array<'harmful' | 'benign'>,
    positions: choiceValue(a, 'steer-positions', STEER_POSITIONS, 'all'),
    ...analysisOptions(a),
    interventionSets: interventionSetsFlag(a.values.get('intervene')),
    ...(sampling.settings ? { sampling: sampling.settings, samples: sampling.samples } : {}),
  };
  // a sampled sweep says how it decoded before it starts (the seed to replay it, when drawn)
  if (sampling.settings) process.stderr.write(`steer: ${samplingSummary(sampling)}\n`);
  await checkPairBudget(o, o.limit, o.layer === 'auto' && o.layerRule === 'cv' ? CV_BUDGET : DIRECTION_BUDGET);
  const shardArg = a.values.get('shard');
  if (shardArg !== undefined && sampling.seedDrawn) throw new SafekeepError('steer --shard with --temperature needs --seed: every shard must sample with the same seed');
  if (shardArg !== undefined) {
    const s = await steerShard(o, parseShard(shardArg));
    process.stdout.write(`shard ${shardArg}: ${s.items} generation batches (${s.tokens} tokens), generated ${s.computedRows} outputs in ${s.seconds.toFixed(1)} s → ${s.dir}\n`);
    return 0;
  }
  const r = await steerSweep(o);
  const pct = (k: number, n: number): string => (n ? `${((100 * k) / n).toFixed(1)}%` : '-');
  const lines = [`steering at ℓ* = ${r.layer} (mean ‖hidden[ℓ*]‖ = ${r.meanNorm.toFixed(3)}), direction: ${r.sweeps[0]?.direction ?? ''}, positions: ${r.sweeps[0]?.positions ?? 'all'}`];
  const byFeature = r.sweeps.find((s) => s.feature);
  if (byFeature) lines.push(`by feature ("SAE #j" rows): ${byFeature.direction}`);
  for (const s of r.sweeps) {
    for (const row of s.rows) {
      const what = row.condition === undefined ? `α=${String(row.alpha).padEnd(9)} (${row.alphaRelative?.toFixed(3)}×‖h‖)` : `intervene ${row.condition}`;
      const boot = row.sampled ? ` [per-prompt bootstrap ${(100 * row.sampled.refusal.bootstrap.lo).toFixed(1)}, ${(100 * row.sampled.refusal.bootstrap.hi).toFixed(1)}]` : '';
      const n = row.sampled ? `n=${row.sampled.prompts}×${row.sampled.samples}` : `n=${row.n}`;
      lines.push(`  ${s.requests.padEnd(7)} ${s.feature ? `SAE #${s.feature.index} ` : ''}${what}  refusal ${pct(row.counts.refusal, row.n)}${boot}  valid ${pct(row.counts.valid, row.n)}  invalid ${pct(row.counts.invalid, row.n)}  (${n})`);
    }
  }
  process.stdout.write(`${lines.join('\n')}\nTable 3: ${r.outDir}/table3.md\nreport: ${r.report}\n`);
  return 0;
}
