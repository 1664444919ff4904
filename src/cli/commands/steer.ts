/**
 * `safekeep steer --model M [--data pairs|agentharm|PATH] [--alphas 0,4,8,12 | 0,0.5x,1x] [--layer auto|N]
 *    [--direction schema-harmful|schema-benign|refusal|FILE.json] [--max-new-tokens 256] [--requests harmful,benign]
 *    [--limit N] [--results DIR] [--dtype f32|bf16|f16|q8|q4] [--device cpu|cuda] [--threads N] [--template FILE]`
 * Table 3: steer hidden[ℓ*] − α·R̂ at every step, classify outputs (refusal / valid harmful call / invalid).
 * `Nx` alphas are multiples of mean ‖hidden[ℓ*]‖ (residual units), so sweeps transfer across models.
 * `--shard i/n` (0-based): this shard's token-balanced share of the (requests × α × batch) generations, into
 * results/<model>/shards/steer/; needs the chatbot/agent.schema/agent.flattened caches first (`safekeep slurm steer`
 * runs that extraction as its own sharded stage); `safekeep merge results/<model>` writes Table 3 and the report.
 */
import { numberValue, parseArgs } from '../args.ts';
import { RUN_FLAGS, runContextOptions } from '../run-flags.ts';
import { parseAlphas, steerShard, steerSweep, type DirectionChoice, type SteerOptions } from '../../experiments/steer.ts';
import { parseShard } from '../../util/shard.ts';
import { SafekeepError } from '../../util/errors.ts';

export const summary = 'steering sweep (Table 3): subtract α·R̂ at ℓ*, classify agent outputs';

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, { values: [...RUN_FLAGS, 'alphas', 'layer', 'direction', 'max-new-tokens', 'requests', 'shard'] });
  const layerArg = a.values.get('layer') ?? 'auto';
  const layer = layerArg === 'auto' ? 'auto' : Number(layerArg);
  if (layer !== 'auto' && !Number.isInteger(layer)) throw new SafekeepError(`--layer must be auto or an integer, got '${layerArg}'`);
  const dirArg = a.values.get('direction') ?? 'schema-harmful';
  const direction: DirectionChoice = ['schema-harmful', 'schema-benign', 'refusal'].includes(dirArg)
    ? (dirArg as DirectionChoice) : { file: dirArg };
  const requests = (a.values.get('requests') ?? 'harmful,benign').split(',');
  for (const r of requests) if (r !== 'harmful' && r !== 'benign') throw new SafekeepError(`--requests: '${r}' (harmful, benign)`);
  const o: SteerOptions = {
    ...(await runContextOptions(a)),
    alphas: parseAlphas(a.values.get('alphas') ?? '0,4,8,12'),
    layer,
    direction,
    maxNewTokens: numberValue(a, 'max-new-tokens', 256),
    requests: requests as Array<'harmful' | 'benign'>,
  };
  const shardArg = a.values.get('shard');
  if (shardArg !== undefined) {
    const s = await steerShard(o, parseShard(shardArg));
    process.stdout.write(`shard ${shardArg}: ${s.items} generation batches (${s.tokens} tokens), generated ${s.computedRows} outputs in ${s.seconds.toFixed(1)} s → ${s.dir}\n`);
    return 0;
  }
  const r = await steerSweep(o);
  const pct = (k: number, n: number): string => (n ? `${((100 * k) / n).toFixed(1)}%` : '-');
  const lines = [`steering at ℓ* = ${r.layer} (mean ‖hidden[ℓ*]‖ = ${r.meanNorm.toFixed(3)}), direction: ${r.sweeps[0]?.direction ?? ''}`];
  for (const s of r.sweeps) {
    for (const row of s.rows) {
      lines.push(`  ${s.requests.padEnd(7)} α=${String(row.alpha).padEnd(9)} (${row.alphaRelative?.toFixed(3)}×‖h‖)  refusal ${pct(row.counts.refusal, row.n)}  valid ${pct(row.counts.valid, row.n)}  invalid ${pct(row.counts.invalid, row.n)}  (n=${row.n})`);
    }
  }
  process.stdout.write(`${lines.join('\n')}\nTable 3: ${r.outDir}/table3.md\nreport: ${r.report}\n`);
  return 0;
}
